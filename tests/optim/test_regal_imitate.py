"""REGAL learning from search: elite Betas fitted from long runs, imitation, the controls."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphopt.benchmarks.regal_imitate import (held_out_items, random_policy, shuffled_regal,
                                               summary)
from graphopt.cli import app
from graphopt.corpus import CorpusItem, build_corpus, load_manifest
from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim.base import Budget, optimize
from graphopt.optim.learned.regal.config import ImitateConfig
from graphopt.optim.learned.regal.imitate import (TASK, build_targets, canonical_devices,
                                                  fit_beta, imitate_regal, load_targets)
from graphopt.optim.learned.regal.method import RegalSpace, load_regal_policy
from graphopt.optim.learned.regal.train import regal_inputs
from graphopt.optim.search.brkga import BRKGA
from graphopt.sim import Problem, simulate

runner = CliRunner()

ITEMS = [CorpusItem("example:layered-60-s0", "layered"), CorpusItem("example:layered-60-s1", "albert"),
         CorpusItem("example:layered-60-s2", "layered"),
         CorpusItem("example:layered-60-s9", "wavenet"), CorpusItem("example:layered-60-s8", "bert")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    build_corpus(folder, ITEMS)
    return folder


@pytest.fixture(scope="module")
def targets(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("targets")
    build_targets(corpus, out, evals=300)
    return out


def test_fit_beta_recovers_moments_and_clips():
    x = np.random.default_rng(0).beta(3.0, 5.0, (20_000, 2))
    a, b = fit_beta(x.mean(0), x.var(0), kappa_max=100)
    assert np.allclose(a, 3.0, rtol=0.05) and np.allclose(b, 5.0, rtol=0.05)
    a, b = fit_beta(np.array([0.3, 1.0]), np.zeros(2), kappa_max=20)  # converged genes
    assert np.allclose(a + b, 20) and a[1] == pytest.approx(0.98 * 20)


def test_elite_is_kept_sorted_and_devices_renumbered_to_the_prior():
    p = Problem(layered_graph(6, 4, seed=3), load_cluster("p100:2"))
    space = RegalSpace(p, TASK)
    _, st = BRKGA(population=20).evolve(space, Budget(200, objective="memory"), 0, keep_elite=True)
    assert len(st["elite_keys"]) == 4 and (np.diff(st["elite_scores"]) >= 0).all()
    assert st["elite_scores"][0] == st["value"]
    elite = st["elite_keys"]
    lay = space.layout["placement"]
    swapped = elite.copy()  # the same plans with devices 0 and 1 swapped
    swapped[:, lay] = elite[:, lay].reshape(len(elite), -1, 2)[:, :, ::-1].reshape(len(elite), -1)
    assert np.array_equal(canonical_devices(space, swapped), canonical_devices(space, elite))


def test_targets_resume_and_refuse_other_settings(corpus, targets):
    doc = json.loads((targets / "index.json").read_text())
    assert {v["family"] for v in doc["items"].values()} == {"layered", "albert"}  # train only
    again = build_targets(corpus, targets, evals=300)
    assert again["builds"][-1]["made"] == 0 and len(again["items"]) == 3
    with pytest.raises(GraphoptError, match="other evals"):
        build_targets(corpus, targets, evals=400)
    assert all("gain_pct" in v and v["reference"] > 0 for v in again["items"].values())
    with pytest.raises(GraphoptError, match="no target gains"):
        imitate_regal(targets, targets.parent / "none", ImitateConfig(epochs=1, min_gain=100))
    _, items = load_targets(targets)
    for _, _, arrays in items:
        assert (arrays["alpha"] > 0).all() and (arrays["alpha"] + arrays["beta"] <= 20 + 1e-9).all()


def test_imitation_loss_goes_down_and_resumes_exactly(targets, tmp_path):
    cfg = ImitateConfig(epochs=6, dim=16, lr=1e-2, val_share=0.5)
    a = imitate_regal(targets, tmp_path / "a", cfg)
    assert a["log"][-1]["train_loss"] < 0.9 * a["log"][0]["train_loss"]
    assert a["val_families"] and a["log"][-1]["val_loss"] is not None
    imitate_regal(targets, tmp_path / "b", ImitateConfig(epochs=3, dim=16, lr=1e-2, val_share=0.5))
    imitate_regal(targets, tmp_path / "b", cfg)
    ha, info = load_regal_policy(tmp_path / "a")
    hb, _ = load_regal_policy(tmp_path / "b")
    for (k, va), vb in zip(ha.state_dict().items(), hb.state_dict().values()):
        assert torch.equal(va, vb), k
    assert info["config"]["prior"] == "layer-split" and info["imitation"]["epochs"] == 6


def test_controls(corpus, targets, tmp_path):
    imitate_regal(targets, tmp_path / "p", ImitateConfig(epochs=2, dim=16))
    m = load_manifest(corpus)
    assert sorted(m["items"][k]["family"] for k in held_out_items(m)) == ["bert", "wavenet"]
    p = Problem(layered_graph(6, 4, seed=5), load_cluster("p100:2"))
    # the shuffled control with the identity permutation is the regal method itself
    v, _ = shuffled_regal(p, tmp_path / "p", 1, 300, perm=np.arange(p.num_nodes))
    plan, _ = optimize(p, "regal", "placement,scheduling", Budget(300, objective="memory"), 1,
                       checkpoint=str(tmp_path / "p"))
    assert v == float(simulate(p, plan).peak_memory.max())
    rnd, info = load_regal_policy(random_policy(tmp_path / "p", tmp_path / "r"))
    with torch.no_grad():
        out = rnd(*regal_inputs(p))
    assert out.abs().max() > 0 and out.std(0).max() > 0  # random, node-dependent outputs
    assert info["config"]["prior"] == "layer-split" and info["control"] == "random weights"
    res = {"graphs": {"g": {"family": "f", "rows": {
        "BRKGA-5K": {"values": [100.0]}, "layer-split BRKGA": {"values": [98.0]},
        "REGAL imitation": {"values": [95.0]}, "random weights": {"values": [99.0]},
        "shuffled features": {"values": [97.0]}}}}}
    s = summary(res)
    assert s["regal_minus_prior"] == pytest.approx(3.0) and s["shuffle_loss"] == pytest.approx(2.0)


def test_cli_targets_and_imitate(corpus, tmp_path):
    r = runner.invoke(app, ["corpus", "regal-targets", str(corpus), "--out", str(tmp_path / "t"),
                            "--evals", "200", "--limit", "2"])
    assert r.exit_code == 0, r.output
    assert "2 graphs of 2 families" in r.output
    r = runner.invoke(app, ["train", "regal-imitate", str(tmp_path / "t"), "--out",
                            str(tmp_path / "im"), "--epochs", "2", "--dim", "8"])
    assert r.exit_code == 0, r.output
    assert "epoch 2/2" in r.output and (tmp_path / "im" / "policy.json").is_file()
    r = runner.invoke(app, ["optimize", "example:layered-30", "--objective", "memory", "-m",
                            "regal", "-b", "100", "-t", "placement,scheduling",
                            "-p", f"regal.checkpoint={tmp_path / 'im'}"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["train", "regal-imitate", str(tmp_path / "none"), "--out",
                            str(tmp_path / "x")])
    assert r.exit_code == 2 and "no REGAL targets" in r.output
    r = runner.invoke(app, ["corpus", "regal-targets", str(corpus), "--out", str(tmp_path / "t"),
                            "--evals", "300", "--limit", "1"])
    assert r.exit_code == 2 and "other evals" in r.output


def test_benchmark_runs_every_row_on_the_held_out_families(corpus, targets, tmp_path):
    from graphopt.benchmarks.regal_imitate import ROWS, run, to_markdown

    imitate_regal(targets, tmp_path / "p", ImitateConfig(epochs=1, dim=8))
    res = run(corpus, tmp_path / "p", evals=60, seeds=1, out=tmp_path / "r.json")
    assert {g["family"] for g in res["graphs"].values()} == {"bert", "wavenet"}
    assert all(set(g["rows"]) == set(ROWS) for g in res["graphs"].values())
    assert json.loads((tmp_path / "r.json").read_text())["settings"]["loadavg_end"]
    text = to_markdown(res)
    assert "shuffled features" in text and "target +1.5" in text and "load average" in text


def test_cli_targets_of_no_corpus_is_one_line(tmp_path):
    r = runner.invoke(app, ["corpus", "regal-targets", str(tmp_path / "nope"), "--out",
                            str(tmp_path / "t")])
    assert r.exit_code == 2 and "not a corpus" in r.output and "Traceback" not in r.output


def test_bench_script_checks_its_output_before_work(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = str(root / "bench" / "regal_imitate.py")
    run = subprocess.run([sys.executable, script, "--candidate", str(tmp_path), "--out",
                          "/proc/x/r.json"], capture_output=True, text=True, timeout=60, cwd=root)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "--out" in run.stderr
