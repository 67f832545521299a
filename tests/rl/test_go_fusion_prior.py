"""GO's fusion head starts from XLA's default: the prior's centre is the default pass, and
GO-one never returns a plan slower than the one it was given."""

import numpy as np
import torch

from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim import Budget, optimize
from graphopt.optim.learned.go.env import GOEnv
from graphopt.sim import Plan, Problem, simulate


def _prob() -> Problem:
    return Problem(layered_graph(10, 6, seed=2), load_cluster("p100:2"))


def test_every_node_at_the_top_level_is_xla_default_fusion():
    prob = _prob()
    init = Plan(placement=np.arange(prob.num_nodes) % 2)
    env = GOEnv(prob, frozenset({"fusion"}), "ops", init)
    place, _, fuse = env.plans({"fusion": np.full((1, env.num_units), 3)})
    top = simulate(prob, Plan(placement=place[0], fusion=fuse[0]))
    default = simulate(prob, init)
    assert top.step_time == default.step_time and top.num_kernels == default.num_kernels


def test_the_prior_moves_the_asked_number_of_nodes_and_fixes_the_rest():
    env = GOEnv(_prob(), frozenset({"fusion"}), "ops", fusion_flips=3.0)
    m = env.fusion_matters
    assert m.sum() > 3 and not m.all()
    z = torch.randn(env.num_units, 4)
    p = torch.softmax(env.with_prior({"fusion": torch.zeros(env.num_units, 4)})["fusion"], 1)
    assert torch.isclose((1 - p[m, -1]).sum(), torch.tensor(3.0))
    # a node whose fusion changes nothing always takes the top level, whatever the network
    q = torch.softmax(env.with_prior({"fusion": z})["fusion"], 1)
    assert (q[~m, -1] == 1).all()
    # other tasks pass through untouched
    assert env.with_prior({"placement": z})["placement"] is z


def test_go_one_returns_its_start_when_training_finds_nothing_faster():
    prob = _prob()
    init = Plan(placement=np.arange(prob.num_nodes) % 2)
    start = simulate(prob, init).step_time
    plan, stats = optimize(prob, "go-one", "fusion", Budget(evals=9), init=init, dim=8,
                           units="ops", progress=False)
    assert stats["evals"] == 9 and stats["start_step_time"] == start
    assert simulate(prob, plan).step_time <= start == stats["start_step_time"]
    assert stats["step_time"] == simulate(prob, plan).step_time
