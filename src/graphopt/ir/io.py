"""Saving and loading graphs: ``.npz`` (no pickle) and JSON; networkx conversion.

Files are written atomically (to a temporary file in the same folder, then renamed),
so an interrupted save never leaves a half-written graph behind.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from graphopt._files import atomic_write, npz_arrays, read_json
from graphopt.errors import GraphError, GraphFormatError
from graphopt.ir.graph import MAX_RANK, Graph

__all__ = ["check_header", "from_networkx", "graph_from_dict", "graph_to_dict", "load_graph",
           "save_graph", "to_networkx"]

#: The widest string (in characters) of a graph's names, op types, dtypes and module
#: paths in an ``.npz``: so that the node count bounds what the file can make us allocate.
MAX_NAME_CHARS = 4096

FORMAT = "graphopt.graph"
VERSION = 1
_INT64_MAX = 2**63 - 1
_ARRAYS = ("names", "op", "dtype", "shape", "flops", "bytes_read", "bytes_written", "out_bytes",
           "persistent_bytes", "temp_bytes", "module", "coloc", "src", "dst", "edge_bytes")


def _json_scalar(x: Any) -> Any:
    """json.dumps fallback: numpy scalars and arrays in metadata become plain numbers."""
    if isinstance(x, (np.generic, np.ndarray)):
        return x.tolist()
    raise TypeError(f"metadata value {x!r} of type {type(x).__name__} is not JSON serializable")


def save_graph(graph: Graph, path: str | os.PathLike) -> Path:
    """Save ``graph`` to ``path``: ``.json`` writes JSON, anything else a compressed ``.npz``.

    >>> import tempfile, os
    >>> from graphopt.ir.generate import layered_graph
    >>> g = layered_graph(3, 2, seed=0)
    >>> p = save_graph(g, os.path.join(tempfile.mkdtemp(), "g.npz"))
    >>> load_graph(p).num_nodes == g.num_nodes
    True
    """
    path = Path(path)
    if path.suffix == ".json":
        text = json.dumps(graph_to_dict(graph), default=_json_scalar)
        atomic_write(path, lambda f: f.write(text.encode()))
        return path
    if path.suffix != ".npz":
        path = path.with_suffix(path.suffix + ".npz")
    header = json.dumps({"format": FORMAT, "version": VERSION, "name": graph.name,
                         "meta": graph.meta}, default=_json_scalar)
    arrays = {k: getattr(graph, k) for k in _ARRAYS}
    atomic_write(path, lambda f: np.savez_compressed(f, header=np.array(header), **arrays))
    return path


def load_graph(path: str | os.PathLike) -> Graph:
    """Load and validate a graph saved by :func:`save_graph` (``.npz`` or ``.json``).

    Raises
    ------
    GraphFormatError
        The file is missing, truncated, pickled, of another format, lacks a key, or its
        arrays exceed the size limit (checked before anything is decompressed, see
        :func:`npz_arrays`).
    GraphError
        The file reads but the graph breaks an invariant (see :meth:`Graph.validate`),
        arrays' lengths disagree with its node count among them.
    """
    path = Path(path)  # both readers check it is a regular file
    if path.suffix.lower() == ".json":  # as import_graph picks its reader: G.JSON is JSON
        return graph_from_dict(read_json(path), source=str(path))
    members = npz_arrays(path)
    missing = [k for k in ("header", *_ARRAYS) if k not in members]
    if missing:
        raise GraphFormatError(f"{path}: not a graphopt graph file; missing keys {missing}")
    _check_graph_sizes(members, path)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in _ARRAYS}
            header = json.loads(str(z["header"]))
    except (OSError, zipfile.BadZipFile, EOFError, KeyError, json.JSONDecodeError, zlib.error,
            NotImplementedError, ValueError, RecursionError) as err:  # Recursion: a deep header
        raise GraphFormatError(f"{path}: truncated, corrupted or not an npz file "
                               f"({type(err).__name__}: {err})") from err
    for k in ("shape", "coloc", "src", "dst"):  # uint64 past 2^63-1 would read as negative
        a = arrays[k]
        if a.dtype.kind == "u" and a.dtype.itemsize == 8 and a.size and a.max() > _INT64_MAX:
            at = int(np.argwhere(a > _INT64_MAX)[0][0])
            what = f"node {at} ({str(arrays['names'][at])!r})" if k in ("shape", "coloc") \
                else f"edge {at}"
            raise GraphFormatError(f"{path}: array {k!r}: {what} holds {int(a.max()):,}, more than "
                                   "2^63-1 (an unsigned size that would read as negative)")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise GraphFormatError(f"{path}: header says format {header!r}, expected {FORMAT!r}")
    check_header(header, path)
    try:
        g = Graph(name=str(header.get("name", path.stem)), meta=dict(header.get("meta") or {}),
                  **arrays)
    except GraphError as err:
        raise GraphError(f"{path}: {err}") from err
    return _validated(g, path)


#: The dtype kinds (numpy's ``dtype.kind``) each array of a graph file may have: text,
#: integers, or numbers; what save_graph writes is among them. A bool, complex or text
#: array where numbers belong would be cast silently (an edge index 0.5 read as 0).
_KINDS = {**dict.fromkeys(("names", "op", "dtype", "module"), ("U", "text")),
          **dict.fromkeys(("shape", "coloc", "src", "dst"), ("iu", "integers")),
          **dict.fromkeys(("flops", "bytes_read", "bytes_written", "out_bytes", "persistent_bytes",
                           "temp_bytes", "edge_bytes"), ("fiu", "numbers"))}


def _check_graph_sizes(members: dict[str, tuple[tuple[int, ...], np.dtype]], path: Path) -> None:
    """Refuse a graph file whose array headers disagree with its node and edge counts, so
    that the node count bounds what it makes us decompress, or whose arrays hold another
    kind of value than they should (text, integers, numbers)."""
    n = math.prod(members["op"][0])
    e = math.prod(members["src"][0])
    for k in _ARRAYS:
        shape, dtype = members[k]
        want = (e,) if k in ("src", "dst", "edge_bytes") else (n, MAX_RANK) if k == "shape" else (n,)
        if shape != want:
            raise GraphError(f"{path}: array {k!r} has shape {shape}, expected {want} "
                                   f"({n:,} nodes, {e:,} edges)")
        kinds, what = _KINDS[k]
        if dtype.kind not in kinds:
            raise GraphFormatError(f"{path}: array {k!r} has dtype {dtype}; expected {what}")
        if dtype.kind == "U" and dtype.itemsize > 4 * MAX_NAME_CHARS:
            raise GraphFormatError(f"{path}: array {k!r} holds strings of {dtype.itemsize // 4:,} "
                                   f"characters, more than the {MAX_NAME_CHARS:,} graphopt reads "
                                   "(graphopt.ir.io.MAX_NAME_CHARS)")
    if e > n * (n - 1) // 2:
        raise GraphError(f"{path}: {e:,} edges, more than a DAG of {n:,} nodes can have")


def check_header(header: dict, source: Any, version: int = VERSION,
                 error: type[Exception] = GraphFormatError) -> None:
    """Reject a file header whose ``version`` is not an integer, is newer than ``version``
    or is under 1 (no graphopt wrote it: versions count from 1; a header without one is
    read as the current version), or whose ``meta`` is not an object (graphopt's JSON file
    formats)."""
    got, meta = header.get("version", version), header.get("meta")
    if not isinstance(got, int) or isinstance(got, bool):
        raise error(f"{source}: format version {got!r} is not an integer")
    if got > version:
        raise error(f"{source}: format version {got} is newer than this graphopt reads "
                    f"({version}); upgrade graphopt")
    if got < 1:
        raise error(f"{source}: field 'version': format version {got} was never written by "
                    f"graphopt (versions 1 to {version} are)")
    if meta is not None and not isinstance(meta, dict):
        raise error(f"{source}: meta must be an object, got {type(meta).__name__}")


def _validated(g: Graph, source: Any) -> Graph:
    try:
        return g.validate()
    except GraphError as err:
        raise GraphError(f"{source}: {err}") from err


def graph_to_dict(g: Graph) -> dict:
    """A JSON-ready dict: header, one record per node, edges as ``[src, dst, bytes]``."""
    nodes = []
    for i in range(g.num_nodes):
        nodes.append({
            "name": str(g.names[i]), "op": str(g.op[i]), "dtype": str(g.dtype[i]),
            "shape": list(g.shape_of(i)), "flops": float(g.flops[i]),
            "bytes_read": float(g.bytes_read[i]), "bytes_written": float(g.bytes_written[i]),
            "out_bytes": float(g.out_bytes[i]), "persistent_bytes": float(g.persistent_bytes[i]),
            "temp_bytes": float(g.temp_bytes[i]), "module": str(g.module[i]),
            "coloc": int(g.coloc[i]),
        })
    edges = [[int(s), int(d), float(b)] for s, d, b in zip(g.src, g.dst, g.edge_bytes)]
    return {"format": FORMAT, "version": VERSION, "name": g.name, "meta": g.meta,
            "nodes": nodes, "edges": edges}


def _digits(v: int) -> str:
    """A whole number of a JSON file for a message: itself, or its first digits and length
    (one of 400 digits has no float to print as)."""
    text = str(v)
    return text if len(text) <= 24 else f"{text[:8]}... ({len(text.lstrip('-'))} digits)"


def graph_from_dict(data: Any, source: str = "<dict>") -> Graph:
    """Inverse of :func:`graph_to_dict`; validates the result."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GraphFormatError(f"{source}: not a graphopt graph (expected format {FORMAT!r})")
    check_header(data, source)
    try:
        nodes, edges = data["nodes"], data["edges"]
        n = len(nodes)
        def col(k, default=None):
            return [nd[k] if default is None else nd.get(k, default) for nd in nodes]

        from graphopt.ir.graph import pad_shape

        # numpy would turn a number into a name, "22" into a shape (2, 2) and an edge
        # [0.5, true, 1] into [0, 1, 1] silently
        for i, nd in enumerate(nodes):
            if not isinstance(nd, dict):
                raise GraphFormatError(f"{source}: malformed graph record (node {i} is a "
                                       f"{type(nd).__name__}, expected an object)")
            for k in ("name", "op", "dtype", "module"):
                if k in nd and not isinstance(nd[k], str):
                    raise GraphFormatError(f"{source}: node {i} has {k}={nd[k]!r}; expected a string")
            for k in ("flops", "bytes_read", "bytes_written", "out_bytes", "persistent_bytes",
                      "temp_bytes", "coloc"):
                kinds = (int,) if k == "coloc" else (int, float)  # type(): true is not 1
                if k in nd and type(nd[k]) not in kinds:
                    raise GraphFormatError(f"{source}: node {i} has {k}={json.dumps(nd[k])}; "
                                           f"expected {'an integer' if k == 'coloc' else 'a number'}")
                # an integer past what its array holds (int64, float64) is no size or label
                if k in nd and type(nd[k]) is int and not (
                        -1 <= nd[k] <= _INT64_MAX if k == "coloc" else abs(nd[k]) < 2**1023):
                    raise GraphFormatError(f"{source}: node {i} has {k}={_digits(nd[k])}; expected "
                                           f"{'-1 (none) to 2^63-1' if k == 'coloc' else 'a size'}")
            shape = nd.get("shape", [])
            if not (isinstance(shape, list) and all(type(d) is int for d in shape)):
                raise GraphFormatError(f"{source}: node {i} has shape={shape!r}; expected a list "
                                       "of integers")
            if any(d < 1 or d > _INT64_MAX for d in shape):
                raise GraphFormatError(f"{source}: node {i} ({nd.get('name', '?')!r}) has shape "
                                       f"{shape}; every size must be 1 to 2^63-1")
        for j, x in enumerate(edges if isinstance(edges, list) else [edges]):
            if not (isinstance(x, list) and len(x) == 3 and type(x[0]) is int and type(x[1]) is int
                    and type(x[2]) in (int, float)):
                raise GraphFormatError(f"{source}: edge {j} = {json.dumps(x)[:80]}; expected "
                                       "[src, dst, bytes] with integer node indices")
            for k, v in zip(("src", "dst"), x):  # read as floats below: 2^63 would wrap
                if not 0 <= v < n:
                    raise GraphFormatError(f"{source}: edge {j} has {k}={_digits(v)}, out of range "
                                           f"for {n} nodes")
            if type(x[2]) is int and abs(x[2]) >= 2**1023:
                raise GraphFormatError(f"{source}: edge {j} has edge_bytes={_digits(x[2])}; "
                                       "expected a size")
        e = np.asarray(edges, dtype=np.float64).reshape(-1, 3)
        g = Graph(
            name=str(data.get("name", "graph")), meta=dict(data.get("meta") or {}),
            names=np.asarray(col("name"), dtype=np.str_), op=np.asarray(col("op"), dtype=np.str_),
            dtype=np.asarray(col("dtype", "float32"), dtype=np.str_),
            shape=np.asarray([pad_shape(s) for s in col("shape", [])],
                             dtype=np.int64).reshape(n, MAX_RANK),
            flops=col("flops", 0.0), bytes_read=col("bytes_read", 0.0),
            bytes_written=col("bytes_written", 0.0), out_bytes=col("out_bytes", 0.0),
            persistent_bytes=col("persistent_bytes", 0.0), temp_bytes=col("temp_bytes", 0.0),
            module=np.asarray(col("module", ""), dtype=np.str_), coloc=col("coloc", -1),
            src=e[:, 0].astype(np.int64), dst=e[:, 1].astype(np.int64), edge_bytes=e[:, 2],
        )
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise GraphFormatError(f"{source}: malformed graph record ({type(err).__name__}: {err})") from err
    except GraphError as err:  # a field the constructor refuses: name the file too
        raise GraphError(f"{source}: {err}") from err
    return _validated(g, source)


