"""Issue 13: every bad input prints one line naming what is wrong and exits 2; no
traceback, no silent acceptance, no work before an unusable output path is refused.

One table: the next case is one line. ``{d}`` is a folder of bad files made once.
"""

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.ir.generate import mlp_training_graph
from graphopt.ir.io import graph_to_dict

runner = CliRunner()
PRESET = Path(__file__).parents[2] / "src/graphopt/hardware/presets/dgx1-v100.toml"


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "file").write_text("x")
    deep = "[" * 100_000 + "]" * 100_000
    (d / "deep.json").write_text('{"format": "graphopt.graph", "version": 1, "nodes": '
                                 f'{deep}, "edges": []}}')
    (d / "deep_plan.json").write_text(deep)
    (d / "deep_profile.json").write_text(deep)
    g = graph_to_dict(mlp_training_graph(layers=1, hidden=8, batch=2))

    def graph(name, **node):
        h = json.loads(json.dumps(g))
        h["nodes"][0].update(node)
        (d / name).write_text(json.dumps(h))
    graph("g.json")
    graph("shape_1e30.json", shape=[10**30])
    graph("flops_1e308.json", flops=1e308)
    graph("bytes_1e20.json", out_bytes=1e20)
    (d / "empty.json").write_text(json.dumps({**g, "nodes": [], "edges": []}))
    base = PRESET.read_text()
    for name, old, new in [("count_50000", "count = 8", "count = 50000"),
                           ("count_0", "count = 8", "count = 0"),
                           ("count_str", "count = 8", 'count = "many"'),
                           ("peak_str", "peak_tflops = {", 'peak_tflops = {x = "a", '),
                           ("latency_list", "latency_us =", "latency_us = [1] #")]:
        assert old in base
        (d / f"{name}.toml").write_text(base.replace(old, new, 1))
    (d / "latin1.toml").write_bytes(b"\xff\xfe" + base.encode())
    plan = {"format": "graphopt.plan", "version": 1}
    (d / "short_plan.json").write_text(json.dumps({**plan, "placement": [0, 1]}))
    (d / "far_plan.json").write_text(json.dumps({**plan, "placement": [7] * len(g["nodes"])}))
    (d / "random.npz").write_bytes(bytes(range(256)) * 8)
    (d / "lfs.npz").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 9\n")
    head = io.BytesIO()  # an array header declaring 16 GiB of names, and no data
    np.lib.format.write_array_header_1_0(head, {"descr": "<U2", "fortran_order": False,
                                                "shape": (2**31,)})
    with zipfile.ZipFile(d / "bomb.npz", "w") as z:
        z.writestr("names.npy", head.getvalue())
    return d


