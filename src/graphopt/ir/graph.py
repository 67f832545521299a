"""The graph IR: an immutable DAG of ops held as numpy arrays.

Nodes are stored in a topological order (every edge goes from a lower to a higher
index), which every consumer of the IR relies on: the simulator, the lower bound and
the learned models walk the arrays front to back without sorting. Build graphs with
:class:`GraphBuilder`, which accepts nodes in any order, sorts them and merges
duplicate edges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from graphopt.errors import GraphError

__all__ = ["MAX_BYTES", "MAX_ELEMENTS", "MAX_FLOPS", "MAX_RANK", "Graph", "GraphBuilder", "format_bytes"]

#: Output shapes are stored padded to this rank with -1; higher ranks fold their
#: leading dimensions together (the element count is kept).
MAX_RANK = 8

#: The largest FLOPs of one op and bytes of one size field that :meth:`Graph.validate`
#: accepts: far beyond any real kernel (a zettaFLOP, a pebibyte), so that a value this
#: large is a corrupt or hostile file, not a model.
MAX_FLOPS = 1e21
MAX_BYTES = float(2**50)
#: The most elements one output's shape may hold (the product of its dimensions): a
#: tensor of :data:`MAX_BYTES` of 1-bit elements; a dimension of 2^62 passed alone (each
#: is checked against int64) and wrapped the element count where it was multiplied out.
#: 2^53, below which a float64 holds every whole number: the product is exact.
MAX_ELEMENTS = 2**53

_NODE_FLOAT = ("flops", "bytes_read", "bytes_written", "out_bytes", "persistent_bytes", "temp_bytes")
_NODE_STR = ("names", "op", "dtype", "module")


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False, repr=False)
class Graph:
    """An ML computation graph: ops, their sizes and costs, and the tensors between them.

    Every per-node array has length ``N``; edges are given as ``src``, ``dst`` and
    ``edge_bytes`` of length ``E``. All arrays are read-only.

    Parameters
    ----------
    name : str
        Name of the graph (e.g. ``"gnmt-4"``).
    names : array of str, shape (N,)
        Unique node names.
    op : array of str, shape (N,)
        Op type of each node (see :mod:`graphopt.ir.ops`).
    dtype : array of str, shape (N,)
        Element type of the (first) output, e.g. ``"float32"``.
    shape : int64 array, shape (N, MAX_RANK)
        First output's shape, padded with -1.
    flops, bytes_read, bytes_written : float64 arrays, shape (N,)
        Work of the op: floating point operations and bytes moved to and from memory.
    out_bytes : float64 array, shape (N,)
        Bytes of the output tensors the op materializes (0 for views).
    persistent_bytes : float64 array, shape (N,)
        Bytes that live on the op's device for the whole step (weights, optimizer state).
    temp_bytes : float64 array, shape (N,)
        Scratch bytes held only while the op runs.
    module : array of str, shape (N,)
        Module path the op came from, e.g. ``"encoder.layers.3.attn"`` ("" if unknown).
    coloc : int64 array, shape (N,)
        Colocation group id; nodes sharing an id must run on one device (-1: none). Ids
        are labels: where one is N or more they are renumbered 0.. in their order.
    src, dst : int64 arrays, shape (E,)
        Edge endpoints: ``dst`` consumes an output of ``src``.
    edge_bytes : float64 array, shape (E,)
        Bytes carried by each edge.

    Examples
    --------
    >>> b = GraphBuilder("tiny")
    >>> x = b.add_node("x", "input", shape=(4, 8), out_bytes=128)
    >>> y = b.add_node("y", "relu", shape=(4, 8), flops=32, bytes_read=128,
    ...                bytes_written=128, out_bytes=128, inputs=[x])
    >>> g = b.build()
    >>> g.num_nodes, g.num_edges
    (2, 1)
    """

    name: str
    names: np.ndarray
    op: np.ndarray
    dtype: np.ndarray
    shape: np.ndarray
    flops: np.ndarray
    bytes_read: np.ndarray
    bytes_written: np.ndarray
    out_bytes: np.ndarray
    persistent_bytes: np.ndarray
    temp_bytes: np.ndarray
    module: np.ndarray
    coloc: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    edge_bytes: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        conv = {"src": np.int64, "dst": np.int64, "coloc": np.int64, "shape": np.int64,
                "edge_bytes": np.float64, **dict.fromkeys(_NODE_FLOAT, np.float64)}
        for k in _NODE_STR:
            object.__setattr__(self, k, _frozen(np.asarray(getattr(self, k), dtype=np.str_)))
        for k, t in conv.items():
            try:
                arr = np.asarray(getattr(self, k), dtype=t)
            except (TypeError, ValueError) as err:
                raise GraphError(f"graph {self.name!r}: field {k!r} is not numeric: {err}") from err
            object.__setattr__(self, k, _frozen(arr))
        n = len(self.names)
        if self.shape.ndim != 2 or self.shape.shape != (n, MAX_RANK):
            raise GraphError(f"graph {self.name!r}: shape must be ({n}, {MAX_RANK}), "
                             f"got {self.shape.shape}")
        for k in (*_NODE_STR, *_NODE_FLOAT, "coloc"):
            a = getattr(self, k)
            if a.shape != (n,):
                raise GraphError(f"graph {self.name!r}: {k} has shape {a.shape}, expected ({n},)")
        if n and int(self.coloc.max()) >= n:
            # ids are labels: number them 0.. in order, so that what sizes arrays by the
            # largest id (a group table, a bincount) never allocates for an id of 2^63-1
            dense, grouped = self.coloc.copy(), self.coloc >= 0
            dense[grouped] = np.unique(self.coloc[grouped], return_inverse=True)[1]
            object.__setattr__(self, "coloc", _frozen(dense))
        e = len(self.src)
        for k in ("dst", "edge_bytes"):
            if getattr(self, k).shape != (e,):
                raise GraphError(f"graph {self.name!r}: {k} has shape {getattr(self, k).shape}, "
                                 f"expected ({e},) like src")

    # -- sizes and lookups ------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def __len__(self) -> int:
        return self.num_nodes

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, nodes={self.num_nodes}, edges={self.num_edges})"

    @cached_property
    def index(self) -> dict[str, int]:
        """Node name → node index."""
        return {str(n): i for i, n in enumerate(self.names)}

    @cached_property
    def rank(self) -> np.ndarray:
        """Rank of each node's first output (int64, shape (N,))."""
        return (self.shape >= 0).sum(axis=1)

    def shape_of(self, i: int) -> tuple[int, ...]:
        """Output shape of node ``i`` as a tuple."""
        return tuple(int(d) for d in self.shape[i] if d >= 0)

    # -- adjacency (CSR, both directions) --------------------------------------------
    @cached_property
    def succ(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Successor CSR ``(indptr (N+1,), nodes (E,), edge ids (E,))``, in edge order per node."""
        return _csr(self.src, self.dst, self.num_nodes)

    @cached_property
    def pred(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Predecessor CSR ``(indptr (N+1,), nodes (E,), edge ids (E,))``, in edge order per node."""
        return _csr(self.dst, self.src, self.num_nodes)

    def successors(self, i: int) -> np.ndarray:
        ptr, nodes, _ = self.succ
        return nodes[ptr[i]:ptr[i + 1]]

    def predecessors(self, i: int) -> np.ndarray:
        ptr, nodes, _ = self.pred
        return nodes[ptr[i]:ptr[i + 1]]

    @cached_property
    def in_degree(self) -> np.ndarray:
        return np.bincount(self.dst, minlength=self.num_nodes).astype(np.int64)

    @cached_property
    def out_degree(self) -> np.ndarray:
        return np.bincount(self.src, minlength=self.num_nodes).astype(np.int64)

    @cached_property
    def depth(self) -> np.ndarray:
        """Longest path (in edges) from any source to each node (int64, shape (N,))."""
        d = np.zeros(self.num_nodes, dtype=np.int64)
        ptr, nodes, _ = self.pred
        for v in range(self.num_nodes):
            p = nodes[ptr[v]:ptr[v + 1]]
            if len(p):
                d[v] = d[p].max() + 1
        return d

    # -- checks ------------------------------------------------------------------------
    def validate(self) -> Graph:
        """Check every invariant of the IR and return ``self``.

        Raises
        ------
        GraphError
            On a cycle or an edge against the topological order, an edge index out of
            range, a self loop, a duplicate edge, duplicate node names, a negative or
            non-finite size, FLOPs above :data:`MAX_FLOPS` or bytes above :data:`MAX_BYTES`,
            a shape with a zero-or-negative dimension inside its rank or more than
            :data:`MAX_ELEMENTS` elements.
            The message names the node (or edge) at fault.

        Notes
        -----
        O(N + E) but for the cycle search, which runs only when an edge points backwards.
        """
        n, g = self.num_nodes, self.name
        for k, arr in (("src", self.src), ("dst", self.dst)):
            bad = np.flatnonzero((arr < 0) | (arr >= n))
            if len(bad):
                j = int(bad[0])
                raise GraphError(f"graph {g!r}: edge {j} has {k}={int(arr[j])}, "
                                 f"out of range for {n} nodes")
        loops = np.flatnonzero(self.src == self.dst)
        if len(loops):
            j = int(loops[0])
            raise GraphError(f"graph {g!r}: node {str(self.names[self.src[j]])!r} has an edge to "
                             f"itself (a cycle): edge {j} (src={int(self.src[j])}, "
                             f"dst={int(self.dst[j])})")
        back = np.flatnonzero(self.src > self.dst)
        if len(back):
            cycle = _find_cycle(self.src, self.dst, n)
            if cycle is not None:
                path = " -> ".join(str(self.names[i]) for i in cycle[:8])
                raise GraphError(f"graph {g!r}: cycle through nodes {path}"
                                 f"{' -> ...' if len(cycle) > 8 else ''}")
            j = int(back[0])
            raise GraphError(f"graph {g!r}: nodes are not in topological order: edge {j} "
                             f"(src={int(self.src[j])}, dst={int(self.dst[j])}), "
                             f"{str(self.names[self.src[j]])!r} -> {str(self.names[self.dst[j]])!r}, "
                             "points backwards (build graphs with GraphBuilder, which sorts them)")
        if self.num_edges:
            key = self.src * n + self.dst
            u, counts = np.unique(key, return_counts=True)
            if (counts > 1).any():
                k = int(u[counts > 1][0])
                raise GraphError(f"graph {g!r}: duplicate edge {str(self.names[k // n])!r} -> "
                                 f"{str(self.names[k % n])!r}")
        if len(self.index) != n:
            seen: set[str] = set()
            for s in self.names:
                if s in seen:
                    raise GraphError(f"graph {g!r}: duplicate node name {str(s)!r}")
                seen.add(str(s))
        for k in (*_NODE_FLOAT, "edge_bytes"):
            a = getattr(self, k)
            bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
            if len(bad):
                j = int(bad[0])
                where = (f"edge {str(self.names[self.src[j]])!r} -> {str(self.names[self.dst[j]])!r}"
                         if k == "edge_bytes" else f"node {str(self.names[j])!r}")
                raise GraphError(f"graph {g!r}: {where} has {k}={float(a[j])!r}; expected a finite "
                                 "number >= 0")
            limit = MAX_FLOPS if k == "flops" else MAX_BYTES
            big = np.flatnonzero(a > limit)
            if len(big):
                j = int(big[0])
                where = (f"edge {str(self.names[self.src[j]])!r} -> {str(self.names[self.dst[j]])!r}"
                         if k == "edge_bytes" else f"node {str(self.names[j])!r}")
                raise GraphError(f"graph {g!r}: {where} has {k}={float(a[j]):.3g}, above the "
                                 f"limit {limit:.3g} (graphopt.ir.graph.MAX_"
                                 f"{'FLOPS' if k == 'flops' else 'BYTES'})")
        r = self.rank
        inner = self.shape[:, :] <= 0
        inner &= np.arange(MAX_RANK)[None, :] < r[:, None]
        gaps = (self.shape[:, 1:] >= 0) & (self.shape[:, :-1] < 0)
        bad = np.flatnonzero(inner.any(axis=1) | gaps.any(axis=1) | (self.shape < -1).any(axis=1))
        if len(bad):
            j = int(bad[0])
            raise GraphError(f"graph {g!r}: node {str(self.names[j])!r} has shape {self.shape[j].tolist()};"
                             " expected positive dims padded at the end with -1")
        elements = np.where(self.shape > 0, self.shape, 1).astype(np.float64).prod(axis=1)
        big = np.flatnonzero(elements > MAX_ELEMENTS)
        if len(big):
            j = int(big[0])
            raise GraphError(f"graph {g!r}: node {str(self.names[j])!r} has shape "
                             f"{self.shape_of(j)}, {elements[j]:.3g} elements, above the limit "
                             f"2^53 (graphopt.ir.graph.MAX_ELEMENTS)")
        if (self.coloc < -1).any():
            j = int(np.flatnonzero(self.coloc < -1)[0])
            raise GraphError(f"graph {g!r}: node {str(self.names[j])!r} has coloc={int(self.coloc[j])}; "
                             "expected a group id >= 0 or -1 for none")
        return self

    # -- derived graphs ----------------------------------------------------------------
    def replace(self, **changes) -> Graph:
        """A copy with some fields replaced (arrays are shared, being read-only)."""
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__}
        fields.update(changes)
        return Graph(**fields)

    def subgraph(self, nodes: Sequence[int] | np.ndarray, name: str | None = None) -> Graph:
        """The graph induced by ``nodes`` (kept in topological order)."""
        keep = np.unique(np.asarray(nodes, dtype=np.int64))
        new = -np.ones(self.num_nodes, dtype=np.int64)
        new[keep] = np.arange(len(keep))
        e = (new[self.src] >= 0) & (new[self.dst] >= 0)
        per_node = {k: getattr(self, k)[keep] for k in (*_NODE_STR, *_NODE_FLOAT, "shape", "coloc")}
        return Graph(name=name or f"{self.name}[sub]", src=new[self.src[e]], dst=new[self.dst[e]],
                     edge_bytes=self.edge_bytes[e], meta=dict(self.meta), **per_node)

    def fingerprint(self) -> str:
        """A short digest of the node names in order and the edges: two traces of one
        program agree, a plan made for another graph does not.

        >>> b = GraphBuilder("g"); _ = b.add_node("x", "input"); _ = b.add_node("y", "relu", inputs=["x"])
        >>> len(b.build().fingerprint())
        16
        """
        import hashlib

        h = hashlib.sha256("\n".join(self.names.tolist()).encode())
        h.update(self.src.tobytes() + self.dst.tobytes())
        return h.hexdigest()[:16]

    # -- totals --------------------------------------------------------------------------
    def summary(self) -> dict:
        """Totals for a person: nodes, edges, FLOPs, bytes, persistent bytes, op-class counts."""
        from graphopt.ir.ops import op_class

        classes: dict[str, int] = {}
        for o in self.op:
            c = op_class(str(o))
            classes[c] = classes.get(c, 0) + 1
        return {
            "name": self.name,
            "nodes": self.num_nodes,
            "edges": self.num_edges,
            "flops": float(self.flops.sum()),
            "bytes_moved": float(self.bytes_read.sum() + self.bytes_written.sum()),
            "persistent_bytes": float(self.persistent_bytes.sum()),
            "max_depth": int(self.depth.max()) if self.num_nodes else 0,
            "colocation_groups": len(np.unique(self.coloc[self.coloc >= 0])),
            "op_classes": dict(sorted(classes.items(), key=lambda kv: -kv[1])),
        }


