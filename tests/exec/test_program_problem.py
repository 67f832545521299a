"""``program_problem``: the one entry point from a traced program and a cluster to the
problem ``graphopt run`` and ``graphopt optimize`` simulate; a calibrated cluster (its
``calibration``, not its device kind) first times the program on the workers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.exec import calibrate
from graphopt.exec.api import program_problem
from graphopt.frontends.torch import trace_program
from graphopt.hardware import Calibration, load_cluster, save_cluster
from graphopt.sim import Plan, Problem, simulate


@pytest.fixture
def timed(monkeypatch):
    """engine_problem stood in for by a deterministic one (the real one times the ops on
    this machine, differently each time); the calls it got."""
    calls = []

    def fake(traced, cluster, pool=None):
        calls.append(cluster.name)
        return Problem(traced.graph, cluster.with_program_figures(3e-6, 1.1, ((1e-4, 2e-5),)),
                       max_fusion_size=1)

    monkeypatch.setattr(calibrate, "engine_problem", fake)
    return calls


def _calibrated(devices: int = 2):
    return Calibration(devices, 1, 2e-4, 2e9, 2e-6, 5e10, 1e10, {4: 1e-4, 4 << 20: 2e-3},
                       1.05).cluster(2.0**33)


def test_a_preset_prices_the_program_by_its_roofline(timed):
    traced = trace_program(torch.nn.Linear(8, 4), (torch.randn(3, 8),), training=True)
    c = load_cluster("cpu:2")
    prob = program_problem(traced, c)
    plan = Plan(placement=np.arange(traced.graph.num_nodes) % 2)
    assert simulate(prob, plan).step_time == simulate(Problem(traced.graph, c), plan).step_time
    assert timed == []


def test_a_calibrated_cluster_times_the_program_whatever_its_device_kind(timed):
    traced = trace_program(torch.nn.Linear(8, 4), (torch.randn(3, 8),), training=True)
    cal = _calibrated()
    prob = program_problem(traced, cal)
    assert timed == ["calibrated-cpu"] and prob.cluster.devices[0].dispatch_overhead == 3e-6
    # a calibration under another kind name is still a calibration
    from dataclasses import replace

    renamed = cal._with_devices(replace(d, kind="my-workers") for d in cal.devices)
    program_problem(traced, renamed)
    assert len(timed) == 2


def test_run_and_optimize_measure_predict_one_plan_alike(tmp_path, timed, monkeypatch):
    """Issue 37: the same plan and calibrated cluster file were predicted 9.2 ms by
    'optimize --measure' and 7.35 ms by 'run'. Both now build their problem through
    program_problem (run once); given the same op timings they print the same figure."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(3, 4),)), path)
    cluster = str(save_cluster(_calibrated(), tmp_path / "cluster.toml"))
    r = CliRunner().invoke(app, ["optimize", str(path), "-c", cluster, "--methods", "single,sa",
                                 "--budget", "20", "--measure", "--measure-steps", "1",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert timed == ["calibrated-cpu"]
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["rows"]
    predicted = next(row for row in rows if row["method"] == "sa")["step_time"]

    import graphopt.sim

    seen = []
    real = graphopt.sim.simulate

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        seen.append(res.step_time)
        return res

    monkeypatch.setattr(graphopt.sim, "simulate", spy)
    r = CliRunner().invoke(app, ["run", str(path), "--plan", str(tmp_path / "out" / "sa" / "plan.json"),
                                 "-c", cluster, "--devices", "cpu:2", "--steps", "1"])
    assert r.exit_code == 0, r.output
    assert timed == ["calibrated-cpu"]  # run reused optimize's op times: timed nothing
    # the time, then the peak memory per device (its step time is the same)
    assert seen and set(seen) == {predicted}


def test_run_reuses_the_op_times_optimize_kept_beside_its_plans(tmp_path, monkeypatch):
    """Issue 37: each command timed the program again, on a machine whose timings vary
    from one run to the next, so one plan got two predictions. A stand-in that times
    differently at each call: 'run --plan DIR/sa/plan.json' predicts what 'optimize --out
    DIR' did, from DIR/program_timing.json; a plan elsewhere is timed afresh."""
    import shutil

    import graphopt.sim
    from graphopt.cost.profile import Profile, _signatures
    from graphopt.exec.api import PROGRAM_TIMING
    from graphopt.hardware.cluster import CALIBRATED_KIND

    calls = []

    def noisy(traced, cluster, pool=None):
        calls.append(1)
        k = len(calls)
        profile = Profile(CALIBRATED_KIND, dict.fromkeys(_signatures(traced.graph), 1e-5 * k))
        return Problem(traced.graph, cluster.with_program_figures(3e-6 * k, 1 + 0.1 * k,
                                                                  ((1e-4, 2e-5 * k),)),
                       profile=profile, max_fusion_size=1)

    monkeypatch.setattr(calibrate, "engine_problem", noisy)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(3, 4),)), path)
    cluster = str(save_cluster(_calibrated(), tmp_path / "cluster.toml"))
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["optimize", str(path), "-c", cluster, "--methods", "single,sa",
                                 "--budget", "20", "--measure", "--measure-steps", "1",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert len(calls) == 1 and (out / PROGRAM_TIMING).is_file()
    rows = json.loads((out / "report.json").read_text())["rows"]
    predicted = next(row for row in rows if row["method"] == "sa")["step_time"]
    seen = []
    real = graphopt.sim.simulate

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        seen.append(res.step_time)
        return res

    monkeypatch.setattr(graphopt.sim, "simulate", spy)
    run = ["run", str(path), "-c", cluster, "--devices", "cpu:2", "--steps", "1", "--plan"]
    r = CliRunner().invoke(app, [*run, str(out / "sa" / "plan.json")])
    assert r.exit_code == 0, r.output
    assert len(calls) == 1 and seen and set(seen) == {predicted} and PROGRAM_TIMING in r.output
    first = len(seen)
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(out / "sa" / "plan.json", tmp_path / "elsewhere" / "plan.json")
    r = CliRunner().invoke(app, [*run, str(tmp_path / "elsewhere" / "plan.json")])
    assert r.exit_code == 0, r.output
    assert len(calls) == 2 and predicted not in seen[first:]  # timed again: the stand-in's 2nd times


def test_a_program_timing_of_another_graph_is_ignored_and_a_tampered_one_refused(tmp_path):
    from graphopt.errors import GraphoptError
    from graphopt.exec.api import load_program_timing, save_program_timing

    traced = trace_program(torch.nn.Linear(8, 4), (torch.randn(3, 8),), training=True)
    other = trace_program(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()),
                          (torch.randn(3, 8),), training=True)
    cal = _calibrated()
    prob = Problem(traced.graph, cal.with_program_figures(3e-6, 1.1, ((1e-4, 2e-5),)),
                   max_fusion_size=1)
    path = save_program_timing(prob, traced, cal, tmp_path / "t.json")
    plan = Plan(placement=np.arange(traced.graph.num_nodes) % 2)
    kept = load_program_timing(path, traced, cal)
    assert simulate(kept, plan).step_time == simulate(prob, plan).step_time
    assert load_program_timing(path, other, cal) is None
    assert load_program_timing(tmp_path / "none.json", traced, cal) is None
    doc = json.loads(path.read_text())
    doc["meta"]["program_timing"]["dispatch"] = float("nan")
    path.write_text(json.dumps(doc))
    with pytest.raises(GraphoptError, match="not a program timing"):
        load_program_timing(path, traced, cal)
