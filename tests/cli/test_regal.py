"""``graphopt train regal``, ``graphopt bench regal`` and ``optimize --objective`` as a
person runs them, with tiny budgets."""

from __future__ import annotations

import json
import re

import numpy as np
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.optim.base import Budget, optimize
from graphopt.optim.learned.regal.method import SHIPPED, load_corpus
from graphopt.sim import simulate

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


def test_bench_regal_writes_results_and_its_docs_section(tmp_path, monkeypatch):
    from graphopt.benchmarks import regal as bench

    monkeypatch.setattr(bench, "CPSAT_SECONDS", 2.0)
    monkeypatch.setattr(bench, "CPSAT_MAX_OPS", 20)
    res, docs = tmp_path / "r.json", tmp_path / "b.md"
    r = runner.invoke(app, ["bench", "regal", "--objectives", "memory", "--evals", "60",
                            "--seeds", "1", "--graphs", "layered:4x3:101,layered:6x4:102",
                            "--methods", "CP-SAT,GP+DFS,BRKGA-5K,REGAL untrained,layer-split BRKGA",
                            "--no-train-check", "--out", str(res), "--docs", str(docs)])
    assert r.exit_code == 0, r.output
    # a line per row as it ends, on a pipe too (issue 37)
    assert re.search(r"^\[1/2\] memory layered-4x3-s101: [\d.]+ s$", r.output, re.M), r.output
    assert re.search(r"^\[2/2\] memory layered-6x4-s102: [\d.]+ s$", r.output, re.M), r.output
    results = json.loads(res.read_text())["results"]["memory"]
    rows = results["layered-4x3-s101"]
    assert set(rows) == {"CP-SAT", "GP+DFS", "BRKGA-5K", "REGAL untrained", "layer-split BRKGA"}
    assert rows["BRKGA-5K"]["evals"] == 60 and rows["layer-split BRKGA"]["evals"] == 60
    # CP-SAT runs on the small graph only (12 ops), and says so
    assert rows["CP-SAT"]["status"] in ("OPTIMAL", "FEASIBLE")
    assert results["layered-6x4-s102"]["CP-SAT"] is None
    text = docs.read_text()
    assert "% improvement over BRKGA-5K" in text and "| CP-SAT | " in text
    assert "CP-SAT: on graphs of at most 20 ops only (1 of 2)" in text


def test_bench_regal_elite_bias_row_runs_its_policy_in_its_own_section(tmp_path):
    pol, res, docs = tmp_path / "eb", tmp_path / "r.json", tmp_path / "b.md"
    r = runner.invoke(app, ["train", "regal", "--corpus", "layered:4x3:0", "--updates", "2",
                            "--samples", "2", "--evals", "20", "--dim", "8", "--elite-bias",
                            "--out", str(pol)])
    assert r.exit_code == 0, r.output
    docs.write_text("<!-- regal:start -->\nmain table\n<!-- regal:end -->\n")
    r = runner.invoke(app, ["bench", "regal", "--objectives", "memory", "--evals", "60",
                            "--seeds", "2", "--graphs", "layered:4x3:101,layered:5x3:102",
                            "--methods", "BRKGA-5K,REGAL,REGAL elite bias,REGAL elite-bias policy "
                            "(bias off)", "--elite-bias-policy",
                            str(pol), "--no-train-check", "--out", str(res), "--docs", str(docs),
                            "--section", "regal-elite-bias"])
    assert r.exit_code == 0, r.output
    result = json.loads(res.read_text())
    assert result["settings"]["elite_bias_policy"]["updates"] == 2
    prob = load_corpus(["layered:4x3:101"])[0]
    row = result["results"]["memory"]["layered-4x3-s101"]
    assert set(row) == {"BRKGA-5K", "REGAL", "REGAL elite bias",
                        "REGAL elite-bias policy (bias off)"}
    # the rows are the regal method with that policy, elite bias on and off, seed for seed
    for label, on in (("REGAL elite bias", True),
                      ("REGAL elite-bias policy (bias off)", False)):
        plans = [optimize(prob, "regal", "placement,scheduling", Budget(60, objective="memory"),
                          s, checkpoint=str(pol), elite_bias=on)[0] for s in range(2)]
        assert row[label]["values"] == [float(simulate(prob, p).peak_memory.max()) for p in plans]
    text = docs.read_text()
    assert "main table" in text  # the main section is left alone
    section = text[text.index("<!-- regal-elite-bias:start -->"):]
    mean = np.mean([100 * (g["BRKGA-5K"]["value"] - g["REGAL elite bias"]["value"])
                    / g["BRKGA-5K"]["value"] for g in result["results"]["memory"].values()])
    assert "| **mean** |" in section and f"**{mean:+.2f}**" in section
    assert "against REGAL elite-bias policy (bias off), one policy" in section
    assert f"--elite-bias-policy {pol}" in section


def test_bad_objective_and_method_are_one_line_errors():
    r = runner.invoke(app, ["optimize", "example:layered-30", "--objective", "speed"])
    assert r.exit_code == 2 and "unknown objective 'speed'" in r.output
    r = runner.invoke(app, ["optimize", "example:layered-30", "--objective", "memory",
                            "-m", "brkga,hdp"])
    assert r.exit_code == 2 and "method hdp cannot minimise memory" in r.output
    r = runner.invoke(app, ["bench", "regal", "--methods", "BRKGA-6K"])
    assert r.exit_code == 2 and "BRKGA-6K" in r.output
    r = runner.invoke(app, ["bench", "regal", "--methods", "REGAL elite bias"])
    assert r.exit_code == 2 and "need a policy trained with --elite-bias" in r.output
    r = runner.invoke(app, ["bench", "regal", "--methods", "REGAL elite bias",
                            "--elite-bias-policy", str(SHIPPED)])
    assert r.exit_code == 2 and "trained without --elite-bias" in r.output
    r = runner.invoke(app, ["bench", "regal", "--methods", "REGAL", "--elite-bias-policy",
                            str(SHIPPED)])
    assert r.exit_code == 2 and "none of the rows that run it" in r.output
