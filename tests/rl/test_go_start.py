"""GO started from a plan: the placement prior centred on it, the head that starts at that
prior, and go-finetune's ``start="best"`` (every heuristic first, in the same budget)."""

import numpy as np
import torch

from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim import Budget, optimize
from graphopt.optim.learned.go.method import load_go_policy
from graphopt.optim.learned.go.env import GOEnv
from graphopt.sim import Plan, Problem, simulate


def _prob() -> Problem:
    return Problem(layered_graph(10, 6, seed=2), load_cluster("p100:2"))


def test_the_placement_prior_moves_the_asked_number_of_nodes_off_the_start():
    prob = _prob()
    init = Plan(placement=np.arange(prob.num_nodes) % 2)
    env = GOEnv(prob, frozenset({"placement"}), "ops", init, placement_flips=3.0)
    assert (env.home.numpy() == init.placement).all()
    z = torch.zeros(env.num_units, 8)
    z[:, 2:] = float("-inf")  # the policy's mask of devices the cluster lacks
    p = torch.softmax(env.with_prior({"placement": z})["placement"], 1)
    moved = 1 - p[torch.arange(env.num_units), env.home]
    assert torch.isclose(moved.sum(), torch.tensor(3.0))
    assert (p[:, 2:] == 0).all()
    # no start, or flips 0: no prior
    for e in (GOEnv(prob, frozenset({"placement"}), "ops"),
              GOEnv(prob, frozenset({"placement"}), "ops", init, placement_flips=0.0)):
        assert e.home is None and e.with_prior({"placement": z})["placement"] is z


def test_a_zeroed_head_starts_the_policy_at_the_prior():
    policy, _ = load_go_policy()
    prob = _prob()
    env = GOEnv(prob, frozenset({"placement"}), "groups", Plan(placement=np.zeros(prob.num_nodes, int)))
    policy.zero_head("placement")
    with torch.no_grad():
        z = policy(*env.inputs(), tasks=env.tasks)["placement"]
    assert (z[:, :2] == 0).all() and torch.isinf(z[:, 2:]).all()


def test_go_finetune_from_the_best_heuristic_spends_one_budget_and_never_loses_to_it():
    prob = _prob()
    best, bstats = optimize(prob, "best", "placement", Budget(evals=80), seed=0)
    plan, stats = optimize(prob, "go-finetune", "placement", Budget(evals=80), seed=0,
                           start="best", progress=False)
    assert stats["evals"] == 80
    assert stats["heuristics"] == bstats["heuristics"]
    assert stats["step_time"] <= bstats["step_time"]
    assert simulate(prob, plan).step_time == stats["step_time"]
    rows = np.array([(e, s, b) for e, s, b in stats["history"]], dtype=float)
    assert (np.diff(rows[:, 0]) >= 0).all() and (np.diff(rows[:, 2]) <= 0).all()
    assert rows[-1, 0] <= 80 and rows[-1, 2] == stats["step_time"]


def test_the_scheduling_prior_keeps_most_nodes_at_one_shared_priority():
    env = GOEnv(_prob(), frozenset({"scheduling"}), "ops", scheduling_flips=2.0)
    z = torch.zeros(env.num_units, 4)
    p = torch.softmax(env.with_prior({"scheduling": z})["scheduling"], 1)
    assert torch.isclose((1 - p[:, -1]).sum(), torch.tensor(2.0))
    off = GOEnv(_prob(), frozenset({"scheduling"}), "ops", scheduling_flips=0.0)
    assert off.with_prior({"scheduling": z})["scheduling"] is z
