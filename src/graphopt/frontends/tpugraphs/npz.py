"""The public TpuGraphs dataset's ``.npz`` files (tile and layout collections).

:func:`load_tpugraphs_npz` reads one into a :class:`TpuGraphsSample`, checking every
key, dtype and shape first; :func:`load_npz_graph` is the ``.npz`` reader of
:func:`graphopt.frontends.import_graph`. Needs only numpy; never unpickles.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphopt.errors import GraphError, GraphFormatError
from graphopt.frontends.tpugraphs._xla import (ELEMENT_TYPES, OPAQUE, TOKEN, TUPLE, Arr,
                                               read_only, shape_cost)
from graphopt.ir.graph import Graph, GraphBuilder
from graphopt._files import npz_arrays, regular_file
from graphopt.ir.ops import op_class

__all__ = ["MAX_NPZ_EDGES", "MAX_NPZ_NODES", "TPUGRAPHS_OPCODES", "TpuGraphsSample",
           "is_tpugraphs_npz", "load_npz_graph", "load_tpugraphs_npz", "opcode_name"]

#: The most nodes a TpuGraphs ``.npz`` may declare (rows of ``node_feat``, entries of
#: ``node_opcode``), read from the array headers before any array is loaded: the
#: largest graph of the collections has under 50,000; a 30 KB file declaring 6M nodes
#: took 6 GB and 72 s to read. As many as a program view may have (``MAX_PROGRAM_OPS``).
MAX_NPZ_NODES = 1_000_000
#: The most edges (rows of ``edge_index``) such a file may declare.
MAX_NPZ_EDGES = 10 * MAX_NPZ_NODES

#: TpuGraphs opcode ids (``node_opcode`` in the ``.npz`` files) → XLA opcode names.
#: The ids are TpuGraphs' own stable list (``process_data/xla/hlo_opcode.h``); 0 means
#: an opcode unknown to it, and 97 and 101 are opcodes XLA has since removed.
TPUGRAPHS_OPCODES: dict[int, str] = dict(enumerate((
    "abs add add-dependency after-all all-reduce all-to-all atan2 batch-norm-grad "
    "batch-norm-inference batch-norm-training bitcast bitcast-convert broadcast call ceil "
    "cholesky clamp collective-permute count-leading-zeros compare complex concatenate "
    "conditional constant convert convolution copy copy-done copy-start cosine custom-call "
    "divide domain dot dynamic-slice dynamic-update-slice exponential exponential-minus-one "
    "fft floor fusion gather get-dimension-size set-dimension-size get-tuple-element imag "
    "infeed iota is-finite log log-plus-one and not or xor map maximum minimum multiply "
    "negate outfeed pad parameter partition-id popcnt power real recv recv-done reduce "
    "reduce-precision reduce-window remainder replica-id reshape reverse rng "
    "rng-get-and-update-state rng-bit-generator round-nearest-afz rsqrt scatter select "
    "select-and-scatter send send-done shift-left shift-right-arithmetic "
    "shift-right-logical sign sine slice sort sqrt subtract tanh trace transpose "
    "triangular-solve tuple tuple-select while cbrt all-gather collective-permute-start "
    "collective-permute-done logistic dynamic-reshape all-reduce-start all-reduce-done "
    "reduce-scatter all-gather-start all-gather-done opt-barrier async-start async-update "
    "async-done round-nearest-even stochastic-convert tan").split(), start=1))


def opcode_name(opcode_id: int) -> str:
    """XLA opcode name of a TpuGraphs opcode id; ``"op_<id>"`` for an id not in the table.

    >>> opcode_name(26), opcode_name(34), opcode_name(0), opcode_name(250)
    ('convolution', 'dot', 'op_0', 'op_250')
    """
    return TPUGRAPHS_OPCODES.get(int(opcode_id), f"op_{int(opcode_id)}")


#: The element-type one-hot of the ``.npz`` node features (columns 2..20) in order.
_NPZ_TYPES = (None, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 15, 18, TUPLE, OPAQUE, TOKEN)


@dataclass(frozen=True, eq=False)
class TpuGraphsSample:
    """One graph of the public TpuGraphs dataset (one ``.npz`` file), validated.

    Arrays are read-only and in the file's node order. ``graph`` holds the same nodes
    (``node_index[i]`` is the graph node of file node ``i``; the identity for files in
    topological order, as all published files are) with XLA opcode names, shapes and
    dtypes decoded from the 140 standard node features, and FLOPs/bytes estimated from
    them (see :func:`load_tpugraphs_npz`).

    Attributes
    ----------
    graph : Graph
    collection : {"tile", "layout"}
    node_feat : float32 (n, f)
    node_opcode : uint8 (n,)
    edge_index : int64 (m, 2)
        Row ``[u, v]``: node u consumes node v's output.
    config_runtime : int64 (c,)
        Nanoseconds.
    config_feat : float32 (c, k) or None
        Tile collection only.
    config_runtime_normalizers : int64 (c,) or None
        Tile collection only.
    node_config_ids : int64 (nc,) or None
        Layout collection only: the configurable nodes.
    node_config_feat : float32 (c, nc, k) or None
        Layout collection only; all -1 for the compiler default.
    node_splits : int64 (k,) or None
        Layout collection only: first node of each HLO computation (flattened from
        the file's ``(1, k)``).
    node_index : int64 (n,)
    path : str
    """

    graph: Graph
    collection: str
    node_feat: np.ndarray
    node_opcode: np.ndarray
    edge_index: np.ndarray
    config_runtime: np.ndarray
    config_feat: np.ndarray | None = None
    config_runtime_normalizers: np.ndarray | None = None
    node_config_ids: np.ndarray | None = None
    node_config_feat: np.ndarray | None = None
    node_splits: np.ndarray | None = None
    node_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    path: str = ""

    def __repr__(self) -> str:
        return (f"TpuGraphsSample({self.graph.name!r}, collection={self.collection!r}, "
                f"nodes={len(self.node_opcode)}, edges={len(self.edge_index)}, "
                f"configs={len(self.config_runtime)})")

    @property
    def num_configs(self) -> int:
        return len(self.config_runtime)


def is_tpugraphs_npz(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an ``.npz`` archive with TpuGraphs' keys (``node_opcode``,
    ``edge_index``, ``config_runtime``); reads the member names only.

    >>> is_tpugraphs_npz("/nonexistent.npz")
    False
    """
    try:
        with zipfile.ZipFile(path) as z:
            names = {n.removesuffix(".npy") for n in z.namelist()}
    except (OSError, zipfile.BadZipFile):
        return False
    return {"node_opcode", "edge_index", "config_runtime"} <= names


def load_npz_graph(path: str | os.PathLike) -> Graph:
    """The graph of an ``.npz`` file: a TpuGraphs file (see :func:`load_tpugraphs_npz`)
    when it has TpuGraphs' keys, else a graph saved by :func:`graphopt.ir.save_graph`
    (the ``.npz`` reader of ``import_graph``).

    Raises
    ------
    GraphFormatError, GraphError
        As :func:`load_tpugraphs_npz` or :func:`graphopt.ir.load_graph`.
    """
    regular_file(path)  # zipfile would read a device's endless "end" looking for a directory
    if is_tpugraphs_npz(path):
        return load_tpugraphs_npz(path).graph
    from graphopt.ir.io import load_graph

    return load_graph(path)


def _need(z: dict[str, np.ndarray], key: str, source: str, kinds: str, ndim: int) -> np.ndarray:
    a = z[key]
    if a.dtype.kind not in kinds:
        what = {"f": "float", "iu": "integer", "fiu": "numeric", "iub": "integer"}.get(kinds, kinds)
        raise GraphFormatError(f"{source}: key {key!r} has dtype {a.dtype}, expected {what}")
    if a.ndim != ndim:
        raise GraphFormatError(f"{source}: key {key!r} has shape {a.shape}, expected {ndim} "
                               "dimensions")
    return a


def _check_runtimes(a: np.ndarray, key: str, source: str) -> np.ndarray:
    bad = np.flatnonzero(~np.isfinite(a)) if a.dtype.kind == "f" else np.zeros(0, dtype=np.int64)
    if len(bad):
        raise GraphFormatError(f"{source}: key {key!r} has a non-finite value ({a[bad[0]]}) at "
                               f"config {int(bad[0])}")
    neg = np.flatnonzero(a < 0)
    if len(neg):
        raise GraphFormatError(f"{source}: key {key!r} has a negative value ({a[neg[0]]}) at "
                               f"config {int(neg[0])}; runtimes are nanoseconds >= 0")
    return np.rint(a).astype(np.int64) if a.dtype.kind == "f" else a.astype(np.int64)


def _npz_node_shapes(feat: np.ndarray, source: Any = "<npz>"
                     ) -> tuple[list[tuple[int, ...]], list[str], np.ndarray]:
    """Shapes, dtypes and output bytes per node from the 140 standard node features
    (columns 2..20 element type one-hot, 21..26 dims, 28 element count). A dimension
    under 0 or over 2^63-1 (a uint64 size, read as -1 by int64 readers) is refused."""
    n = len(feat)
    bad = np.argwhere((feat[:, 21:27] < 0) | (feat[:, 21:27] > float(2**63 - 1)))
    if len(bad):
        i, j = (int(x) for x in bad[0])
        raise GraphFormatError(f"{source}: key 'node_feat': node {i} has dimension {j} = "
                               f"{float(feat[i, 21 + j]):.6g} (column {21 + j}); a size must be "
                               "0 to 2^63-1")
    onehot = feat[:, 2:21]
    type_col = np.where(onehot.max(axis=1) > 0.5, onehot.argmax(axis=1), 0)
    dims = np.clip(np.nan_to_num(feat[:, 21:27]), 0, 2**62).astype(np.int64)
    numel = np.clip(np.nan_to_num(feat[:, 28]), 0, 2**62)
    shapes, dtypes, nbytes = [], [], np.zeros(n)
    for i in range(n):
        et = _NPZ_TYPES[type_col[i]]
        d = dims[i]
        rank = int(np.argmin(d > 0)) if (d == 0).any() else 6
        shape = tuple(int(x) for x in d[:rank])
        if et is not None and et in ELEMENT_TYPES:
            name, size = ELEMENT_TYPES[et]
        else:  # tuples, tokens, or no type given: no array of its own
            name = {TUPLE: "tuple", OPAQUE: "opaque", TOKEN: "token"}.get(et or 0, "float32")
            size = 0.0
            shape = () if et in (TUPLE, OPAQUE, TOKEN) else shape
        count = float(numel[i]) if numel[i] >= 1 else float(math.prod(shape))
        shapes.append(shape)
        dtypes.append(name)
        nbytes[i] = count * size
    return shapes, dtypes, nbytes


def load_tpugraphs_npz(path: str | os.PathLike) -> TpuGraphsSample:
    """Read and validate one ``.npz`` file of the public TpuGraphs dataset.

    The collection (tile or layout) is told by the keys: ``config_feat`` means tile,
    ``node_config_feat`` layout. Any ``node_feat`` width is accepted (pruned variants);
    shapes and dtypes are decoded from it only when it has TpuGraphs' 140 standard
    features, otherwise nodes get a scalar shape. Each node's FLOPs and bytes are
    estimated from the decoded shapes of the node and its producers (operand order is
    lost in the files, so ``dot`` and ``convolution`` use the size-based estimates of
    :mod:`graphopt.frontends.tpugraphs.hlo`).

    Parameters
    ----------
    path : path to an ``.npz`` file

    Returns
    -------
    TpuGraphsSample

    Raises
    ------
    GraphFormatError
        Missing file, not an npz, pickled objects (never loaded), a missing key, a
        wrong dtype or number of dimensions, inconsistent lengths (e.g.
        ``config_runtime`` vs ``config_feat`` rows, ``node_config_feat`` vs
        ``node_config_ids``), an edge or configurable node index out of range,
        non-finite node features, NaN or negative runtimes. Each message names the
        file and key.
    GraphError
        The edges form a cycle (named by node).

    Notes
    -----
    O(nodes + edges), about 40 µs a node in Python. Not checked: that the features
    themselves are meaningful (any finite values pass), that ``node_config_feat``
    holds valid layouts.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "g.npz")
    >>> feat = np.zeros((3, 140), np.float32); feat[:, 13] = 1; feat[:, 21] = 8; feat[:, 28] = 8
    >>> np.savez(p, node_feat=feat, node_opcode=np.array([63, 63, 2], np.uint8),
    ...          edge_index=np.array([[2, 0], [2, 1]]), config_feat=np.zeros((2, 24), np.float32),
    ...          config_runtime=np.array([10, 12]), config_runtime_normalizers=np.array([10, 10]))
    >>> s = load_tpugraphs_npz(p)
    >>> s.collection, s.graph.op.tolist(), float(s.graph.flops[2])
    ('tile', ['parameter', 'parameter', 'add'], 8.0)
    """
    p = Path(path)
    source = str(p)
    arrays = npz_arrays(p)  # not an archive, pickled, or too large once decompressed: refused unopened
    for key, most in (("node_feat", MAX_NPZ_NODES), ("node_opcode", MAX_NPZ_NODES),
                      ("edge_index", MAX_NPZ_EDGES)):
        shape = arrays.get(key, ((0,), None))[0]
        if shape and shape[0] > most:
            raise GraphFormatError(f"{source}: key {key!r} declares {shape[0]:,} rows, more than "
                                   f"the {most:,} graphopt reads from a TpuGraphs file")
    try:
        with np.load(p, allow_pickle=False) as npz:
            z = {k: npz[k] for k in npz.files}
    except (OSError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError,
            ValueError) as err:
        raise GraphFormatError(f"{source}: truncated, corrupted or not an npz file "
                               f"({type(err).__name__}: {err})") from err

    required = ["node_feat", "node_opcode", "edge_index", "config_runtime"]
    tile, layout = "config_feat" in z, "node_config_feat" in z
    if tile and layout:
        raise GraphFormatError(f"{source}: has both 'config_feat' (tile) and 'node_config_feat' "
                               "(layout); expected one collection")
    if not tile and not layout:
        raise GraphFormatError(f"{source}: missing key 'config_feat' (tile collection) or "
                               f"'node_config_feat' (layout collection); keys are {sorted(z)}")
    required += (["config_feat", "config_runtime_normalizers"] if tile
                 else ["node_config_feat", "node_config_ids"])
    missing = [k for k in required if k not in z]
    if missing:
        raise GraphFormatError(f"{source}: missing key{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(repr(k) for k in missing)} "
                               f"({'tile' if tile else 'layout'} collection)")

    feat = _need(z, "node_feat", source, "fiu", 2)
    n = len(feat)
    if n == 0:
        raise GraphFormatError(f"{source}: key 'node_feat' has no rows; a graph needs nodes")
    if not np.isfinite(feat).all():
        i = int(np.flatnonzero(~np.isfinite(feat).all(axis=1))[0])
        raise GraphFormatError(f"{source}: key 'node_feat' has a non-finite value at node {i}")
    feat = feat.astype(np.float32, copy=False)
    opcode = _need(z, "node_opcode", source, "iu", 1)
    if len(opcode) != n:
        raise GraphFormatError(f"{source}: key 'node_opcode' has {len(opcode)} entries, expected "
                               f"{n} (rows of 'node_feat')")
    if len(opcode) and (opcode.min() < 0 or opcode.max() > 255):
        raise GraphFormatError(f"{source}: key 'node_opcode' has values outside 0..255")
    opcode = opcode.astype(np.uint8)
    edges = z["edge_index"]
    if edges.size == 0:
        edges = edges.reshape(0, 2)
    edges = _need({"edge_index": edges}, "edge_index", source, "iu", 2)
    if edges.shape[1] != 2:
        raise GraphFormatError(f"{source}: key 'edge_index' has shape {edges.shape}, expected "
                               "(m, 2)")
    edges = edges.astype(np.int64)
    bad = np.flatnonzero(((edges < 0) | (edges >= n)).any(axis=1))
    if len(bad):
        j = int(bad[0])
        raise GraphFormatError(f"{source}: key 'edge_index' row {j} = {edges[j].tolist()} is out "
                               f"of range for {n} nodes")
    selfl = np.flatnonzero(edges[:, 0] == edges[:, 1])
    if len(selfl):
        raise GraphFormatError(f"{source}: key 'edge_index' row {int(selfl[0])} is a self loop "
                               f"on node {int(edges[selfl[0], 0])}")
    runtime = _check_runtimes(_need(z, "config_runtime", source, "fiu", 1), "config_runtime",
                              source)
    c = len(runtime)
    extra: dict[str, np.ndarray | None] = {}
    if tile:
        cf = _need(z, "config_feat", source, "fiu", 2)
        if len(cf) != c:
            raise GraphFormatError(f"{source}: key 'config_feat' has {len(cf)} rows but "
                                   f"'config_runtime' has {c} entries; expected one per config")
        if not np.isfinite(cf).all():
            raise GraphFormatError(f"{source}: key 'config_feat' has non-finite values")
        norm = _check_runtimes(_need(z, "config_runtime_normalizers", source, "fiu", 1),
                               "config_runtime_normalizers", source)
        if len(norm) != c:
            raise GraphFormatError(f"{source}: key 'config_runtime_normalizers' has {len(norm)} "
                                   f"entries, expected {c} (like 'config_runtime')")
        extra.update(config_feat=cf.astype(np.float32, copy=False),
                     config_runtime_normalizers=norm)
    else:
        ids = _need(z, "node_config_ids", source, "iu", 1).astype(np.int64)
        bad = np.flatnonzero((ids < 0) | (ids >= n))
        if len(bad):
            raise GraphFormatError(f"{source}: key 'node_config_ids' entry {int(bad[0])} = "
                                   f"{int(ids[bad[0]])} is out of range for {n} nodes")
        if len(np.unique(ids)) != len(ids):
            raise GraphFormatError(f"{source}: key 'node_config_ids' lists a node twice")
        ncf = _need(z, "node_config_feat", source, "fiu", 3)
        if ncf.shape[:2] != (c, len(ids)):
            raise GraphFormatError(f"{source}: key 'node_config_feat' has shape {ncf.shape}, "
                                   f"expected ({c}, {len(ids)}, k): one row per config "
                                   "('config_runtime') and configurable node ('node_config_ids')")
        if not np.isfinite(ncf).all():
            raise GraphFormatError(f"{source}: key 'node_config_feat' has non-finite values")
        splits = None
        if "node_splits" in z:
            s = z["node_splits"]
            if s.dtype.kind not in "iu" or s.ndim not in (1, 2) or (s.ndim == 2 and s.shape[0] != 1):
                raise GraphFormatError(f"{source}: key 'node_splits' has dtype {s.dtype} and shape "
                                       f"{s.shape}, expected integers of shape (1, k)")
            splits = s.reshape(-1).astype(np.int64)
            if len(splits) and ((splits < 0).any() or (splits > n).any()
                                or (np.diff(splits) < 0).any()):
                raise GraphFormatError(f"{source}: key 'node_splits' must be non-decreasing node "
                                       f"indices in 0..{n}, got {splits[:8].tolist()}...")
        extra.update(node_config_ids=ids, node_config_feat=ncf.astype(np.float32, copy=False),
                     node_splits=splits)

    graph, node_index = _npz_graph(p, feat, opcode, edges)
    return TpuGraphsSample(
        graph=graph, collection="tile" if tile else "layout", node_feat=read_only(feat),
        node_opcode=read_only(opcode), edge_index=read_only(edges), config_runtime=read_only(runtime),
        **{k: None if v is None else read_only(v) for k, v in extra.items()},
        node_index=read_only(node_index), path=source)


def _npz_graph(p: Path, feat: np.ndarray, opcode: np.ndarray,
               edges: np.ndarray) -> tuple[Graph, np.ndarray]:
    n = len(opcode)
    ops = [opcode_name(o) for o in opcode]
    if feat.shape[1] >= 29:
        shapes, dtypes, nbytes = _npz_node_shapes(feat, p)
    else:
        shapes, dtypes, nbytes = [()] * n, ["float32"] * n, np.zeros(n)
    # [u, v]: u consumes v, so the data flows v → u.
    src, dst = edges[:, 1], edges[:, 0]
    order = np.lexsort((src, dst))
    preds: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src[order].tolist(), dst[order].tolist()):
        if not preds[d] or preds[d][-1] != s:
            preds[d].append(s)
    b = GraphBuilder(p.stem, meta={"format": "tpugraphs-npz", "source": str(p)})
    for i in range(n):
        op = ops[i]
        arr = Arr(shapes[i], dtypes[i], nbytes[i] / max(math.prod(shapes[i]), 1))
        ins = [Arr(shapes[j], dtypes[j], nbytes[j] / max(math.prod(shapes[j]), 1))
               for j in preds[i]]
        flops, rd, wr = shape_cost(op, tuple(ins), (arr,) if dtypes[i] not in
                                    ("tuple", "opaque", "token") else ())
        persistent = float(nbytes[i]) if op in ("parameter", "constant") else 0.0
        out_b = 0.0 if op_class(op) == "view" or persistent else float(nbytes[i])
        b.add_node(f"{op}.{i}", op, shape=tuple(max(d, 1) for d in shapes[i]),
                   dtype=dtypes[i], flops=flops, bytes_read=rd, bytes_written=wr,
                   out_bytes=out_b, persistent_bytes=persistent)
    for i in range(n):  # once every node exists: files need not be in topological order
        for j in preds[i]:
            b.add_edge(j, i, float(nbytes[j]))
    try:
        g = b.build()
    except GraphError as err:
        raise GraphError(f"{p}: key 'edge_index': {err}") from err
    index = g.index
    node_index = np.fromiter((index[f"{ops[i]}.{i}"] for i in range(n)), dtype=np.int64, count=n)
    return g, node_index
