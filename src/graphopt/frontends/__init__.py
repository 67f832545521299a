"""Frontends: graphs from models and from other tools' files.

:func:`import_graph` reads a model file by its suffix; each frontend module does the
work and is imported only when a file of its kind is read (``torch`` is not imported
by ``import graphopt.frontends``).

| suffix | reader |
|---|---|
| ``.pt2`` | :func:`graphopt.frontends.torch.load_exported` (``torch.export.save``) |
| ``.onnx`` | :func:`graphopt.frontends.onnx.from_onnx` |
| ``.pb`` | :func:`graphopt.frontends.tpugraphs.load_hlo_graph` (TpuGraphs tuning records) |
| ``.npz`` | :func:`graphopt.frontends.tpugraphs.load_npz_graph` (a TpuGraphs file, else a graphopt graph) |
| ``.json`` | :func:`graphopt.ir.io.load_graph` |

:func:`load_source` reads a graph named by one string (a file, ``zoo:NAME`` or
``example:...``); :func:`split_source` splits a corpus item ``GRAPH@CLUSTER``.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from graphopt.errors import GraphFormatError
from graphopt.frontends.source import load_source, split_source
from graphopt.ir.graph import Graph

__all__ = ["IMPORTERS", "import_graph", "load_source", "split_source"]

#: File suffix → ``"module:function"`` reading such a file into a :class:`Graph`.
#: Adding a format is one line here.
IMPORTERS: dict[str, str] = {
    ".pt2": "graphopt.frontends.torch:load_exported",
    ".onnx": "graphopt.frontends.onnx:from_onnx",
    ".pb": "graphopt.frontends.tpugraphs:load_hlo_graph",
    ".npz": "graphopt.frontends.tpugraphs:load_npz_graph",  # TpuGraphs keys, else graphopt's own
    ".json": "graphopt.ir.io:load_graph",
}


def import_graph(path: str | os.PathLike) -> Graph:
    """Read a model file into a :class:`Graph`, choosing the frontend by suffix.

    Parameters
    ----------
    path : str or PathLike
        A file whose suffix is a key of :data:`IMPORTERS` (case-insensitive).

    Raises
    ------
    GraphFormatError
        The suffix is not supported (the message lists the supported ones), or the
        frontend cannot read the file.

    Examples
    --------
    >>> import os, tempfile, torch
    >>> p = os.path.join(tempfile.mkdtemp(), "lin.pt2")
    >>> torch.export.save(torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), p)
    >>> import_graph(p).num_nodes
    5
    >>> import_graph("model.h5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    graphopt.errors.GraphFormatError: model.h5: no importer for '.h5' files; supported: .json, ...
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in IMPORTERS:
        raise GraphFormatError(f"{path}: no importer for {suffix or 'suffix-less'!r} files; "
                               f"supported: {', '.join(sorted(IMPORTERS))}")
    module, func = IMPORTERS[suffix].split(":")
    return getattr(importlib.import_module(module), func)(path)
