"""Pipeline plans run for real: two gloo processes under torch.distributed.pipelining,
the loss the unsplit model's; and the pipeline task's bad input, one line, exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.exec.pipeline import pipeline_available

runner = CliRunner()
MODEL = "pipe:mlp-uneven:layers=3,hidden=16,batch=8"


def _one_line_exit_2(result, *words):
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error:") and "Traceback" not in result.output
    for w in words:
        assert w in text, text


@pytest.mark.skipif(not pipeline_available(), reason="no torch.distributed.pipelining with gloo")
def test_optimize_then_run_two_processes_loss_matches(tmp_path):
    out = tmp_path / "p"
    r = runner.invoke(app, ["optimize", MODEL, "--task", "pipeline", "--stages", "2",
                            "--microbatches", "2", "--schedule", "1f1b", "--out", str(out)])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "exact" / "pipeline.json").read_text())
    assert plan["format"] == "graphopt-pipeline" and plan["stages"] == 2
    assert plan["schedule"] == "1f1b" and plan["simulated"]["step_time"] > 0
    r = runner.invoke(app, ["run", MODEL, "--pipeline", str(out / "exact" / "pipeline.json"),
                            "--devices", "cpu:2", "--steps", "2"])
    # run --pipeline exits 2 when the loss differs from the unsplit model's
    assert r.exit_code == 0, r.output
    assert "measured" in r.output and "unsplit" in r.output


@pytest.mark.skipif(not pipeline_available(), reason="no torch.distributed.pipelining with gloo")
def test_interleaved_on_two_processes_loss_matches_the_unsplit_model():
    from graphopt.exec.pipeline import measure_pipelines, reference_loss
    from graphopt.sim.pipeline import PipelinePlan
    from graphopt.zoo.pipeline import build_pipeline_model

    # 4 layers, 4 chunks: rank 0 runs layers 0 and 2, rank 1 layers 1 and 3
    plan = PipelinePlan(MODEL, (0, 1, 2, 3, 4), "interleaved", 2, "even", {}, 2)
    m = measure_pipelines(MODEL, [plan], steps=1, warmup=0)[0]
    assert m.loss == pytest.approx(reference_loss(build_pipeline_model(MODEL), 2), rel=1e-5)
    assert len(m.memory) == 2 and all(x > 0 for x in m.memory) and m.median > 0


@pytest.mark.parametrize("args, words", [
    (["--stages", "9"], ["--stages 9", "only 4 blocks"]),
    (["--microbatches", "0"], ["--microbatches 0"]),
    (["--microbatches", "3"], ["--microbatches 3", "does not divide"]),
    (["--schedule", "zb"], ["--schedule", "zb"]),
    (["--schedule", "1f1b", "--microbatches", "1", "--stages", "2"], ["1f1b", "microbatches"]),
    (["--methods", "even,metis"], ["metis", "is no pipeline method"]),
    (["--init", "even"], ["--init", "not an option of --task pipeline"]),
    (["-p", "exact.x=1"], ["-p", "not an option of --task pipeline"]),
    (["--objective", "memory"], ["--objective", "not an option of --task pipeline"]),
    (["--virtual-stages", "3"], ["--virtual-stages", "not an option of --task pipeline"]),
    (["--schedule", "interleaved", "--microbatches", "1"], ["interleaved", "microbatches"]),
    (["--schedule", "interleaved", "--virtual-stages", "3"], ["--virtual-stages 3", "6 blocks"]),
    (["--schedule", "interleaved", "--stages", "1"], ["interleaved", "2 or more stages"]),
])
def test_optimize_pipeline_bad_input(args, words):
    _one_line_exit_2(runner.invoke(app, ["optimize", MODEL, "--task", "pipeline", *args]), *words)


def test_pipeline_task_needs_a_pipe_model_and_run_a_matching_plan(tmp_path):
    _one_line_exit_2(runner.invoke(app, ["optimize", "example:mlp", "--task", "pipeline"]),
                     "a generated graph", "py:FILE.py:FACTORY")
    _one_line_exit_2(runner.invoke(app, ["optimize", "pipe:resnet", "--task", "pipeline"]),
                     "unknown pipeline model")
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"format": "graphopt-pipeline", "model": "pipe:mlp",
                                "bounds": [0, 2, 9], "schedule": "gpipe", "microbatches": 2}))
    _one_line_exit_2(runner.invoke(app, ["run", MODEL, "--pipeline", str(plan)]),
                     "splits pipe:mlp")
    _one_line_exit_2(runner.invoke(app, ["run", "pipe:mlp", "--pipeline", str(plan),
                                         "--devices", "cpu:3"]), "2 stages")
    _one_line_exit_2(runner.invoke(app, ["run", "pipe:mlp", "--pipeline", str(tmp_path / "none")]),
                     "none")



def test_profile_layers_times_every_layer_and_leaves_the_model_as_it_was():
    import numpy as np
    import torch

    from graphopt.exec.pipeline import pipeline_problem, profile_layers
    from graphopt.hardware import load_cluster
    from graphopt.zoo.pipeline import build_pipeline_model

    model = build_pipeline_model(MODEL)
    before = [p.detach().clone() for p in model.module.parameters()]
    threads = torch.get_num_threads()
    prof = profile_layers(model, 2, reps=2)
    t, u = prof.time, prof.update
    assert t.shape == u.shape == prof.saved.shape == (len(model.layers),)
    assert (t > 0).all() and (u >= 0).all() and np.isfinite(t).all()
    # a Linear saves its input (4 examples of 16 floats) for its weight's gradient; a
    # parameter is never counted
    assert prof.saved[0] >= 4 * 16 * 4 and (prof.saved > 0).all()
    assert torch.get_num_threads() == threads
    after = list(model.module.parameters())
    assert all(torch.equal(a, b) and a.grad is None for a, b in zip(after, before))
    # profiled: the same measured time on every device, activations as autograd saves
    # them; weights still from the graph
    cluster = load_cluster("cpu:2")
    _, roof = pipeline_problem(model, 2, cluster)
    _, costs = pipeline_problem(model, 2, cluster, profile=True)
    assert (costs.time[:, 0] == costs.time[:, 1]).all() and (costs.time > 0).all()
    assert np.array_equal(costs.weights, roof.weights)
    assert np.array_equal(costs.activations, prof.saved)


@pytest.mark.skipif(not pipeline_available(), reason="no torch.distributed.pipelining with gloo")
def test_measure_prices_what_this_host_measures(tmp_path):
    from graphopt.exec.workers import host_cores

    out = tmp_path / "p"
    r = runner.invoke(app, ["optimize", MODEL, "--task", "pipeline", "--stages", "2",
                            "--microbatches", "2", "--measure", "--measure-steps", "1", "--methods",
                            "even,exact", "--out", str(out)])
    assert r.exit_code == 0, r.output
    sim = json.loads((out / "exact" / "pipeline.json").read_text())["simulated"]
    assert sim["profiled"] is True and sim["cores"] == host_cores() and sim["overhead"] > 0
    report = json.loads((out / "report.json").read_text())
    rec = report["recommended"]
    assert rec["default"] == "even-first" and rec["method"] in ("even", "exact", "even-first")
    assert all("measured" in row and row["measured"]["median"] > 0 for row in report["rows"])
    assert "recommended:" in r.output
