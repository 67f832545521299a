"""``graphopt train regal``, ``graphopt bench regal`` and ``optimize --objective`` as a
person runs them, with tiny budgets."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from graphopt.cli import app

runner = CliRunner()


def test_train_regal_leaves_a_policy_a_checkpoint_and_curves(tmp_path):
    out = tmp_path / "regal"
    args = ["train", "regal", "--corpus", "layered:4x3:0,layered:3x3:1*2", "--updates", "2",
            "--samples", "2", "--evals", "20", "--dim", "8", "--out", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    for name in ("policy.json", "policy.safetensors", "checkpoint.json", "weights.safetensors",
                 "log.csv", "curve.png"):
        assert (out / name).is_file(), name
    info = json.loads((out / "policy.json").read_text())["info"]
    assert info["updates"] == 2 and info["command"].startswith("graphopt train regal")
    # the same command again resumes a finished run: nothing more to do
    assert runner.invoke(app, args).exit_code == 0
    r = runner.invoke(app, ["optimize", "example:layered-30", "-c", "p100:2", "--objective",
                            "memory", "-t", "placement,scheduling", "-m", "brkga,regal", "-b", "50",
                            "-p", f"regal.checkpoint={out}"])
    assert r.exit_code == 0, r.output
    assert "objective memory" in r.output


def test_bench_regal_writes_results_and_its_docs_section(tmp_path):
    res, docs = tmp_path / "r.json", tmp_path / "b.md"
    r = runner.invoke(app, ["bench", "regal", "--objectives", "memory", "--evals", "60",
                            "--seeds", "1", "--graphs", "layered:4x3:101", "--methods",
                            "GP+DFS,BRKGA-5K,REGAL untrained", "--no-train-check", "--out",
                            str(res), "--docs", str(docs)])
    assert r.exit_code == 0, r.output
    rows = json.loads(res.read_text())["results"]["memory"]["layered-4x3-s101"]
    assert set(rows) == {"GP+DFS", "BRKGA-5K", "REGAL untrained"}
    assert rows["BRKGA-5K"]["evals"] == 60
    assert "% improvement over BRKGA-5K" in docs.read_text()


def test_bad_objective_and_method_are_one_line_errors():
    r = runner.invoke(app, ["optimize", "example:layered-30", "--objective", "speed"])
    assert r.exit_code == 2 and "unknown objective 'speed'" in r.output
    r = runner.invoke(app, ["optimize", "example:layered-30", "--objective", "memory",
                            "-m", "brkga,cpsat"])
    assert r.exit_code == 2 and "method cpsat cannot minimise memory" in r.output
    r = runner.invoke(app, ["bench", "regal", "--methods", "BRKGA-6K"])
    assert r.exit_code == 2 and "BRKGA-6K" in r.output
