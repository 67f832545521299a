"""Grouping ops and the quotient graph of a grouping: what grouping placers work on.

A *grouping* is an int array with one group id per node. :func:`colocation_groups`
(Mirhoseini et al. 2017), :func:`module_groups` and :func:`bounded_groups` make one;
:func:`coarsen` turns a graph and a grouping into the graph of the groups, and
:func:`expand_placement` maps a placement of the groups back onto the ops.

All three groupings keep colocation groups whole (unless told otherwise), so every
placement of their groups expands to a placement that respects colocation. Group ids
are ``0 .. G-1``, numbered by the first node of each group in topological order.

In a training step a parameter shares a colocation group with its update op, and the
forward and backward ops between them lie on paths from one to the other; a grouping
that keeps such a group whole therefore has a cyclic group graph unless it also holds
those paths. :func:`coarsen` rejects a cyclic grouping by default, or merges the groups
on each cycle. :func:`bounded_groups` can instead split colocation groups across its
chunks and leave the constraint to the quotient graph's ``coloc`` field.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from graphopt.errors import GraphError, PlanError
from graphopt.ir.graph import Graph, GraphBuilder

__all__ = ["bounded_groups", "coarsen", "colocation_groups", "expand_placement", "module_groups"]

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


def module_groups(graph: Graph, depth: int, keep_colocation: bool = True) -> np.ndarray:
    """Group ops by the first ``depth`` components of their module path.

    ``depth=2`` puts ``encoder.layers.3.attn.q_proj`` in group ``encoder.layers``; ops
    whose path has fewer components keep their whole path, and ops without a module
    (``""``) form one group. With ``keep_colocation``, module groups that share a
    colocation group merge.

    Examples
    --------
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> g = mlp_training_graph(layers=3, hidden=8, batch=2)
    >>> len(set(module_groups(g, 1).tolist())), len(set(module_groups(g, 2).tolist()))
    (3, 5)
    """
    if depth < 0:
        raise GraphError(f"graph {graph.name!r}: module depth must be >= 0, got {depth}")
    keys = np.array([".".join(str(m).split(".")[:depth]) for m in graph.module], dtype=np.str_)
    labels = np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return _canonical(_keep_colocation(graph, labels) if keep_colocation else labels)


def bounded_groups(graph: Graph, target: int, weights: Sequence[float] | np.ndarray | None = None,
                   keep_colocation: bool = True, acyclic: bool = True) -> np.ndarray:
    """About ``target`` groups of balanced weight, contiguous in topological order.

    Cuts the topological order into ``target`` chunks of equal total weight (an op
    belongs to the chunk its weight's midpoint falls in); such chunks have an acyclic
    group graph. Then:

    - ``keep_colocation``: each colocation group moves whole into the chunk of its
      heaviest member;
    - ``acyclic``: groups on a cycle of the group graph (which moving colocation groups
      can create) merge, so :func:`coarsen` accepts the result.

    Parameters
    ----------
    graph : Graph
    target : int
        Number of chunks (>= 1); the result has at most this many groups, fewer when
        merges follow or when there are fewer ops.
    weights : array of float, shape (N,), optional
        Work per op; default ``max(flops, RIDGE_FLOPS_PER_BYTE * bytes moved)``, a
        roofline estimate in FLOPs.
    keep_colocation, acyclic : bool
        See above. Both on, a training step collapses into a few groups (a parameter's
        group holds its update and so every op between its forward and its backward);
        for a training step pass ``keep_colocation=False`` and let :func:`coarsen` carry
        the colocation groups to the quotient graph's ``coloc``.

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
    """
    n = graph.num_nodes
    if target < 1:
        raise GraphError(f"graph {graph.name!r}: target must be >= 1 groups, got {target}")
    w = (np.maximum(graph.flops, RIDGE_FLOPS_PER_BYTE * (graph.bytes_read + graph.bytes_written))
         if weights is None else np.asarray(weights, dtype=np.float64))
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any():
        raise GraphError(f"graph {graph.name!r}: weights must be {n} finite numbers >= 0, got "
                         f"shape {w.shape}")
    total = w.sum()
    if total <= 0:
        w, total = np.ones(n), float(n)
    mid = np.cumsum(w) - w / 2
    labels = np.minimum((mid / total * target).astype(np.int64), target - 1)
    members = np.flatnonzero(graph.coloc >= 0)
    if keep_colocation and len(members):
        coloc = graph.coloc[members]
        order = np.lexsort((-w[members], coloc))  # heaviest member of each group first
        head = order[np.r_[True, coloc[order][1:] != coloc[order][:-1]]]
        chunk_of = np.zeros(int(coloc.max()) + 1, dtype=np.int64)
        chunk_of[coloc[head]] = labels[members[head]]
        labels[members] = chunk_of[coloc]
    if acyclic:
        labels = _merge_cycles(graph, labels)
    return _canonical(labels)


# -- the quotient graph --------------------------------------------------------------------
def coarsen(graph: Graph, groups: Sequence[int] | np.ndarray,
            merge_cycles: bool = False) -> tuple[Graph, np.ndarray]:
    """The quotient graph of a grouping: one node per group.

    A group node sums its members' FLOPs, bytes read and written, persistent and
    temporary bytes; its ``out_bytes`` sums the outputs of members read outside the
    group. Its op type, dtype and shape are those of its most expensive member (most
    FLOPs, then most bytes moved); its module is the longest common prefix of its
    members' non-empty module paths. An edge joins two groups when any op edge does;
    it carries every distinct tensor crossing once (the largest of a tensor's edges
    into the group, summed over tensors), as the simulator sends a tensor once per
    device. Colocation groups carry over: group nodes holding members of one
    colocation group share a colocation group.

    Parameters
    ----------
    graph : Graph
    groups : int array, shape (N,)
        Any labels (equal label, same group).
    merge_cycles : bool
        ``False``: a grouping whose group graph has a cycle is an error. ``True``: the
        groups on each cycle (each strongly connected component) merge into one.

    Returns
    -------
    quotient : Graph
        Validated; named ``<graph>/<G> groups``, nodes ``group<k>``.
    node_group : int64 array, shape (N,)
        Index in ``quotient`` of each op's group: pass it to :func:`expand_placement`.

    Raises
    ------
    GraphError
        ``groups`` has the wrong length or is not integral, or (without
        ``merge_cycles``) the grouping makes a cycle; the message names groups on it and
        an op of each.

    Notes
    -----
    O(N + E) in numpy, plus O(N) string work for module prefixes and the builder's
    O(G + E' log G) sort of the quotient.

    Examples
    --------
    >>> from graphopt.ir.generate import layered_graph
    >>> g = layered_graph(20, 5, seed=0)
    >>> q, node_group = coarsen(g, bounded_groups(g, 4))
    >>> q.num_nodes, bool(np.isclose(q.flops.sum(), g.flops.sum())), node_group[:3].tolist()
    (4, True, [0, 0, 0])
    """
    labels = _validated_groups(graph, groups)
    if merge_cycles:
        labels = _canonical(_merge_cycles(graph, labels))
    else:
        _raise_on_cycle(graph, labels)
    n_groups = int(labels.max()) + 1 if len(labels) else 0
    gs, gd = labels[graph.src], labels[graph.dst]
    cross = gs != gd

    def total(a: np.ndarray) -> np.ndarray:
        return np.bincount(labels, weights=a, minlength=n_groups)

    leaving = np.zeros(graph.num_nodes, dtype=bool)
    leaving[graph.src[cross]] = True
    moved = graph.bytes_read + graph.bytes_written
    order = np.lexsort((np.arange(graph.num_nodes), -moved, -graph.flops, labels))
    rep = order[np.r_[True, labels[order][1:] != labels[order][:-1]]] if len(order) else order
    modules = _group_modules(graph.module, labels, n_groups)
    coloc = _group_coloc(graph.coloc, labels, n_groups)

    b = GraphBuilder(f"{graph.name}/{n_groups} groups",
                     meta={**graph.meta, "coarsened_from": graph.name, "groups": n_groups})
    cols = [total(a) for a in (graph.flops, graph.bytes_read, graph.bytes_written,
                               graph.out_bytes * leaving, graph.persistent_bytes, graph.temp_bytes)]
    for k in range(n_groups):
        r = rep[k]
        b.add_node(f"group{k}", str(graph.op[r]), shape=graph.shape_of(r), dtype=str(graph.dtype[r]),
                   flops=cols[0][k], bytes_read=cols[1][k], bytes_written=cols[2][k],
                   out_bytes=cols[3][k], persistent_bytes=cols[4][k], temp_bytes=cols[5][k],
                   module=modules[k], coloc=None if coloc[k] < 0 else f"c{coloc[k]}")
    for s, d, nbytes in zip(*_group_edges(graph, labels, cross, n_groups)):
        b.add_edge(int(s), int(d), float(nbytes))
    quotient = b.build()
    position = np.array([quotient.index[f"group{k}"] for k in range(n_groups)], dtype=np.int64)
    return quotient, position[labels] if n_groups else labels


def expand_placement(groups: Sequence[int] | np.ndarray,
                     group_placement: Sequence[int] | np.ndarray) -> np.ndarray:
    """A value per op from a value per group: ``group_placement[groups]``.

    ``groups`` is the node → group array :func:`coarsen` returned (or any grouping whose
    ids index ``group_placement``); the result is a placement (or priorities) of the
    original graph's ops.

    Raises
    ------
    PlanError
        A group id is negative or has no entry in ``group_placement``.

    Examples
    --------
    >>> expand_placement([0, 0, 1, 2, 1], [3, 0, 1]).tolist()
    [3, 3, 0, 1, 0]
    """
    g = np.asarray(groups)
    values = np.asarray(group_placement)
    if g.ndim != 1 or (len(g) and not np.issubdtype(g.dtype, np.integer)):
        raise PlanError(f"groups must be a 1-D integer array, got dtype {g.dtype} shape {g.shape}")
    if values.ndim != 1:
        raise PlanError(f"group_placement must be 1-D, got shape {values.shape}")
    if len(g) and (g.min() < 0 or g.max() >= len(values)):
        bad = int(g.min()) if g.min() < 0 else int(g.max())
        raise PlanError(f"groups refer to group {bad}, but group_placement has {len(values)} "
                        f"entries (groups 0..{len(values) - 1})")
    return values[g]


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


def _raise_on_cycle(graph: Graph, labels: np.ndarray) -> None:
    if not len(labels):
        return
    count, comp = _group_dag(labels, graph)
    if count == labels.max() + 1:
        return
    sizes = np.bincount(comp)
    cyc = np.flatnonzero(comp == np.flatnonzero(sizes > 1)[0])
    first = {int(k): str(graph.names[np.flatnonzero(labels == k)[0]]) for k in cyc[:6]}
    shown = ", ".join(f"{k} (op {name!r})" for k, name in first.items())
    raise GraphError(f"graph {graph.name!r}: the grouping makes a cycle through {len(cyc)} groups: "
                     f"{shown}{', ...' if len(cyc) > 6 else ''}; merge them (coarsen(..., "
                     "merge_cycles=True)) or group without keeping colocation groups whole "
                     "(bounded_groups(..., keep_colocation=False))")


def _group_edges(graph: Graph, labels: np.ndarray, cross: np.ndarray,
                 n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group edges with the bytes of each distinct tensor crossing them counted once."""
    src, gd, eb = graph.src[cross], labels[graph.dst[cross]], graph.edge_bytes[cross]
    if not len(src):
        return src, gd, eb
    key = src * n_groups + gd  # one tensor into one group: its largest edge
    order = np.lexsort((-eb, key))
    head = order[np.r_[True, key[order][1:] != key[order][:-1]]]
    gkey = labels[src[head]] * n_groups + gd[head]
    uniq, inv = np.unique(gkey, return_inverse=True)
    return uniq // n_groups, uniq % n_groups, np.bincount(inv.reshape(-1), weights=eb[head])


def _group_modules(module: np.ndarray, labels: np.ndarray, n_groups: int) -> list[str]:
    """Longest common prefix (in path components) of each group's non-empty modules."""
    prefix: list[list[str] | None] = [None] * n_groups
    for k, m in set(zip(labels.tolist(), module.tolist())):
        if not m:
            continue
        parts = m.split(".")
        cur = prefix[k]
        if cur is None:
            prefix[k] = parts
            continue
        j = 0
        while j < min(len(cur), len(parts)) and cur[j] == parts[j]:
            j += 1
        prefix[k] = cur[:j]
    return [".".join(p) if p else "" for p in prefix]


def _group_coloc(coloc: np.ndarray, labels: np.ndarray, n_groups: int) -> np.ndarray:
    """Colocation id per group: groups holding members of one colocation group share one
    (-1 for groups without colocated members)."""
    out = -np.ones(n_groups, dtype=np.int64)
    members = np.flatnonzero(coloc >= 0)
    if not len(members):
        return out
    n_coloc = int(coloc.max()) + 1
    adj = sp.coo_matrix((np.ones(len(members)), (labels[members], n_groups + coloc[members])),
                        shape=(n_groups + n_coloc,) * 2)
    _, comp = connected_components(adj, directed=False)
    has = np.zeros(n_groups, dtype=bool)
    has[labels[members]] = True
    out[has] = _canonical(comp[:n_groups][has])
    return out
