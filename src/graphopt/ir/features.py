"""Node features for learned models, computed from the IR alone."""

from __future__ import annotations

import re

import numpy as np

from graphopt.ir.graph import MAX_RANK, Graph
from graphopt.ir.ops import OP_CLASSES, class_ids, op_ids

__all__ = ["FEATURE_NAMES", "MODULE_FEATURE_NAMES", "layer_of", "module_features", "node_features"]

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
