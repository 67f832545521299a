"""LocalEvaluator: the budget it counts, the batches it cuts, the best plan it keeps."""

from __future__ import annotations

import numpy as np
import pytest

from graphopt.errors import BudgetExhausted, GraphoptError
from graphopt.evaluate.local import LocalEvaluator
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import Budget, optimize
from graphopt.sim import Plan, Problem, simulate_batch


@pytest.fixture(scope="module")
def prob():
    return Problem(layered_graph(6, 4, seed=0), load_cluster("p100:2"))


def test_batches_are_cut_to_the_budget_then_refused(prob):
    ev = LocalEvaluator(prob, max_evals=5)
    plans = np.zeros((3, prob.num_nodes), dtype=np.int64)
    assert len(ev.evaluate(plans).step_time) == 3 and ev.remaining == 2
    assert len(ev.evaluate(plans).step_time) == 2 and ev.evals == 5 and ev.exhausted()
    with pytest.raises(BudgetExhausted):
        ev.evaluate(plans)
    assert ev.evals == 5


def test_best_plan_is_the_fastest_valid_one(prob):
    rng = np.random.default_rng(0)
    plans = rng.integers(0, 2, (16, prob.num_nodes))
    ev = LocalEvaluator(prob)
    res = ev.evaluate(plans)
    ref = simulate_batch(prob, plans)
    assert np.array_equal(res.step_time, ref.step_time)
    best = int(np.argmin(np.where(ref.valid, ref.step_time, np.inf)))
    assert ev.best_time == ref.step_time[best]
    assert np.array_equal(ev.best_plan.placement, plans[best])
    assert ev.remaining is None and not ev.exhausted()


def test_an_invalid_plan_never_becomes_best():
    prob = Problem(mlp_training_graph(), load_cluster("p100:2"))
    split = np.arange(prob.num_nodes) % 2  # splits colocation groups: invalid
    ev = LocalEvaluator(prob)
    res = ev.evaluate(split[None])
    assert not res.valid[0] and ev.best_plan is None and ev.best_time == np.inf
    ev.evaluate(np.zeros((1, prob.num_nodes), dtype=np.int64))
    assert ev.best_plan is not None and np.isfinite(ev.best_time)


def test_a_time_budget_stops_it(prob):
    ev = LocalEvaluator(prob, max_seconds=0.0)
    assert ev.exhausted()
    with pytest.raises(BudgetExhausted):
        ev.evaluate(np.zeros((1, prob.num_nodes), dtype=np.int64))


def test_one_plan_and_batches_share_the_budget(prob):
    ev = LocalEvaluator.from_budget(prob, Budget(evals=4))
    ev.evaluate(np.zeros((2, prob.num_nodes), dtype=np.int64))
    assert ev.fraction_spent() == 0.5
    res = ev.simulate(Plan(placement=np.ones(prob.num_nodes, dtype=np.int64)))
    assert ev.evals == 3 and ev.fraction_spent() == 0.75 and res.valid
    assert ev.best_time <= res.step_time


def test_a_method_that_cannot_simulate_once_says_so_as_a_user_error(prob):
    with pytest.raises(GraphoptError, match="budget spent"):
        optimize(prob, "heft", budget=Budget(evals=None, seconds=0.0))


def test_a_batch_on_another_problem_counts_but_never_becomes_best(prob):
    other = Problem(mlp_training_graph(), load_cluster("p100:2"))
    ev = LocalEvaluator(prob, max_evals=3)
    ev.evaluate(np.zeros((2, other.num_nodes), dtype=np.int64), problem=other)
    assert ev.evals == 2 and ev.best_plan is None
