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
from graphopt.runs.checkpoint import CheckpointError
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
    from graphopt.costmodel.trainer import _load_eval

    test = [norm(g) for g in _load_eval(meta, None)]
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
    with pytest.raises(CostModelError, match="--split='half'"):
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


@pytest.mark.parametrize("file, edit, message", [
    ("config.json", {"hidden": 1_000_000}, r"config.json: hidden=1000000, expected an integer in 0..8192"),
    ("config.json", {"config_dim": 10**9}, r"config.json: config_dim=1000000000, expected"),
    ("config.json", {"hidden": "wide"}, r"config.json: hidden='wide', expected an integer"),
    ("config.json", {"model": "bogus"}, r"config.json: model 'bogus' unknown"),
    ("config.json", {"model": None}, r"config.json: model None unknown"),
    ("config.json", {"hidden": 32}, r"weights do not match config.json \(\d+ differ in name or shape"),
    ("config.json", [], r"config.json: expected a JSON object"),
    ("checkpoint.json", {"state": [1]}, r"checkpoint.json: its state is not the trainer's"),
    ("checkpoint.json", {"state": {"epoch": "x", "history": [], "gst_keys": []}}, r"its state is not"),
])
def test_a_tampered_run_is_refused_naming_the_file_before_the_model_is_built(tile_dir, tmp_path, file,
                                                                             edit, message):
    """A run folder is outside data: its sizes must not make building the model allocate."""
    run = train(_cfg(tile_dir, tmp_path, epochs=1, run_name="t"))
    doc = json.loads((run / file).read_text())
    (run / file).write_text(json.dumps(edit if isinstance(edit, list) else doc | edit))
    with pytest.raises(CheckpointError, match=message):
        load_run(run)
    with pytest.raises(CheckpointError, match=message):
        train(TrainConfig(resume=str(run), epochs=2, progress=False))


def test_evaluation_runs_every_n_epochs_and_after_the_last(tile_dir, tmp_path):
    run = train(_cfg(tile_dir, tmp_path, epochs=5, eval_every=2, run_name="every2"))
    taus = [row["charts/kendall_tau"] for row in load_run(run)[3]["history"]]
    assert [t is not None for t in taus] == [False, True, False, True, True]
    assert TrainConfig().eval_every == 0  # auto: about 10 evaluations a run


def test_eval_reports_baselines_and_takes_a_chunk(tile_dir, tmp_path):
    run = train(_cfg(tile_dir, tmp_path, epochs=1, run_name="b"))
    res = evaluate(run)
    assert set(res["baselines"]) == {"random", "analytical"}
    assert -1 <= res["baselines"]["random"]["kendall_tau"] <= 1
    assert evaluate(run, chunk=4)["overall"].keys() == res["overall"].keys()
    with pytest.raises(CostModelError, match="chunk must be >= 1"):
        evaluate(run, chunk=0)


def test_proxy_refuses_config_features_of_another_width(tmp_path):
    from graphopt.costmodel.analytical import layout_proxy, tile_proxy
    from graphopt.costmodel.data import load_dataset

    lay = write_layout(tmp_path / "lay.npz", node_config_feat=np.full((10, 3, 12), -1, np.float32))
    with pytest.raises(CostModelError, match="lay.npz: config features are 12 wide; .* 18"):
        layout_proxy(load_dataset(lay)[0])
    tile = write_tile(tmp_path / "tile.npz", config_feat=np.ones((12, 20), np.float32))
    with pytest.raises(CostModelError, match="tile.npz: config features are 20 wide; .* 24"):
        tile_proxy(load_dataset(tile)[0])


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


def test_cli_eval_labels_rows_and_shows_baselines(tile_dir, tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    run = train(_cfg(tile_dir, tmp_path, epochs=1, run_name="cli"))
    r = CliRunner().invoke(app, ["costmodel", "eval", str(run), "--chunk", "4",
                                 "--json", str(tmp_path / "m.json")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "mean of 2 graphs" in r.output and "baseline: random" in r.output
    assert "baseline: analytical" in r.output
    assert "baselines" in json.loads((tmp_path / "m.json").read_text())


def test_info_warns_on_a_file_without_shapes(tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    pruned = write_tile(tmp_path / "pruned.npz", node_feat=np.ones((6, 20), np.float32))
    r = CliRunner().invoke(app, ["info", str(pruned)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "warning:" in r.output and "no op has a shape" in r.output
    r = CliRunner().invoke(app, ["info", str(write_tile(tmp_path / "full.npz"))])
    assert r.exit_code == 0 and "warning" not in r.output


def test_a_layout_file_of_10_config_columns_trains_without_the_analytical_row(tmp_path):
    """Issue 37: config features pruned to 10 columns used to stop the run at its end
    ("the layout proxy reads TpuGraphs' 18"); the model trains with defaults, the
    analytical baseline is left out with a note naming the file."""
    from typer.testing import CliRunner

    from graphopt.cli import app

    rng = np.random.default_rng(0)
    ncf = np.full((12, 3, 10), -1, np.float32)
    ncf[1:] = rng.integers(-1, 3, (11, 3, 10))
    lay = write_layout(tmp_path / "lay10.npz", c=12, node_config_feat=ncf)
    r = CliRunner().invoke(app, ["costmodel", "train", "--data", str(lay), "--split", "configs",
                                 "--out", str(tmp_path / "runs")], env={"COLUMNS": "300"})
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "baseline: random" in r.output and "baseline: analytical" not in r.output
    assert f"note: baseline 'analytical' left out: {lay}: config features are 10 wide; the " \
           "layout proxy reads TpuGraphs' 18" in r.output, r.output
    run = next((tmp_path / "runs").iterdir())
    res = evaluate(run)
    assert "analytical" not in res["baselines"] and res["notes"] == [
        f"baseline 'analytical' left out: {lay}: config features are 10 wide; the layout proxy "
        "reads TpuGraphs' 18"]
