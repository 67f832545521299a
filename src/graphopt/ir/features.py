"""Node features for learned models, computed from the IR alone."""

from __future__ import annotations

import re
from collections import deque

import numpy as np

from graphopt.ir.graph import MAX_RANK, Graph
from graphopt.ir.ops import OP_CLASSES, class_ids, op_ids

__all__ = ["FEATURE_NAMES", "MODULE_FEATURE_NAMES", "layer_of", "layer_order", "layer_share",
           "module_features", "node_features"]

FEATURE_NAMES: tuple[str, ...] = (
    *(f"log_dim{k}" for k in range(MAX_RANK)), "rank", "log_numel",
    "log_flops", "log_bytes_read", "log_bytes_written", "log_out_bytes",
    "log_persistent_bytes", "log_temp_bytes", "log_in_degree", "log_out_degree",
    "topo_position", "depth_position", *(f"class_{c}" for c in OP_CLASSES),
)


def node_features(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """``(op_ids, features)`` for every node.

    Returns
    -------
    op_ids : int64 array, shape (N,)
        Op-type ids from :data:`graphopt.ir.ops.OP_VOCAB`, for an embedding table.
    features : float32 array, shape (N, len(FEATURE_NAMES))
        Output shape padded to MAX_RANK (``log1p`` of each dim, 0 for padding), rank,
        ``log1p`` of element count, FLOPs and byte counts, in/out degree, position in
        topological order and in depth (both scaled to [0, 1]), one-hot op class.

    Examples
    --------
    >>> from graphopt.ir.generate import layered_graph
    >>> ids, x = node_features(layered_graph(5, 4, seed=0))
    >>> x.shape == (20, len(FEATURE_NAMES))
    True
    """
    n = graph.num_nodes
    shape = graph.shape.astype(np.float64)
    dims = np.log1p(np.where(shape > 0, shape, 0.0))
    numel = np.where(shape > 0, shape, 1.0).prod(axis=1)
    depth = graph.depth.astype(np.float64)
    cid = class_ids(graph.op)
    onehot = np.zeros((n, len(OP_CLASSES)))
    onehot[np.arange(n), cid] = 1.0
    cols = [
        dims, graph.rank[:, None].astype(np.float64), np.log1p(numel)[:, None],
        *(np.log1p(a)[:, None] for a in (graph.flops, graph.bytes_read, graph.bytes_written,
                                          graph.out_bytes, graph.persistent_bytes, graph.temp_bytes,
                                          graph.in_degree.astype(np.float64),
                                          graph.out_degree.astype(np.float64))),
        (np.arange(n) / max(n - 1, 1))[:, None], (depth / max(depth.max(initial=0), 1))[:, None],
        onehot,
    ]
    return op_ids(graph.op), np.concatenate(cols, axis=1).astype(np.float32)


_INDEX = re.compile(r"^\d+$")

#: Columns of :func:`module_features`.
MODULE_FEATURE_NAMES: tuple[str, ...] = ("in_layer", "layer_position", "module_order")


def layer_of(module: str) -> tuple[str, int] | None:
    """``(stack, index)`` of the first numbered component of a module path, else None.

    >>> layer_of("encoder.layers.3.attn"), layer_of("rnn.lstm.1"), layer_of("loss")
    (('encoder.layers', 3), ('rnn.lstm', 1), None)
    """
    parts = module.split(".")
    for i in range(1, len(parts)):
        if _INDEX.match(parts[i]):
            return ".".join(parts[:i]), int(parts[i])
    return None


def module_features(graph: Graph) -> np.ndarray:
    """Where each node sits in the model's module structure, from its module path.

    Columns (:data:`MODULE_FEATURE_NAMES`): whether the path has a numbered layer
    (:func:`layer_of`); the layer's position in its stack, ``(index + 0.5) / count`` (0
    without one); and the rank of the node's module among all modules by first op, in
    [0, 1]. What a human expert reads off the model to split it layer-wise.

    >>> from graphopt.ir.generate import mlp_training_graph
    >>> module_features(mlp_training_graph()).shape[1] == len(MODULE_FEATURE_NAMES)
    True
    """
    names, first, inverse = np.unique(graph.module, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    layers = [layer_of(str(m)) for m in names]
    count: dict[str, int] = {}
    for lay in layers:
        if lay is not None:
            count[lay[0]] = max(count.get(lay[0], 0), lay[1] + 1)
    has = np.array([lay is not None for lay in layers], dtype=np.float64)
    pos = np.array([(lay[1] + 0.5) / count[lay[0]] if lay else 0.0 for lay in layers])
    rank = np.empty(len(names))
    rank[np.argsort(first, kind="stable")] = np.arange(len(names)) / max(len(names) - 1, 1)
    return np.stack([has[inverse], pos[inverse], rank[inverse]], axis=1).astype(np.float32)


def layer_order(graph: Graph) -> np.ndarray:
    """Every node's position when the nodes are read layer by layer: the numbered layers
    (:func:`layer_of`) stack by stack in the order each stack first appears, each in
    index order; a node outside every layer (a dropout module shared by all layers, the
    loss) reads with its nearest node in a layer (breadth-first over edges either way);
    ties, and graphs without layers, in node (topological) order.

    Contiguous runs of this order are a model's layers, each with its forward, backward
    and update ops and the shared ops between them, where runs of the topological order
    of an unrolled recurrent network are time steps across every layer. O(N + E).

    Returns
    -------
    int64 array, shape (N,)
        A permutation of ``0..N-1``: node ``i`` is read ``order[i]``-th.

    >>> from graphopt.ir.generate import mlp_training_graph
    >>> g = mlp_training_graph(layers=3)
    >>> order = layer_order(g)
    >>> bool(order[g.index["layers.0.addmm"]] < order[g.index["layers.2.addmm"]])
    True
    """
    n = graph.num_nodes
    names, first, inverse = np.unique(graph.module, return_index=True, return_inverse=True)
    layers = [layer_of(str(m)) for m in names]
    stack_first: dict[str, int] = {}
    for lay, f in zip(layers, first):
        if lay is not None:
            stack_first[lay[0]] = min(stack_first.get(lay[0], n), int(f))
    stacks = sorted(stack_first, key=stack_first.__getitem__)
    depth = 1 + max((lay[1] for lay in layers if lay is not None), default=0)
    module_key = np.array([stacks.index(lay[0]) * depth + lay[1] if lay is not None else -1
                           for lay in layers], dtype=np.int64)
    key = module_key[inverse.ravel()] if n else np.zeros(0, dtype=np.int64)
    (pp, pi), (sp, si) = graph.pred[:2], graph.succ[:2]
    queue = deque(np.flatnonzero(key >= 0).tolist())
    while queue:
        i = queue.popleft()
        for j in (*pi[pp[i]:pp[i + 1]].tolist(), *si[sp[i]:sp[i + 1]].tolist()):
            if key[j] < 0:
                key[j] = key[i]
                queue.append(j)
    order = np.empty(n, dtype=np.int64)
    order[np.lexsort((np.arange(n), key))] = np.arange(n)
    return order


def layer_share(graph: Graph, order: np.ndarray | None = None) -> np.ndarray:
    """Every node's place in :func:`layer_order` measured in bytes: the share of all
    weight and output bytes read before it, plus half its own, in (0, 1) (0.5 for every
    node of a graph without bytes). Cutting it at k/D splits a model into D runs of
    whole layers (each with its backward ops) holding equal bytes. ``order``: the graph's
    :func:`layer_order` where the caller has it already. O(N + E).

    >>> from graphopt.ir.generate import mlp_training_graph
    >>> g = mlp_training_graph(layers=4)
    >>> s = layer_share(g)
    >>> first, last = s[g.index["layers.0.addmm"]], s[g.index["layers.3.addmm"]]
    >>> bool(0 < s.min() and s.max() < 1 and first < 0.5 < last)
    True
    """
    by_layer = np.argsort(layer_order(graph) if order is None else order)
    w = (graph.persistent_bytes + graph.out_bytes).astype(np.float64)[by_layer]
    total = float(w.sum())
    share = np.empty(graph.num_nodes)
    share[by_layer] = (np.cumsum(w) - w / 2) / total if total > 0 else 0.5
    return share
