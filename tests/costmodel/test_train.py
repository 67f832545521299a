import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from graphopt.costmodel.data import CostModelError
from graphopt.costmodel.metrics import kendall_tau
from graphopt.costmodel.trainer import TrainConfig, _model_from, evaluate, load_run, rank, score_graph, train
from graphopt.rl.checkpoint import CheckpointError
from tests.conftest import real_tpugraphs
from tests.costmodel.conftest import write_layout, write_tile


@pytest.fixture
def tile_dir(tmp_path):
    torch.set_num_threads(1)
    d = tmp_path / "tile"
    d.mkdir()
    for i in range(6):
        write_tile(d / f"k{i}.npz", n=5 + i, c=16, seed=i)
    return d


def _cfg(data, out, **kw):
    base = {"data": str(data), "out": str(out), "epochs": 8, "hidden": 16, "op_embed": 8,
            "configs_per_graph": 16, "lr": 3e-3, "split": "graphs", "test_fraction": 0.34,
            "progress": False, "seed": 0}
    return TrainConfig(**(base | kw))


def test_training_learns_a_rule(tile_dir, tmp_path):
    run = train(_cfg(tile_dir, tmp_path / "runs", epochs=25))
    meta, model, norm, _ = load_run(run)
    from graphopt.costmodel.trainer import _prepare

    test = _prepare(meta, norm, None)
    torch.manual_seed(0)
    fresh = _model_from(meta)
    before = np.mean([kendall_tau(score_graph(fresh, g), g.runtime) for g in test])
    after = evaluate(run)["overall"]["kendall_tau"]
    assert after > max(before, 0.0) + 0.2 and after > 0.6
    for f in ("config.json", "checkpoint.json", "weights.safetensors", "log.csv", "curve.png"):
        assert (run / f).is_file()
    top = rank(run, tile_dir / "k0.npz", top=3)
    assert len(top) == 1 and len(top[0]["top"]) == 3 and top[0]["configs"] == 16


def test_resume_round_trips_exactly(tile_dir, tmp_path):
    whole = train(_cfg(tile_dir, tmp_path, epochs=3, run_name="whole"))
    half = train(_cfg(tile_dir, tmp_path, epochs=1, run_name="half"))
    train(TrainConfig(resume=str(half), epochs=3, progress=False))
    a, b = load_file(str(whole / "weights.safetensors")), load_file(str(half / "weights.safetensors"))
    assert a.keys() == b.keys() and any(k.startswith("optim.") for k in a)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((half / "checkpoint.json").read_text())["state"]["epoch"] == 2
    # load_run gives back the same weights
    _, model, _, _ = load_run(whole)
    assert all(torch.equal(v, a[f"model.model.{k}"]) for k, v in model.state_dict().items())


def test_gst_and_layout_models_train(tmp_path):
    d = tmp_path / "lay"
    d.mkdir()
    for i in range(3):
        write_layout(d / f"g{i}.npz", n=30, c=8, seed=i)
    for model in ("layout_gcn", "config_attention"):
        run = train(_cfg(d, tmp_path, epochs=2, model=model, gst=True, segment_size=10, split="configs",
                         loss="hinge", run_name=f"gst-{model}"))
        assert json.loads((run / "config.json").read_text())["model"] == model
        assert "data.gst.0.stats" in load_file(str(run / "weights.safetensors"))


def test_bad_options_and_runs(tile_dir, tmp_path):
    with pytest.raises(CostModelError, match="model 'gat' unknown"):
        train(_cfg(tile_dir, tmp_path, model="gat"))
    with pytest.raises(CostModelError, match="split 'half'"):
        train(_cfg(tile_dir, tmp_path, split="half"))
    with pytest.raises(CostModelError, match="missing config.json"):
        evaluate(tmp_path)
    run = train(_cfg(tile_dir, tmp_path, epochs=1, run_name="r"))
    (run / "weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="checkpoint"):
        load_run(run)
    (lay := tmp_path / "l.npz")
    write_layout(lay)
    run = train(_cfg(tile_dir, tmp_path, epochs=1, run_name="r2"))
    with pytest.raises(CostModelError, match="trained on tile"):
        evaluate(run, lay)


def test_bench_script_smoke(tmp_path):
    """The real-data benchmark runs end to end on a tiny budget (subprocess, like CleanRL)."""
    if real_tpugraphs("op_tuning_data.pb") is None:
        pytest.skip("real TpuGraphs records not present")
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "bench/costmodel_real.py", "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert {"layout", "tile"} <= set(res["results"])
