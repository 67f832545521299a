"""The grouping placers' inputs."""

import numpy as np
import torch

from graphopt.ir.generate import mlp_training_graph
from graphopt.rl import GroupFeatures, op_inputs


def test_group_features_count_edges():
    g = mlp_training_graph(layers=2, hidden=16, batch=4)
    feats = GroupFeatures(g)
    one = feats(torch.zeros(1, g.num_nodes, dtype=torch.long), 1)
    assert one.shape == (1, 1, feats.dim(1)) and torch.isfinite(one).all()
    assert float(one[0, 0, 0]) == 1.0  # every edge inside the one group


def test_op_inputs_are_finite_and_typed():
    g = mlp_training_graph(layers=2, hidden=16, batch=4)
    types, x = op_inputs(g, adj_slots=3)
    assert types.shape == (g.num_nodes,) and types.min() == 0
    assert x.shape[0] == g.num_nodes and np.isfinite(x).all()
