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
                            "--microbatches", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    plan = json.loads((out / "exact" / "pipeline.json").read_text())
    assert plan["format"] == "graphopt-pipeline" and plan["stages"] == 2
    assert plan["schedule"] == "1f1b" and plan["simulated"]["step_time"] > 0
    r = runner.invoke(app, ["run", MODEL, "--pipeline", str(out / "exact" / "pipeline.json"),
                            "--devices", "cpu:2", "--steps", "2"])
    # run --pipeline exits 2 when the loss differs from the unsplit model's
    assert r.exit_code == 0, r.output
    assert "measured" in r.output and "unsplit" in r.output


@pytest.mark.parametrize("args, words", [
    (["--stages", "9"], ["--stages 9", "only 4 layers"]),
    (["--microbatches", "0"], ["--microbatches 0"]),
    (["--microbatches", "3"], ["--microbatches 3", "does not divide"]),
    (["--schedule", "zb"], ["--schedule", "zb"]),
    (["--schedule", "1f1b", "--microbatches", "1", "--stages", "2"], ["1f1b", "microbatches"]),
    (["--methods", "even,metis"], ["metis", "no pipeline method"]),
])
def test_optimize_pipeline_bad_input(args, words):
    _one_line_exit_2(runner.invoke(app, ["optimize", MODEL, "--task", "pipeline", *args]), *words)


def test_pipeline_task_needs_a_pipe_model_and_run_a_matching_plan(tmp_path):
    _one_line_exit_2(runner.invoke(app, ["optimize", "zoo:gnmt-2", "--task", "pipeline"]),
                     "pipe:NAME")
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
