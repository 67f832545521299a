"""Groupings of ops: what group-level placers place.

A *grouping* is an int array with one group id per node, ``0 .. G-1``, numbered by the
first node of each group in topological order. :func:`colocation_groups` (Mirhoseini
et al. 2017) grows the graph's colocation groups along single-consumer chains;
:func:`bounded_groups` cuts the topological order into at most ``k`` chunks of balanced
weight, keeping a grouping's groups (and colocation groups) whole, which bounds the
length of a placer's decoder.

In a training step a parameter shares a colocation group with its update op, and the
forward and backward ops between them lie on paths from one to the other; a grouping
that keeps such a group whole therefore has a cyclic group graph unless it also holds
those paths. The placers here do not mind (they place groups, then simulate ops);
:func:`bounded_groups` merges the groups on each cycle when asked for an acyclic one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from graphopt.errors import GraphError
from graphopt.ir.graph import Graph

__all__ = ["bounded_groups", "colocation_groups"]

#: FLOPs one byte of memory traffic is worth in :func:`bounded_groups`' default weights:
#: the ridge point of a V100 in FP32 (15.7 TFLOP/s over 900 GB/s).
RIDGE_FLOPS_PER_BYTE = 16.0


# -- groupings ----------------------------------------------------------------------------
def colocation_groups(graph: Graph) -> np.ndarray:
    """Colocation groups grown by merging each group into its only consumer.

    Start from the graph's colocation groups (every other op alone); then, until
    nothing changes, merge every group whose outputs all go to one other group into
    that group — Mirhoseini et al.'s "if A's only consumer is B, colocate A with B",
    applied to groups so chains of any length collapse.

    Returns
    -------
    int64 array, shape (N,)
        Group id per node.

    Notes
    -----
    Merging a group into its only consumer never creates a cycle, so the group graph
    is acyclic when the graph's colocation groups alone leave it acyclic (not so in a
    training step: see the module notes). Each round is O(N + E) in numpy; the number
    of rounds is at most the longest chain of merges, small in practice.

    References
    ----------
    A. Mirhoseini et al., "Device Placement Optimization with Reinforcement Learning",
    ICML 2017.

    Examples
    --------
    >>> from graphopt.ir import GraphBuilder
    >>> b = GraphBuilder("g")
    >>> x = b.add_node("x", "input", out_bytes=4)
    >>> a = b.add_node("a", "relu", inputs=[x])
    >>> c = b.add_node("c", "exp", inputs=[x])
    >>> d = b.add_node("d", "add", inputs=[a, c])
    >>> colocation_groups(b.build()).tolist()  # a and c feed only d; then x feeds only d
    [0, 0, 0, 0]
    """
    labels = _keep_colocation(graph, np.arange(graph.num_nodes, dtype=np.int64))
    while True:
        gs, gd = labels[graph.src], labels[graph.dst]
        cross = gs != gd
        pairs = np.unique(np.stack([gs[cross], gd[cross]], axis=1), axis=0).reshape(-1, 2)
        n_out = np.bincount(pairs[:, 0], minlength=graph.num_nodes)
        only = pairs[n_out[pairs[:, 0]] == 1]
        if not len(only):
            return _canonical(labels)
        labels = _union(labels, only[:, 0], only[:, 1])


def bounded_groups(graph: Graph, target: int, weights: Sequence[float] | np.ndarray | None = None,
                   keep_colocation: bool = True, acyclic: bool = True,
                   units: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """At most ``target`` groups of balanced weight, contiguous in topological order.

    The *units* are what is never split: each op by default, the given grouping
    ``units`` otherwise, and with ``keep_colocation`` every colocation group too. In the
    order of their first op, units are cut into ``target`` chunks of equal total weight
    (a unit belongs to the chunk its weight's midpoint falls in); with at most
    ``target`` units, each unit is a group. Then, with ``acyclic``, groups on a cycle of
    the group graph (which whole colocation groups can create) merge.

    Parameters
    ----------
    graph : Graph
    target : int
        Number of chunks (>= 1); the result has at most this many groups, fewer when
        merges follow or when there are fewer units.
    weights : array of float, shape (N,), optional
        Work per op; default ``max(flops, RIDGE_FLOPS_PER_BYTE * bytes moved)``, a
        roofline estimate in FLOPs. When every weight is 0, every unit weighs the same.
    keep_colocation, acyclic : bool
        See above. Both on, a training step collapses into a few groups (a parameter's
        group holds its update and so every op between its forward and its backward);
        for a training step pass ``acyclic=False`` (a placer of groups does not need an
        acyclic group graph) or ``keep_colocation=False``.
    units : int array, shape (N,), optional
        A grouping to keep whole, e.g. :func:`colocation_groups`' (any labels; equal
        label, same unit).

    Returns
    -------
    int64 array, shape (N,)

    Notes
    -----
    O(N + E) plus a strongly-connected-components pass (scipy) when ``acyclic``.

    Examples
    --------
    >>> from graphopt.ir.generate import layered_graph
    >>> g = layered_graph(20, 5, seed=0)
    >>> groups = bounded_groups(g, 8)
    >>> int(groups.max()) + 1, bool((np.diff(groups) >= 0).all())
    (8, True)
    >>> thirds = np.arange(g.num_nodes) // 34  # three units: 34, 34 and 32 ops
    >>> np.bincount(bounded_groups(g, 2, weights=np.ones(g.num_nodes), units=thirds)).tolist()
    [34, 66]
    """
    n = graph.num_nodes
    if target < 1:
        raise GraphError(f"graph {graph.name!r}: target must be >= 1 groups, got {target}")
    w = (np.maximum(graph.flops, RIDGE_FLOPS_PER_BYTE * (graph.bytes_read + graph.bytes_written))
         if weights is None else np.asarray(weights, dtype=np.float64))
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any():
        raise GraphError(f"graph {graph.name!r}: weights must be {n} finite numbers >= 0, got "
                         f"shape {w.shape}")
    labels = np.arange(n, dtype=np.int64) if units is None else _validated_groups(graph, units)
    if keep_colocation:
        labels = _keep_colocation(graph, labels)
    labels = _canonical(labels)
    count = int(labels.max()) + 1 if n else 0
    if count > target:
        unit_w = np.bincount(labels, weights=w, minlength=count)
        if unit_w.sum() <= 0:
            unit_w = np.ones(count)
        mid = np.cumsum(unit_w) - unit_w / 2
        labels = np.minimum((mid / unit_w.sum() * target).astype(np.int64), target - 1)[labels]
    if acyclic:
        labels = _merge_cycles(graph, labels)
    return _canonical(labels)


# -- helpers ---------------------------------------------------------------------------------
def _canonical(labels: np.ndarray) -> np.ndarray:
    """Relabel to 0..G-1 in order of each label's first node."""
    if not len(labels):
        return labels.astype(np.int64)
    uniq, first, inv = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return rank[inv.reshape(-1)]


