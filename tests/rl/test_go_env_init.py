"""GO's environment takes the decisions of the tasks its policy is not given from ``init``."""

import numpy as np

from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim import Budget, optimize
from graphopt.optim.learned.go.env import GOEnv
from graphopt.sim import Plan, Problem


def test_a_fusion_only_policy_fuses_on_the_given_placement():
    prob = Problem(layered_graph(6, 4, seed=0), load_cluster("p100:2"))
    init = Plan(placement=np.arange(prob.num_nodes) % 2)
    env = GOEnv(prob, frozenset({"fusion"}), init=init)
    place, prio, fuse = env.plans({"fusion": np.ones((3, env.num_units))})
    assert (place == init.placement).all() and place.shape == (3, prob.num_nodes)
    assert prio is None and fuse.shape == (3, prob.num_nodes)
    assert (GOEnv(prob, frozenset({"fusion"})).plans({"fusion": np.ones((1, env.num_units))})[0] == 0).all()
    plan, stats = optimize(prob, "go", "fusion", Budget(evals=4), init=init)
    assert (plan.placement == init.placement).all() and stats["evals"] == 4
