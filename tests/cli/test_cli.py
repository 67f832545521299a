"""The ``graphopt`` command: each sub-command runs, and a user's mistake prints one line
and exits 2 without a traceback."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.ir import save_graph
from graphopt.ir.generate import mlp_training_graph
from graphopt.sim import Plan

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_info_and_clusters():
    r = run("info", "example:mlp")
    assert r.exit_code == 0 and "ops" in r.output and "42" in r.output
    r = run("clusters")
    assert r.exit_code == 0 and "dgx1-v100" in r.output and "tpu-v4" in r.output


def test_simulate_writes_trace_gantt_and_json(tmp_path):
    g = mlp_training_graph(layers=2, hidden=64, batch=8)
    gpath = save_graph(g, tmp_path / "g.npz")
    layer = np.array([1 if m.startswith("layers.1") else 0 for m in g.module])
    Plan(placement=layer).save(tmp_path / "plan.json")
    r = run("simulate", gpath, "--cluster", "dgx1-v100:2", "--plan", tmp_path / "plan.json",
            "--trace", tmp_path / "t.json", "--gantt", tmp_path / "g.png",
            "--json", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["valid"] and res["bytes_moved"] > 0 and res["step_time"] >= res["lower_bound"]
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args, needle", [
    (("info", "missing.npz"), "no such file"),
    (("simulate", "example:mlp", "--cluster", "nosuch:2"), "unknown cluster preset"),
    (("simulate", "example:mlp", "--cluster", "dgx1-v100:99"), "cannot take 99"),
    (("simulate", "example:nosuch"), "unknown example graph"),
])
def test_user_errors_exit_2_with_one_line(args, needle):
    r = run(*args)
    assert r.exit_code == 2
    assert needle in r.output and "Traceback" not in r.output


def test_wrong_plan_length_is_a_user_error(tmp_path):
    Plan(placement=np.zeros(3, int)).save(tmp_path / "p.json")
    r = run("simulate", "example:mlp", "--plan", tmp_path / "p.json")
    assert r.exit_code == 2 and "3 entries" in r.output


def test_demo_writes_every_plan(tmp_path):
    r = run("demo", "--out", tmp_path)
    assert r.exit_code == 0, r.output
    for name in ("single", "layer-wise", "no-fusion"):
        assert (tmp_path / name / "gantt.png").exists() and (tmp_path / name / "trace.json").exists()
    assert set(Plan.load(tmp_path / "layer-wise" / "plan.json").placement) == {0, 1}


def test_profile_then_simulate_with_it(tmp_path):
    r = run("profile", "example:mlp", "-o", tmp_path / "p.json", "--repeats", "2")
    assert r.exit_code == 0, r.output
    kind = json.loads((tmp_path / "p.json").read_text())["device_kind"]
    r = run("simulate", "example:mlp", "--cluster", "cpu:1", "--profile",
            f"{tmp_path / 'p.json'}@Xeon-8280")
    assert r.exit_code == 0 and kind, r.output


def test_zoo_list_and_unknown_model(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_CACHE", str(tmp_path))
    r = run("zoo", "list")
    assert r.exit_code == 0 and "gnmt-8" in r.output and "held out" in r.output
    assert "rnnlm-2-quick" in r.output and "transformer-xl-8-quick" in r.output  # the tour's
    r = run("zoo", "build", "nope")
    assert r.exit_code == 2 and "unknown zoo model" in r.output


def test_param_sets_a_methods_hyperparameters(tmp_path):
    r = run("optimize", "example:layered-60", "--cluster", "dgx1-v100:2", "--methods",
            "single,rl-lstm", "--budget", "8", "-p", "rl-lstm.hidden=8",
            "-p", "rl-lstm.progress=false", "-p", "rl-lstm.lr=0.01",
            "-p", f"rl-lstm.checkpoint_dir={tmp_path / 'ckpt'}", "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["params"] == {"rl-lstm": {"hidden": 8, "progress": False, "lr": 0.01,
                                            "checkpoint_dir": str(tmp_path / "ckpt")}}
    stats = report["rows"][1]["stats"]
    assert stats["config"]["hidden"] == 8 and stats["config"]["lr"] == 0.01
    assert (tmp_path / "ckpt" / "weights.safetensors").is_file()


def test_method_params_parses_by_field_type(tmp_path, monkeypatch):
    from graphopt.cli import method_params

    monkeypatch.chdir(tmp_path)  # checkpoint_dir=a=b is checked as a folder here, not in the repo

    got = method_params(["hdp.num_groups=12", "hdp.num_groups=none", "hdp.bidirectional=no",
                         "rl-lstm.tanh_constant=2", "hdp.checkpoint_dir=a=b"], ["hdp", "rl-lstm"])
    assert got == {"hdp": {"num_groups": None, "bidirectional": False, "checkpoint_dir": "a=b"},
                   "rl-lstm": {"tanh_constant": 2.0}}
    assert isinstance(got["rl-lstm"]["tanh_constant"], float)


def test_a_bad_value_in_a_parameter_file_names_the_file(tmp_path):
    from graphopt.cli import method_params
    from graphopt.errors import GraphoptError

    f = tmp_path / "tuned.json"
    f.write_text(json.dumps({"params": {"rl-lstm": {"lr": 0.01, "hidden": 1.5}}}))
    with pytest.raises(GraphoptError, match=r"tuned.json: 'rl-lstm.hidden=1.5': rl-lstm.hidden expects int"):
        method_params([str(f)], ["rl-lstm"])
    f.write_text(json.dumps({"params": {"hdp": {"lr": 0.01}}}))
    with pytest.raises(GraphoptError, match=r"tuned.json: 'hdp.lr=0.01': method 'hdp' is not among"):
        method_params([str(f)], ["rl-lstm"])
    assert method_params([str(f)], ["hdp"]) == {"hdp": {"lr": 0.01}}


@pytest.mark.parametrize("param, needle", [
    ("rl-lstm.lr", "expected METHOD.KEY=VALUE"),
    ("nosuch.lr=1", "'nosuch' is not among the methods run"),
    ("rl-lstm.nosuch=1", "rl-lstm has no parameter 'nosuch'"),
    ("rl-lstm.hidden=1.5", "rl-lstm.hidden expects int, got '1.5'"),
    ("rl-lstm.progress=maybe", "expects bool"),
])
def test_bad_param_is_a_user_error(param, needle):
    for cmd in (("optimize", "example:mlp", "--methods", "rl-lstm"),
                ("bench", "go-table2", "--methods", "rl-lstm", "--rows", "rnnlm-2")):
        r = run(*cmd, "-p", param)
        assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output