def _union(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Labels (ints >= 0) after merging label ``a[i]`` with ``b[i]`` for every i; the
    result is dense (0..G-1), by connected components."""
    g = int(labels.max()) + 1
    adj = sp.coo_matrix((np.ones(len(a)), (a, b)), shape=(g, g))
    _, comp = connected_components(adj, directed=False)
    return comp[labels].astype(np.int64)


def _keep_colocation(graph: Graph, labels: np.ndarray) -> np.ndarray:
    """Merge the groups holding members of one colocation group."""
    members = np.flatnonzero(graph.coloc >= 0)
    if not len(members):
        return labels
    order = members[np.argsort(graph.coloc[members], kind="stable")]
    same = graph.coloc[order][1:] == graph.coloc[order][:-1]
    return _union(labels, labels[order[:-1][same]], labels[order[1:][same]])


def _validated_groups(graph: Graph, groups: Sequence[int] | np.ndarray) -> np.ndarray:
    g = np.asarray(groups)
    if g.shape != (graph.num_nodes,):
        raise GraphError(f"graph {graph.name!r}: groups must have one entry per node "
                         f"({graph.num_nodes}), got shape {g.shape}")
    if len(g) and not np.issubdtype(g.dtype, np.integer):
        raise GraphError(f"graph {graph.name!r}: groups must be integers, got dtype {g.dtype}")
    return _canonical(g.astype(np.int64))


def _group_dag(labels: np.ndarray, graph: Graph) -> tuple[int, np.ndarray]:
    """Strongly connected components of the group graph: (count, component per group)."""
    g = int(labels.max()) + 1 if len(labels) else 0
    gs, gd = labels[graph.src], labels[graph.dst]
    cross = gs != gd
    adj = sp.coo_matrix((np.ones(int(cross.sum())), (gs[cross], gd[cross])), shape=(g, g))
    return connected_components(adj, directed=True, connection="strong")


def _merge_cycles(graph: Graph, labels: np.ndarray) -> np.ndarray:
    labels = _canonical(labels)
    if not len(labels):
        return labels
    count, comp = _group_dag(labels, graph)
    return labels if count == labels.max() + 1 else comp[labels].astype(np.int64)