def to_networkx(g: Graph):
    """A ``networkx.DiGraph`` with node and edge attributes (nodes keyed by index)."""
    import networkx as nx

    G = nx.DiGraph(name=g.name)
    for i in range(g.num_nodes):
        G.add_node(i, name=str(g.names[i]), op=str(g.op[i]), dtype=str(g.dtype[i]),
                   shape=g.shape_of(i), flops=float(g.flops[i]),
                   bytes_read=float(g.bytes_read[i]), bytes_written=float(g.bytes_written[i]),
                   out_bytes=float(g.out_bytes[i]), persistent_bytes=float(g.persistent_bytes[i]),
                   temp_bytes=float(g.temp_bytes[i]), module=str(g.module[i]),
                   coloc=int(g.coloc[i]))
    G.add_edges_from((int(s), int(d), {"bytes": float(b)})
                     for s, d, b in zip(g.src, g.dst, g.edge_bytes))
    return G


def from_networkx(G, name: str | None = None) -> Graph:
    """Build a :class:`Graph` from a ``networkx.DiGraph``.

    Node attributes are those :func:`to_networkx` writes; missing ones default to
    zero (``op`` to ``"other"``, ``name`` to the node key). Edge attribute ``bytes``
    defaults to the producer's ``out_bytes``.
    """
    from graphopt.ir.graph import GraphBuilder

    b = GraphBuilder(name or G.graph.get("name", "graph"))
    key = {}
    for v, a in G.nodes(data=True):
        key[v] = b.add_node(str(a.get("name", v)), str(a.get("op", "other")),
                            shape=a.get("shape", ()), dtype=a.get("dtype", "float32"),
                            flops=a.get("flops", 0.0), bytes_read=a.get("bytes_read", 0.0),
                            bytes_written=a.get("bytes_written", 0.0),
                            out_bytes=a.get("out_bytes", a.get("bytes_written", 0.0)),
                            persistent_bytes=a.get("persistent_bytes", 0.0),
                            temp_bytes=a.get("temp_bytes", 0.0), module=a.get("module", ""),
                            coloc=None if a.get("coloc", -1) in (-1, None) else str(a["coloc"]))
    for u, v, a in G.edges(data=True):
        b.add_edge(key[u], key[v], a.get("bytes"))
    return b.build()
