"""``graphopt bench fusion`` on one quick row of each part, and its bad options."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from graphopt.benchmarks import fusion
from graphopt.cli import app
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.sim import Plan, Problem, simulate

runner = CliRunner()


def test_bench_fusion_runs_every_part(tmp_path, monkeypatch):
    # a small random graph stands for every row: the zoo's are built elsewhere
    monkeypatch.setattr(fusion, "bench_problem", lambda name, cluster, quick: Problem(
        layered_graph(8, 6, seed=1), load_cluster(f"{cluster}:2")))
    out, docs = tmp_path / "f.json", tmp_path / "b.md"
    res = fusion.run(budget=20, table3_rows=("a",), memory_rows=("b",), fractions=(0.9,),
                     multitask_rows=("c",), out=out, progress=False)
    assert json.loads(out.read_text()) == res
    (t3,) = res["table3"]
    # sa starts from XLA's default and keeps it unless it finds better
    assert t3["default"]["step_time"] >= t3["sa"]["step_time"] and t3["sa"]["evals"] <= 20
    (mem,) = res["memory"]
    cells = mem["fractions"]["0.9"]
    assert set(cells) == set(fusion.SCHEDULERS) and not cells["fifo"]["valid"]
    (mt,) = res["multitask"]
    assert set(mt["tasks"]) == set(fusion.TASKS)
    fusion.update_docs(res, docs, "graphopt bench fusion --budget 20")
    text = docs.read_text()
    assert "<!-- fusion:start -->" in text and "graphopt bench fusion --budget 20" in text


def test_multitask_with_go_finetune_never_loses_to_the_defaults(monkeypatch):
    # the joint policy of docs/benchmarks.md: go-finetune from the best heuristic
    monkeypatch.setattr(fusion, "bench_problem", lambda name, cluster, quick: Problem(
        layered_graph(8, 6, seed=1), load_cluster(f"{cluster}:2")))
    res = fusion.run(budget=60, table3_rows=(), memory_rows=(), multitask_rows=("c",),
                     method="go-finetune", progress=False)
    (mt,) = res["multitask"]
    default = mt["default"]["step_time"]
    for task in ("placement", "placement,scheduling,fusion"):
        cell = mt["tasks"][task]
        assert cell["valid"] and cell["step_time"] <= default and cell["evals"] <= 60


@pytest.mark.parametrize("args, message", [
    (["bench", "fusion", "--fractions", "0.9,abc"], "--fractions"),
    (["bench", "fusion", "--fractions", "1.5"], "--fractions"),
    (["optimize", "example:mlp", "--methods", "single", "--memory-fraction", "0"],
     "memory fraction"),
])
def test_bad_options_say_which_in_one_line(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_memory_fraction_keeps_the_persistent_bytes_and_cuts_the_rest():
    prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    peak = simulate(prob, Plan()).peak_memory[0]
    keep = prob.persistent.sum()
    tight = prob.with_memory_fraction(0.5)
    assert np.allclose(tight.capacity, keep + 0.5 * (peak - keep))
    assert not simulate(tight, Plan()).valid and simulate(prob.with_memory_fraction(1.0),
                                                          Plan()).valid