def _csr(a: np.ndarray, b: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(a, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=ptr[1:])
    return _frozen(ptr), _frozen(b[order]), _frozen(order.astype(np.int64))


def _find_cycle(src: np.ndarray, dst: np.ndarray, n: int) -> list[int] | None:
    """One cycle as a node list, or None. Iterative DFS, O(N + E)."""
    ptr, nodes, _ = _csr(src, dst, n)
    color = np.zeros(n, dtype=np.int8)  # 0 new, 1 on stack, 2 done
    parent = -np.ones(n, dtype=np.int64)
    for s in range(n):
        if color[s]:
            continue
        stack = [(s, int(ptr[s]))]
        color[s] = 1
        while stack:
            v, k = stack[-1]
            if k < ptr[v + 1]:
                stack[-1] = (v, k + 1)
                w = int(nodes[k])
                if color[w] == 0:
                    color[w], parent[w] = 1, v
                    stack.append((w, int(ptr[w])))
                elif color[w] == 1:
                    cycle = [v]
                    while cycle[-1] != w:
                        cycle.append(int(parent[cycle[-1]]))
                    return cycle[::-1] + [w]
            else:
                color[v] = 2
                stack.pop()
    return None


def pad_shape(shape: Iterable[int]) -> list[int]:
    """A shape as a MAX_RANK list padded with -1; ranks above MAX_RANK fold leading dims."""
    dims = [int(d) for d in shape]
    if len(dims) > MAX_RANK:
        lead = math.prod(int(d) for d in dims[: len(dims) - MAX_RANK + 1])  # exact: int64 would wrap
        dims = [lead] + dims[len(dims) - MAX_RANK + 1:]
    return dims + [-1] * (MAX_RANK - len(dims))


class GraphBuilder:
    """Collects nodes and edges in any order and builds a validated :class:`Graph`.

    Nodes are referred to by the index :meth:`add_node` returns (or by name in
    ``inputs``). :meth:`build` sorts nodes topologically (stable: insertion order
    where the graph allows), merges duplicate edges keeping the largest byte count,
    and validates the result.

    Examples
    --------
    >>> b = GraphBuilder("g")
    >>> w = b.add_node("w", "parameter", shape=(8, 8), out_bytes=256, persistent_bytes=256)
    >>> x = b.add_node("x", "input", shape=(2, 8), out_bytes=64)
    >>> y = b.add_node("y", "mm", shape=(2, 8), flops=256, inputs=[x, w])
    >>> b.build().names.tolist()
    ['w', 'x', 'y']
    """

    def __init__(self, name: str, meta: dict | None = None):
        self.name = name
        self.meta = dict(meta or {})
        self._nodes: list[tuple] = []
        self._index: dict[str, int] = {}
        self._edges: list[tuple[int, int, float]] = []
        self._coloc: dict[str, int] = {}
        self._copies: dict[str, int] = {}  # name -> the last #k suffix given to a copy of it

    def __len__(self) -> int:
        return len(self._nodes)

    def unique_name(self, name: str) -> str:
        """``name`` when no node has it yet, else ``name#2``, ``name#3``, ... the first
        free one: how the frontends (jax, onnx, hlo) name a node whose source name
        repeats. Linear over many copies: the search resumes at the last suffix given.

        Examples
        --------
        >>> b = GraphBuilder("g")
        >>> [b.add_node(b.unique_name("x"), "input") for _ in range(3)]
        [0, 1, 2]
        >>> list(b._index)
        ['x', 'x#2', 'x#3']
        """
        base, k = name, self._copies.get(name, 1)
        while name in self._index:
            k += 1
            name = f"{base}#{k}"
        self._copies[base] = k
        return name

    def add_node(self, name: str, op: str, *, shape: Sequence[int] = (), dtype: str = "float32",
                 flops: float = 0.0, bytes_read: float = 0.0, bytes_written: float = 0.0,
                 out_bytes: float | None = None, persistent_bytes: float = 0.0,
                 temp_bytes: float = 0.0, module: str = "", coloc: str | None = None,
                 inputs: Iterable[int | str | tuple[int | str, float]] = ()) -> int:
        """Add a node; return its index.

        ``out_bytes`` defaults to ``bytes_written``. Each input is a node index or name,
        or ``(node, bytes)`` to give the edge a byte count other than the producer's
        ``out_bytes``. ``coloc`` names a colocation group.
        """
        if name in self._index:
            raise GraphError(f"graph {self.name!r}: duplicate node name {name!r}")
        i = len(self._nodes)
        ob = bytes_written if out_bytes is None else out_bytes
        gid = -1 if coloc is None else self._coloc.setdefault(coloc, len(self._coloc))
        self._nodes.append((name, op, dtype, pad_shape(shape), flops, bytes_read, bytes_written, ob,
                            persistent_bytes, temp_bytes, module, gid))
        self._index[name] = i
        for inp in inputs:
            src, nbytes = inp if isinstance(inp, tuple) else (inp, None)
            self.add_edge(src, i, nbytes)
        return i

    def add_edge(self, src: int | str, dst: int | str, nbytes: float | None = None) -> None:
        """Add an edge; ``nbytes`` defaults to the producer's ``out_bytes``."""
        s, d = self._resolve(src), self._resolve(dst)
        self._edges.append((s, d, self._nodes[s][7] if nbytes is None else float(nbytes)))

    def _resolve(self, ref: int | str) -> int:
        if isinstance(ref, str):
            if ref not in self._index:
                raise GraphError(f"graph {self.name!r}: edge refers to unknown node {ref!r}")
            return self._index[ref]
        if not 0 <= int(ref) < len(self._nodes):
            raise GraphError(f"graph {self.name!r}: edge refers to node index {ref}, but only "
                             f"{len(self._nodes)} nodes exist")
        return int(ref)

    def build(self) -> Graph:
        """Sort, merge duplicate edges, validate and return the graph."""
        n = len(self._nodes)
        cols = list(zip(*self._nodes)) if n else [[] for _ in range(12)]
        e = np.array(self._edges, dtype=np.float64).reshape(-1, 3)
        src, dst, eb = e[:, 0].astype(np.int64), e[:, 1].astype(np.int64), e[:, 2]
        if len(src):  # merge duplicates, keeping the largest byte count
            key = src * max(n, 1) + dst
            order = np.lexsort((-eb, key))
            keep = order[np.r_[True, key[order][1:] != key[order][:-1]]]
            src, dst, eb = src[keep], dst[keep], eb[keep]
        perm = _stable_toposort(src, dst, n, [self._nodes[i][0] for i in range(n)], self.name)
        inv = np.empty(n, dtype=np.int64)
        inv[perm] = np.arange(n)
        src, dst = inv[src], inv[dst]
        order = np.lexsort((dst, src))
        coloc = np.asarray(cols[11], dtype=np.int64)[perm]
        if (coloc >= 0).any():  # number groups by first appearance in the sorted order
            ids, first = np.unique(coloc[coloc >= 0], return_index=True)
            rank = np.empty(len(ids), dtype=np.int64)
            rank[np.argsort(first)] = np.arange(len(ids))
            coloc[coloc >= 0] = rank[np.searchsorted(ids, coloc[coloc >= 0])]
        g = Graph(
            name=self.name,
            names=np.asarray(cols[0], dtype=np.str_)[perm] if n else np.array([], dtype=np.str_),
            op=np.asarray(cols[1], dtype=np.str_)[perm] if n else np.array([], dtype=np.str_),
            dtype=np.asarray(cols[2], dtype=np.str_)[perm] if n else np.array([], dtype=np.str_),
            shape=np.asarray(cols[3], dtype=np.int64).reshape(n, MAX_RANK)[perm],
            flops=np.asarray(cols[4], dtype=np.float64)[perm],
            bytes_read=np.asarray(cols[5], dtype=np.float64)[perm],
            bytes_written=np.asarray(cols[6], dtype=np.float64)[perm],
            out_bytes=np.asarray(cols[7], dtype=np.float64)[perm],
            persistent_bytes=np.asarray(cols[8], dtype=np.float64)[perm],
            temp_bytes=np.asarray(cols[9], dtype=np.float64)[perm],
            module=np.asarray(cols[10], dtype=np.str_)[perm] if n else np.array([], dtype=np.str_),
            coloc=coloc,
            src=src[order], dst=dst[order], edge_bytes=eb[order], meta=self.meta,
        )
        return g.validate()


def _stable_toposort(src: np.ndarray, dst: np.ndarray, n: int, names: list[str],
                     gname: str) -> np.ndarray:
    """Kahn's algorithm taking the lowest insertion index first (a heap), so a graph
    already in order keeps its order."""
    import heapq

    if len(src) == 0 or (src < dst).all():
        return np.arange(n, dtype=np.int64)
    ptr, nodes, _ = _csr(src, dst, n)
    indeg = np.bincount(dst, minlength=n)
    heap = [int(i) for i in np.flatnonzero(indeg == 0)]
    heapq.heapify(heap)
    out = []
    while heap:
        v = heapq.heappop(heap)
        out.append(v)
        for w in nodes[ptr[v]:ptr[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, int(w))
    if len(out) < n:
        cycle = _find_cycle(src, dst, n) or []
        path = " -> ".join(names[i] for i in cycle[:8])
        raise GraphError(f"graph {gname!r}: cycle through nodes {path}")
    return np.asarray(out, dtype=np.int64)


def format_bytes(x: float) -> str:
    """A memory size for people: GiB from 1 GiB up, MiB from 1 MiB, else KiB, so that a
    small size never shows as ``0.00 GiB``.

    >>> format_bytes(17.2 * 2**30), format_bytes(2**20), format_bytes(1536)
    ('17.20 GiB', '1.0 MiB', '1.5 KiB')
    """
    if abs(x) >= 2**30:
        return f"{x / 2**30:,.2f} GiB"
    if abs(x) >= 2**20:
        return f"{x / 2**20:.1f} MiB"
    return f"{x / 2**10:.1f} KiB"
