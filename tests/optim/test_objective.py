"""The memory objective: scored once, by the evaluator, and minimised by every search."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from graphopt.evaluate.local import LocalEvaluator
from graphopt.evaluate.objective import objective_values
from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import Budget, optimize
from graphopt.optim.compare import compare
from graphopt.optim.heuristics._common import units
from graphopt.sim import Plan, Problem, simulate


@pytest.fixture(scope="module")
def prob() -> Problem:
    return Problem(layered_graph(8, 6, seed=1), load_cluster("dgx1-v100:2"))


def test_memory_objective_of_a_plan_is_the_simulators_peak(prob):
    rng = np.random.default_rng(0)
    place = rng.integers(2, size=(6, prob.num_nodes))
    ev = LocalEvaluator(prob, objective="memory")
    res = ev.evaluate(place)
    for i in range(len(place)):
        one = simulate(prob, Plan(placement=place[i]))
        assert objective_values(one, "memory") == pytest.approx(one.peak_memory.max())
        assert ev.score(res)[i] == pytest.approx(one.peak_memory.max())
    best = int(np.argmin(res.peak_memory.max(axis=1)))
    assert ev.best_value == pytest.approx(res.peak_memory[best].max())
    assert np.array_equal(ev.best_plan.placement, place[best])
    assert ev.best_time == pytest.approx(res.step_time[best])


def test_invalid_plans_rank_last_for_both_objectives():
    """All on one device overflows its memory; split by layer, each device holds its half
    (0.22 and 0.20 GiB peaks on 0.21 GiB devices)."""
    g = mlp_training_graph(layers=3, hidden=4096, batch=256)
    c = load_cluster("dgx1-v100:2")
    p = Problem(g, replace(c, devices=tuple(replace(d, memory=0.21 * 2**30) for d in c.devices)))
    rows = np.stack([np.zeros(p.num_nodes, int), units(g.coloc)[0] % 2])
    for objective in ("runtime", "memory"):
        ev = LocalEvaluator(p, objective=objective)
        res = ev.evaluate(rows)
        assert res.valid.tolist() == [False, True]
        s = ev.score(res)
        assert s[0] > ev.bound >= s[1] == objective_values(res, objective)[1]
        assert np.array_equal(ev.best_plan.placement, rows[1])


def test_unknown_objective_and_runtime_only_methods_are_refused(prob):
    with pytest.raises(GraphoptError, match="unknown objective 'speed'.*runtime, memory"):
        Budget(objective="speed")
    with pytest.raises(GraphoptError, match="method rl-lstm cannot minimise memory"):
        optimize(prob, "rl-lstm", budget=Budget(10, objective="memory"))
    with pytest.raises(GraphoptError, match="method go cannot minimise memory"):
        compare(prob, ["brkga", "go"], budget=Budget(10, objective="memory"))


@pytest.mark.parametrize("method", ["brkga", "random-search", "local-search", "sa"])
def test_searches_minimise_the_memory_objective(prob, method):
    """Under the memory objective a search ends at lower peak memory than under runtime
    (same seed and budget), and reports the value it minimised."""
    peaks = {}
    for objective in ("runtime", "memory"):
        plan, stats = optimize(prob, method, "placement,scheduling",
                               Budget(300, objective=objective), seed=0)
        res = simulate(prob, plan)
        assert res.valid and stats["objective"] == objective
        peaks[objective] = res.peak_memory.max()
        if objective == "memory":
            assert stats["value"] == pytest.approx(peaks["memory"])
    assert peaks["memory"] <= peaks["runtime"]


def test_cpsat_minimises_peak_memory_in_the_simulators_terms():
    """With fusion off (its model has none) CP-SAT's peak in the model is the simulated
    peak of the plan it returns, to the KiB, and no worse than its start."""
    pytest.importorskip("ortools")
    from graphopt.ir.generate import mlp_training_graph

    p = Problem(mlp_training_graph(layers=1, hidden=256, batch=8), load_cluster("p100:2"))
    init = Plan(fusion=np.zeros(p.num_nodes))
    # solver seconds of its own, not a budget's: a budget's seconds also pay the model's
    # construction, which on a loaded machine left the solver none
    plan, stats = optimize(p, "cpsat", "placement,scheduling", Budget(10, objective="memory"),
                           seed=0, init=init, workers=1, time_limit=2.0)
    peak = simulate(p, plan).peak_memory.max()
    assert stats["objective"] == "memory" and stats["status"] in ("OPTIMAL", "FEASIBLE")
    assert stats["model_value"] == pytest.approx(peak, abs=1024 * p.num_nodes)
    assert stats["value"] == pytest.approx(peak)
    assert peak <= simulate(p, init).peak_memory.max()
