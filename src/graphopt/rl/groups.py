"""Inputs of the grouping placers: per-op inputs for a grouper, per-group inputs for a
placer.

Both placers see a group the way grappler's hierarchical controller builds its group
embedding: the group's row and column of the group adjacency matrix (edge counts to and
from every group), a histogram of its op types, and its size (summed FLOPs, bytes moved,
output, persistent and scratch bytes, op count). Every column is ``log1p``-scaled and
divided by its largest value over the groups, so inputs lie in [0, 1] whatever the
graph's scale. Computed directly from the op graph and the grouping: in a training step
a grouping that keeps colocation groups whole has a cyclic group graph, which a placer
does not mind.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from graphopt.ir.features import node_features
from graphopt.ir.graph import Graph

__all__ = ["GroupFeatures", "op_inputs"]


class GroupFeatures:
    """Placer inputs of a batch of groupings of one graph.

    Parameters
    ----------
    graph : Graph

    Examples
    --------
    >>> from graphopt.ir.generate import layered_graph
    >>> g = layered_graph(4, 3, seed=0)
    >>> feats = GroupFeatures(g)
    >>> x = feats(torch.zeros(2, g.num_nodes, dtype=torch.long) + torch.arange(g.num_nodes) % 3, 3)
    >>> tuple(x.shape) == (2, 3, feats.dim(3)), float(x.max())
    (True, 1.0)

    Notes
    -----
    Shapes: groups (B, N) int64 in ``0..G-1`` → (B, G, 2G + T + 6), T the number of op
    types in the graph. O(B·(N + E + G·(G + T))).
    """

    def __init__(self, graph: Graph):
        _, types = np.unique(graph.op, return_inverse=True)
        self.num_types = int(types.max()) + 1 if graph.num_nodes else 0
        self.op_type = torch.as_tensor(types.reshape(-1), dtype=torch.long)
        self.src = torch.tensor(graph.src, dtype=torch.long)
        self.dst = torch.tensor(graph.dst, dtype=torch.long)
        sizes = np.stack([graph.flops, graph.bytes_read + graph.bytes_written, graph.out_bytes,
                          graph.persistent_bytes, graph.temp_bytes, np.ones(graph.num_nodes)], 1)
        self.sizes = torch.as_tensor(sizes, dtype=torch.float64)

    def dim(self, num_groups: int) -> int:
        """Input width for ``num_groups`` groups."""
        return 2 * num_groups + self.num_types + self.sizes.shape[1]

    def __call__(self, groups: Tensor, num_groups: int) -> Tensor:
        b, g = groups.shape[0], num_groups
        adj = torch.zeros(b, g * g, dtype=torch.float64)
        adj.scatter_add_(1, groups[:, self.src] * g + groups[:, self.dst],
                         torch.ones(b, len(self.src), dtype=torch.float64))
        adj = adj.view(b, g, g)
        types = torch.zeros(b, g * self.num_types, dtype=torch.float64)
        types.scatter_add_(1, groups * self.num_types + self.op_type,
                           torch.ones(groups.shape, dtype=torch.float64))
        k = self.sizes.shape[1]
        sizes = torch.zeros(b, g, k, dtype=torch.float64)
        sizes.scatter_add_(1, groups[:, :, None].expand(-1, -1, k), self.sizes.expand(b, -1, -1))
        x = torch.log1p(torch.cat([adj, adj.transpose(1, 2),
                                   types.view(b, g, self.num_types), sizes], dim=2))
        return (x / x.amax(dim=1, keepdim=True).clamp_min(1e-12)).float()


def op_inputs(graph: Graph, adj_slots: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Per-op inputs of a grouper: dense op-type ids and a feature matrix.

    The features are :func:`graphopt.ir.features.node_features` standardized per column,
    then HDP's adjacency slots: the first ``adj_slots`` neighbours of each op (consumers
    +1, producers −1, in edge order), each as (its position in topological order in
    [0, 1], sign), zero-padded.

    Returns
    -------
    op_type : int64 array (N,), in ``0..T-1``
    x : float32 array (N, len(FEATURE_NAMES) + 2 * adj_slots)

    Examples
    --------
    >>> from graphopt.ir.generate import layered_graph
    >>> t, x = op_inputs(layered_graph(4, 3, seed=0), adj_slots=2)
    >>> t.shape, x.shape[0], bool(np.isfinite(x).all())
    ((12,), 12, True)
    """
    n = graph.num_nodes
    _, op_type = np.unique(graph.op, return_inverse=True)
    feats = node_features(graph)[1].astype(np.float64)
    feats = (feats - feats.mean(0)) / np.maximum(feats.std(0), 1e-6)
    node = np.concatenate([graph.src, graph.dst])
    other = np.concatenate([graph.dst, graph.src])
    sign = np.concatenate([np.ones(len(graph.src)), -np.ones(len(graph.dst))])
    order = np.argsort(node, kind="stable")
    node, other, sign = node[order], other[order], sign[order]
    first = np.searchsorted(node, node)  # index of each node's first neighbour entry
    slot = np.arange(len(node)) - first
    keep = slot < adj_slots
    adj = np.zeros((n, adj_slots, 2))
    adj[node[keep], slot[keep]] = np.stack([other[keep] / max(n - 1, 1), sign[keep]], 1)
    x = np.concatenate([feats, adj.reshape(n, -1)], axis=1).astype(np.float32)
    return op_type.reshape(-1).astype(np.int64), x

