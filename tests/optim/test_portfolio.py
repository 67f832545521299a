"""``best`` (every heuristic, the fastest plan) and ``portfolio`` (then annealing from it):
one shared budget, never worse than any heuristic, reproducible, a time budget honoured,
and ``--init best`` starts the searches from the best heuristic."""

from __future__ import annotations

import pytest

from graphopt.errors import GraphoptError
from graphopt.ir.generate import layered_graph
from graphopt.optim import Budget, optimize
from graphopt.optim.compare import compare
from graphopt.optim.search.portfolio import HEURISTICS
from graphopt.sim import Problem, simulate
from tests.conftest import cluster

PLACE = frozenset({"placement"})
PROB = Problem(layered_graph(8, 5, seed=1), cluster("dgx1-v100:4"))


def test_best_is_the_fastest_heuristic():
    plan, st = optimize(PROB, "best", PLACE, Budget(500), seed=0)
    alone = {h: optimize(PROB, h, PLACE, Budget(500), seed=0)[0] for h in HEURISTICS.split(",")}
    times = {h: simulate(PROB, p) for h, p in alone.items()}
    fastest = min(r.step_time for r in times.values() if r.valid)
    assert simulate(PROB, plan).step_time == pytest.approx(fastest)
    assert st["chosen"] in alone and st["heuristics"][st["chosen"]] == pytest.approx(fastest)
    assert set(st["heuristics"]) == set(alone)


def test_portfolio_shares_one_budget_and_beats_its_start():
    plan, st = optimize(PROB, "portfolio", PLACE, Budget(400), seed=0)
    assert st["evals"] == 400 == st["heuristic_evals"] + st["sa_evals"]
    assert st["step_time"] <= st["heuristic_step_time"]
    assert simulate(PROB, plan).step_time == pytest.approx(st["step_time"])
    # the history is one curve over both phases: evaluations rise, the best only falls
    evals = [e for e, _, _ in st["history"]]
    best = [t for _, _, t in st["history"]]
    assert evals == sorted(evals) and evals[-1] == 400
    assert best == sorted(best, reverse=True) and best[-1] == pytest.approx(st["step_time"])


def test_portfolio_same_seed_same_plan():
    a, _ = optimize(PROB, "portfolio", PLACE, Budget(200), seed=3)
    b, _ = optimize(PROB, "portfolio", PLACE, Budget(200), seed=3)
    assert (a.placement == b.placement).all()


def test_portfolio_time_budget_cuts_the_heuristics():
    # no time at all: the first heuristic still gives a plan, nothing else runs
    plan, st = optimize(PROB, "portfolio", PLACE, Budget(None, seconds=0.0), seed=0)
    assert list(st["heuristics"]) == ["single"] and st["sa_evals"] == 0
    assert simulate(PROB, plan).valid


def test_portfolio_without_placement_anneals_from_init():
    init, _ = optimize(PROB, "metis", PLACE, Budget(100), seed=0)
    plan, st = optimize(PROB, "portfolio", frozenset({"scheduling"}), Budget(150), seed=0,
                        init=init)
    assert (plan.placement == init.placement).all() and st["heuristics"] == {}
    assert st["step_time"] <= simulate(PROB, init).step_time


def test_init_best_starts_searches_from_the_best_heuristic():
    _, best = optimize(PROB, "best", PLACE, Budget(300), seed=0)
    for r in compare(PROB, ["sa", "brkga", "local-search"], "placement", Budget(300), 0,
                     init="best"):
        assert r.stats["initial_step_time"] == pytest.approx(best["step_time"])
        assert r.step_time <= best["step_time"] + 1e-12


def test_unknown_heuristic_is_refused():
    with pytest.raises(GraphoptError, match="unknown method 'nope'"):
        optimize(PROB, "portfolio", PLACE, Budget(100), seed=0, heuristics="single,nope")
