"""Building zoo graphs through the PyTorch frontend, and an on-disk cache of them.

A built graph is saved as ``<cache>/zoo/<name>-<key>.npz``, where ``<cache>`` is
``$GRAPHOPT_CACHE`` or ``~/.cache/graphopt``. The key hashes everything the graph
depends on — the entry's family and configuration, the source files of the model's
module and of the graphopt modules it draws classes from, the frontend's source
files likewise, and the torch and graphopt versions — so editing a model or the
frontend invalidates exactly the graphs it could change. Files are written
atomically; a file that cannot be read back is rebuilt with a warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType

import torch

import graphopt
from graphopt.errors import BadFileError, GraphoptError
from graphopt.ir import Graph, load_graph, save_graph
from graphopt.zoo.models import FAMILIES
from graphopt.zoo.models._common import count_parameters
from graphopt.zoo.registry import ZooEntry, get_entry

__all__ = ["build", "cache_dir", "cache_key", "cache_path", "forward_graph", "trace"]

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Folder of cached zoo graphs: ``$GRAPHOPT_CACHE/zoo`` or ``~/.cache/graphopt/zoo``."""
    root = os.environ.get("GRAPHOPT_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "graphopt") / "zoo"


def _sources(module: ModuleType) -> list[Path]:
    """``module``'s file and the files of the graphopt modules its globals come from."""
    mods = {module.__name__}
    for value in vars(module).values():
        owner = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if isinstance(owner, str) and owner.startswith("graphopt."):
            mods.add(owner)
    files = {getattr(sys.modules.get(m), "__file__", None) for m in mods}
    return sorted(Path(f) for f in files if f)


def cache_key(entry: ZooEntry) -> str:
    """A 16-hex-digit key of everything ``entry``'s graph depends on.

    Notes
    -----
    Hashes the sources one import level deep (a model module and the modules of the
    classes it uses, not what those import in turn).
    """
    from graphopt.frontends import torch as frontend

    h = hashlib.sha256()
    spec = {"name": entry.name, "family": entry.family, "config": dict(entry.config),
            "torch": torch.__version__, "graphopt": graphopt.__version__}
    h.update(json.dumps(spec, sort_keys=True, default=list).encode())
    for path in _sources(FAMILIES[entry.family]) + _sources(frontend):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_path(entry: ZooEntry) -> Path:
    """Where ``entry``'s graph is cached."""
    return cache_dir() / f"{entry.name}-{cache_key(entry)}.npz"


def trace(entry: ZooEntry) -> Graph:
    """Build ``entry``'s training-step graph (forward, backward, SGD update), no cache.

    The graph's ``meta["zoo"]`` records the entry: family, configuration, device
    count, split, parameter count and cache key.
    """
    from graphopt.frontends.torch import from_torch

    model, inputs = entry.make()
    graph = from_torch(model, inputs, training=True, optimizer="sgd", name=entry.name)
    config = json.loads(json.dumps(dict(entry.config), default=list))  # as it reads back
    info = {"family": entry.family, "config": config, "num_devices": entry.num_devices,
            "train_split": entry.train_split, "parameters": count_parameters(model),
            "cache_key": cache_key(entry)}
    return graph.replace(meta={**graph.meta, "zoo": info})


def build(name: str | ZooEntry, cache: bool = True) -> Graph:
    """The training-step graph of a zoo entry, from the cache when it holds a current one.

    Parameters
    ----------
    name : str or ZooEntry
        A registry name (see :func:`graphopt.zoo.list_models`) or an entry, e.g. a
        resized one from :meth:`ZooEntry.with_config`.
    cache : bool
        Read and write the on-disk cache (see :func:`cache_dir`).

    Raises
    ------
    GraphoptError
        Unknown name.

    Warns
    -----
    RuntimeWarning
        The cached file is corrupted or belongs to another key (it is rebuilt), or the
        cache folder cannot be written (the graph is returned anyway).
    """
    entry = name if isinstance(name, ZooEntry) else get_entry(name)
    if not cache:
        return trace(entry)
    path = cache_path(entry)
    if path.exists():
        try:
            graph = load_graph(path)
            if graph.meta.get("zoo", {}).get("cache_key") != cache_key(entry):
                raise BadFileError(f"{path}: holds a graph of another cache key")
            return graph
        except GraphoptError as err:
            warnings.warn(f"zoo cache file {path} is unusable ({err}); rebuilding {entry.name}",
                          RuntimeWarning, stacklevel=2)
    start = time.perf_counter()
    graph = trace(entry)
    log.info("built %s: %d ops in %.1f s", entry.name, graph.num_nodes, time.perf_counter() - start)
    try:
        save_graph(graph, path)
    except OSError as err:
        warnings.warn(f"cannot write the zoo cache {path} ({err}); returning the graph uncached",
                      RuntimeWarning, stacklevel=2)
        return graph
    stale = re.compile(re.escape(entry.name) + r"-[0-9a-f]{16}\.npz")
    for old in path.parent.iterdir():
        if old != path and stale.fullmatch(old.name):
            old.unlink(missing_ok=True)
    return graph


def forward_graph(name: str, cache: bool = True):
    """The forward (inference) graph of zoo model ``name`` at batch 1, cached as ``.npz``
    beside the zoo's training-step graphs (``<zoo cache>/../mcm``).

    ``bert-large`` is BERT-base's family at 24 layers, width 1,024, 16 heads, inner 4,096.

    Raises
    ------
    GraphoptError
        An unknown name (the message lists the zoo's).
    """
    from graphopt.frontends.torch import from_torch
    from graphopt.ir.io import load_graph, save_graph
    from graphopt.zoo.registry import get_entry

    if name == "bert-large":
        entry = get_entry("bert-base").with_config("bert-large", layers=24, d_model=1024,
                                                   heads=16, d_inner=4096)
    else:
        entry = get_entry(name)
    path = cache_dir().parent / "mcm" / f"{name}-b1.npz"
    if cache and path.is_file():
        return load_graph(path)
    model, inputs = entry.with_config(name, batch=1).make()
    graph = from_torch(model, inputs, training=False, name=name)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_graph(graph, path)
    return graph
