"""GO's environment: features, plans that keep colocation groups whole, task subsets."""

from __future__ import annotations

import numpy as np
import torch

from graphopt.ir.coarsen import colocation_groups
from graphopt.optim.learned.go.env import UNIT_FEATURES, GOEnv
from graphopt.sim import simulate_batch

ALL = frozenset({"placement", "scheduling", "fusion"})



def test_env_features_are_finite_and_bounded(training_prob):
    env = GOEnv(training_prob, ALL)
    assert env.x.shape == (env.num_units, len(UNIT_FEATURES))
    assert torch.isfinite(env.x).all() and env.x.abs().max() < 10
    assert env.edge_index.max() < env.num_units
    assert (env.edge_index[0] != env.edge_index[1]).all()
    ops = GOEnv(training_prob, ALL, units="ops")
    assert ops.num_units == training_prob.num_nodes


def test_env_plans_keep_colocation_groups_whole(training_prob):
    env = GOEnv(training_prob, ALL)
    rng = np.random.default_rng(0)
    actions = {"placement": rng.integers(0, 2, (5, env.num_units)),
               "scheduling": rng.integers(0, 8, (5, env.num_units)),
               "fusion": rng.integers(0, 4, (5, env.num_units))}
    place, prio, fuse = env.plans(actions)
    assert place.shape == prio.shape == fuse.shape == (5, training_prob.num_nodes)
    groups = colocation_groups(training_prob.graph)
    for row in place:
        for gid in np.unique(groups):
            assert len(np.unique(row[groups == gid])) == 1
    res = simulate_batch(training_prob, place, prio, fuse)
    assert not (res.reason_code == 2).any()  # no split colocation group


def test_env_task_subset_leaves_defaults(prob):
    env = GOEnv(prob, frozenset({"scheduling"}))
    place, prio, fuse = env.plans({"scheduling": np.zeros((2, env.num_units), np.int64)})
    assert (place == 0).all() and prio is not None and fuse is None