CASES = [
    # files from outside: nesting, sizes, encodings, types
    ("info {d}/deep.json", "nested too deeply"),
    ("simulate example:mlp --plan {d}/deep_plan.json", "nested too deeply"),
    ("simulate example:mlp -c cpu:1 --profile {d}/deep_profile.json", "nested too deeply"),
    ("info {d}/shape_1e30.json", "malformed graph record"),
    ("simulate {d}/flops_1e308.json", "MAX_FLOPS"),
    ("simulate {d}/bytes_1e20.json", "MAX_BYTES"),
    ("simulate {d}/empty.json", "has no ops"),
    ("simulate example:mlp -c {d}/count_50000.toml", "MAX_DEVICES"),
    ("simulate example:mlp -c {d}/count_0.toml", "count = 0"),
    ("simulate example:mlp -c {d}/count_str.toml", "'count'"),
    ("simulate example:mlp -c {d}/peak_str.toml", "malformed value"),
    ("simulate example:mlp -c {d}/latency_list.toml", "'latency_us'"),
    ("simulate example:mlp -c {d}/latin1.toml", "UTF-8"),
    ("simulate example:mlp -c ../../x:2", "unknown cluster preset"),
    ("simulate example:mlp --plan {d}/short_plan.json", "short_plan.json: plan placement has 2"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/far_plan.json", "far_plan.json: plan places node 0"),
    ("info {d}/random.npz", "not an npz archive"),
    ("info {d}/lfs.npz", "Git LFS pointer"),
    ("info {d}/bomb.npz", "GRAPHOPT_MAX_NPZ_BYTES"),
    # built-in graphs with bounds
    ("info example:layered-0", "1..1,000,000"),
    ("info example:layered--5", "1..1,000,000"),
    ("info example:layered-100000000000", "1..1,000,000"),
    # options
    ("optimize example:mlp --methods , --budget 10", "no method named"),
    ("optimize example:mlp --methods sa --budget 10 --seed -1", "--seed"),
    ("optimize example:mlp --methods go -p go.units=foo", "go.units='foo'"),
    ("optimize example:mlp --methods sa -p sa.chains=0", "sa.chains=0"),
    ("optimize example:mlp --methods sa -p sa.chains=-4", "sa.chains=-4"),
    ("optimize example:mlp --methods sa -p sa.reset_every=0", "sa.reset_every=0"),
    ("optimize example:mlp --methods sa -p sa.alpha=nan", "finite"),
    ("optimize example:mlp --methods sa -p sa.initial_temperature=-1", "expected > 0"),
    # every method's hyperparameters have ranges (field metadata, check_params)
    ("optimize example:mlp --methods brkga -p brkga.population=1", "expected >= 2"),
    ("optimize example:mlp --methods brkga -p brkga.elite_fraction=1.5", "expected <= 1"),
    ("optimize example:mlp --methods brkga -p brkga.mutant_alpha=0", "expected > 0"),
    ("optimize example:mlp --methods brkga -p brkga.elite_fraction=0.8 -p brkga.mutant_fraction=0.3",
     "brkga.elite_fraction + brkga.mutant_fraction = 0.8 + 0.3: expected <= 1"),
    ("optimize example:mlp --methods local-search -p local-search.batch_size=0", "expected >= 1"),
    ("optimize example:mlp --methods random-search -p random-search.batch_size=-3", "expected >= 1"),
    ("optimize example:mlp --methods cpsat -p cpsat.time_limit=0", "expected > 0"),
    ("optimize example:mlp --methods rl-lstm -p rl-lstm.hidden=100000", "expected <= 8192"),
    ("optimize example:mlp --methods rl-lstm -p rl-lstm.baseline_decay=2", "expected <= 1"),
    ("optimize example:mlp --methods hdp -p hdp.lr=-1", "hdp.lr=-1"),
    ("optimize example:mlp --methods hdp -p hdp.lr_decay=0", "expected > 0"),
    ("optimize example:mlp --methods go -p go.samples=0", "expected >= 1"),
    ("optimize example:mlp --methods go-one -p go-one.dim=40000", "expected <= 8192"),
    ("optimize example:mlp --methods go-one -p go-one.num_samples=0", "expected >= 1"),
    ("optimize example:mlp --methods go-finetune -p go-finetune.clip_coef=0", "expected > 0"),
    ("profile example:mlp -o {d}/p.json --device bogus", "device 'bogus'"),
    ("train --seed -1 --updates 1 --out {d}/t", "--seed"),
    # output paths, refused before any work
    ("import {d}/file -o {d}", "--output"),
    ("simulate example:mlp --json {d}", "--json"),
    ("simulate example:mlp --trace {d}/file/x.json", "is a file, not a folder"),
    ("simulate example:mlp --gantt {d}/" + "x" * 300 + ".png", "exceeds"),
    ("optimize example:mlp --methods single --out {d}/file", "--out"),
    ("demo --out {d}/file", "--out"),
    ("train --out {d}/file --updates 1", "--out"),
    ("profile example:mlp -o {d}", "--output"),
    ("zoo build rnnlm-2 -o {d}", "--out"),
]


@pytest.mark.parametrize("args, needle", CASES, ids=[c[0][:60] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(d, args, needle):
    r = runner.invoke(app, args.format(d=d).split())
    assert r.exit_code == 2, r.output + repr(r.exception)
    assert needle in r.output and "Traceback" not in r.output


def test_profile_on_cuda_without_it_is_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is here")
    r = runner.invoke(app, ["profile", "example:mlp", "-o", "p.json", "--device", "cuda"])
    assert r.exit_code == 2 and "device 'cuda'" in r.output
