"""Datasets for learned cost models: TpuGraphs ``.npz`` collections and raw tuning protos.

Everything becomes a list of :class:`CostGraph`: one program (tile: one fused kernel;
layout: one HLO module), its node features, its edges and every measured
configuration with its runtime. The rest of :mod:`graphopt.costmodel` only sees
``CostGraph``.

Sources (:func:`load_dataset`)
------------------------------
* a directory of TpuGraphs ``.npz`` files of any collection (``tile:xla``,
  ``layout:{xla,nlp}:{default,random}``), e.g. ``npz/layout/xla/random/train``; each
  file is read and validated by :func:`graphopt.frontends.tpugraphs.load_tpugraphs_npz`;
* one ``.npz`` file;
* a raw tuning protobuf (``.pb``), read with ``view="tpugraphs"``. Failed runs
  (``error`` set or time 0) are dropped. The proto carries no TpuGraphs node-feature
  vector, so nodes get graphopt's IR features (:func:`graphopt.ir.features.node_features`:
  log shape, FLOPs, bytes, degrees, op class); a model trained on ``.npz`` files cannot
  score protos and vice versa (the feature widths differ and are checked).

Preparation
-----------
* :func:`deduplicate`: repeated configurations of a graph are merged; their runtime is
  the mean of the measurements.
* :func:`prune`: keep the configurable nodes and their k-hop neighbourhood (undirected),
  as the competition's winners did (layout only; tile graphs are small).
* :class:`FeatureNormalizer`: ``sign(x) log1p(|x|)`` then standardization, fitted on the
  training graphs only, for node features and tile config features. Layout config
  features (dimension indices 0..5, -1 for "not set") are kept as they are.
* Padding: nodes that are not configurable get layout config features of -1 (not 0,
  which is a valid dimension index), as the competition found; see :data:`PAD`.
* :func:`sample_configs`: the configurations of one graph used in one training step,
  optionally skewed toward fast ones (the layout baseline).
* :func:`split_configs` (held-out configurations) and :func:`split_graphs` (held-out
  graphs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from graphopt.errors import CostModelError, GraphFormatError
from graphopt.ir import Graph

__all__ = [
    "PAD",
    "CostGraph",
    "CostModelError",
    "FeatureNormalizer",
    "deduplicate",
    "from_npz",
    "from_tuning_record",
    "load_dataset",
    "prune",
    "sample_configs",
    "split_configs",
    "split_graphs",
]

#: Value of a layout config feature that is not set: for non-configurable nodes and
#: for the dimensions a tensor does not have.
PAD = -1.0




@dataclass(frozen=True, eq=False)
class CostGraph:
    """One program and its measured configurations.

    Attributes
    ----------
    name : str
    collection : {"tile", "layout"}
    op : int64 (n,)
        TpuGraphs opcode ids (0: unknown), for an embedding table.
    node_feat : float32 (n, f)
    edge_index : int64 (2, e)
        Row 0 the producer, row 1 the consumer (data flows along an edge).
    config_nodes : int64 (nc,)
        Configurable nodes (layout); empty for tile graphs, whose config applies to
        every node.
    config_feat : float32 (c, k) tile or (c, nc, k) layout
    runtime : float64 (c,)
        Nanoseconds (tile ``.npz``: divided by ``config_runtime_normalizers``).
    graph : Graph or None
        The IR graph with shapes and costs, for analytical baselines.
    source : str
        File it came from.
    """

    name: str
    collection: str
    op: np.ndarray
    node_feat: np.ndarray
    edge_index: np.ndarray
    config_nodes: np.ndarray
    config_feat: np.ndarray
    runtime: np.ndarray
    graph: Graph | None = None
    source: str = ""

    def __repr__(self) -> str:
        return (f"CostGraph({self.name!r}, {self.collection}, nodes={self.num_nodes}, "
                f"configs={self.num_configs})")

    @property
    def num_nodes(self) -> int:
        return len(self.op)

    @property
    def num_configs(self) -> int:
        return len(self.runtime)

    def take(self, idx: np.ndarray) -> CostGraph:
        """The same graph with only the configurations ``idx``."""
        idx = np.asarray(idx, dtype=np.int64)
        return replace(self, config_feat=self.config_feat[idx], runtime=self.runtime[idx])


def _opcode_ids(ops: np.ndarray) -> np.ndarray:
    from graphopt.frontends.tpugraphs import TPUGRAPHS_OPCODES

    ids = {name: k for k, name in TPUGRAPHS_OPCODES.items()}
    return np.array([ids.get(str(o), 0) for o in ops], dtype=np.int64)


def from_npz(path: str | os.PathLike) -> CostGraph:
    """A :class:`CostGraph` from one TpuGraphs ``.npz`` file.

    Raises
    ------
    GraphFormatError
        As :func:`graphopt.frontends.tpugraphs.load_tpugraphs_npz` (missing keys,
        inconsistent shapes, NaN runtimes, pickled content), or a zero
        ``config_runtime_normalizers`` entry; the file and key are named.
    """
    from graphopt.frontends.tpugraphs import load_tpugraphs_npz

    s = load_tpugraphs_npz(path)
    edges = s.edge_index[:, ::-1].T.astype(np.int64)  # file rows [u, v]: u consumes v
    runtime = s.config_runtime.astype(np.float64)
    if s.collection == "tile":
        norm = s.config_runtime_normalizers
        if (norm <= 0).any():
            raise GraphFormatError(f"{path}: key 'config_runtime_normalizers' has a zero entry at "
                                   f"config {int(np.flatnonzero(norm <= 0)[0])}")
        runtime = runtime / norm
        cfg, cnodes = s.config_feat.astype(np.float32), np.zeros(0, dtype=np.int64)
    else:
        cfg, cnodes = s.node_config_feat.astype(np.float32), s.node_config_ids.astype(np.int64)
    return CostGraph(name=Path(path).stem, collection=s.collection, op=s.node_opcode.astype(np.int64),
                     node_feat=s.node_feat.astype(np.float32), edge_index=np.ascontiguousarray(edges),
                     config_nodes=cnodes, config_feat=cfg, runtime=runtime, graph=s.graph,
                     source=str(path))


def from_tuning_record(rec, name: str | None = None) -> CostGraph:
    """A :class:`CostGraph` from a :class:`~graphopt.frontends.tpugraphs.TuningRecord`
    read with ``view="tpugraphs"``; failed runs are dropped.

    Raises
    ------
    CostModelError
        The record has no configurations, no valid run, or a configurable node that
        no graph node runs.
    """
    from graphopt.ir.features import node_features

    where = name or rec.module.name
    if rec.kind not in ("tile", "layout"):
        raise CostModelError(f"{where}: the record has no tile or layout configurations")
    valid = rec.valid
    if not valid.any():
        raise CostModelError(f"{where}: all {rec.num_runs} runs failed; nothing to learn from")
    g = rec.module
    _, feat = node_features(g)
    cfg = rec.config_features()[valid].astype(np.float32)
    if rec.kind == "layout":
        cnodes = rec.config_nodes.astype(np.int64)
        if (cnodes < 0).any():
            raise CostModelError(f"{where}: configurable instruction "
                                 f"{rec.config_instructions[int(np.flatnonzero(cnodes < 0)[0])]!r} "
                                 "has no node; read the record with view='tpugraphs'")
    else:
        cnodes = np.zeros(0, dtype=np.int64)
    return CostGraph(name=where, collection=rec.kind, op=_opcode_ids(g.op), node_feat=feat,
                     edge_index=np.stack([g.src, g.dst]).astype(np.int64), config_nodes=cnodes,
                     config_feat=cfg, runtime=rec.runtimes_ns[valid].astype(np.float64), graph=g,
                     source=str(g.meta.get("source", "")))


def load_dataset(path: str | os.PathLike, *, dedup: bool = True,
                 prune_hops: int | None = None) -> list[CostGraph]:
    """Every graph under ``path``: a directory of ``.npz`` files (searched recursively,
    in sorted order), one ``.npz`` file, or a tuning ``.pb``.

    Parameters
    ----------
    dedup : bool
        Merge repeated configurations (:func:`deduplicate`).
    prune_hops : int, optional
        Keep only the configurable nodes and their ``prune_hops``-hop neighbourhood
        (:func:`prune`); ``None`` keeps every node.

    Raises
    ------
    CostModelError
        Nothing to load, a graph without configurations, or tile and layout graphs mixed
        under one path.
    GraphFormatError
        A file is unreadable (the file and key are named).
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(p.rglob("*.npz"))
        if not files:
            raise CostModelError(f"{p}: no .npz files in this directory")
        graphs = [from_npz(f) for f in files]
        names = [str(f.relative_to(p).with_suffix("")) for f in files]
        graphs = [replace(g, name=n) for g, n in zip(graphs, names)]
    elif p.suffix == ".npz":
        graphs = [from_npz(p)]
    elif p.suffix == ".pb":
        from graphopt.frontends.tpugraphs import load_tuning_data

        recs = load_tuning_data(p, view="tpugraphs")
        graphs = [from_tuning_record(r, name=f"{r.module.name}#{k}" if len(recs) > 1 else None)
                  for k, r in enumerate(recs) if r.kind != "none" and r.valid.any()]
        if not graphs:
            raise CostModelError(f"{p}: no module with a valid tile or layout run")
    elif not p.exists():
        raise GraphFormatError(f"{p}: no such file or directory")
    else:
        raise CostModelError(f"{p}: expected a directory of .npz files, an .npz file or a tuning "
                             f".pb, got suffix {p.suffix!r}")
    kinds = {g.collection for g in graphs}
    if len(kinds) > 1:
        raise CostModelError(f"{p}: mixes tile and layout graphs; load one collection at a time")
    empty = [g.name for g in graphs if g.num_configs == 0]
    if empty:
        where = p if len(graphs) == 1 else f"{p}: graph {empty[0]!r}"
        raise CostModelError(f"{where}: no configurations ('config_runtime' is empty); a cost "
                             "model learns from configurations and their runtimes")
    if dedup:
        graphs = [deduplicate(g) for g in graphs]
    if prune_hops is not None:
        graphs = [prune(g, prune_hops) for g in graphs]
    return graphs


def deduplicate(g: CostGraph) -> CostGraph:
    """Merge configurations with identical features; the runtime of a merged one is the
    mean of its measurements. Keeps first-occurrence order. O(c log c).

    >>> g = CostGraph("g", "tile", np.zeros(1, np.int64), np.zeros((1, 1), np.float32),
    ...               np.zeros((2, 0), np.int64), np.zeros(0, np.int64),
    ...               np.array([[1.0], [2.0], [1.0]], np.float32), np.array([10.0, 20.0, 30.0]))
    >>> deduplicate(g).runtime.tolist()
    [20.0, 20.0]
    """
    flat = g.config_feat.reshape(g.num_configs, -1)
    _, first, inverse = np.unique(flat, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if len(first) == g.num_configs:
        return g
    sums = np.bincount(inverse, weights=g.runtime)
    counts = np.bincount(inverse)
    order = np.argsort(first)  # unique groups in first-occurrence order
    return replace(g, config_feat=g.config_feat[first[order]], runtime=(sums / counts)[order])


def prune(g: CostGraph, hops: int) -> CostGraph:
    """Keep the configurable nodes and every node within ``hops`` edges of one (edges
    taken both ways); returns ``g`` unchanged when it has no configurable nodes.
    O(hops * e).

    Raises
    ------
    ValueError
        ``hops`` is negative.
    """
    if hops < 0:
        raise ValueError(f"prune hops must be >= 0, got {hops}")
    if not len(g.config_nodes):
        return g
    keep = np.zeros(g.num_nodes, dtype=bool)
    keep[g.config_nodes] = True
    src, dst = g.edge_index
    for _ in range(hops):
        nxt = keep.copy()
        nxt[dst[keep[src]]] = True
        nxt[src[keep[dst]]] = True
        keep = nxt
    new = np.full(g.num_nodes, -1, dtype=np.int64)
    new[keep] = np.arange(int(keep.sum()))
    e = keep[src] & keep[dst]
    return replace(g, op=g.op[keep], node_feat=g.node_feat[keep],
                   edge_index=np.stack([new[src[e]], new[dst[e]]]), config_nodes=new[g.config_nodes],
                   graph=None)


def _log(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


@dataclass(frozen=True)
class FeatureNormalizer:
    """``(sign(x) log1p|x| - mean) / std`` per column, for node features and (tile only)
    config features. Columns constant in the training set get std 1.

    Attributes
    ----------
    node_mean, node_std : float32 (f,)
    config_mean, config_std : float32 (k,) or None
        None for layout graphs, whose config features stay as they are.
    """

    node_mean: np.ndarray
    node_std: np.ndarray
    config_mean: np.ndarray | None = None
    config_std: np.ndarray | None = None

    @classmethod
    def fit(cls, graphs: list[CostGraph]) -> FeatureNormalizer:
        """Fit on ``graphs`` (the training split only)."""
        if not graphs:
            raise CostModelError("cannot fit feature normalization on an empty training split")
        x = _log(np.concatenate([g.node_feat for g in graphs]).astype(np.float64))
        std = x.std(axis=0)
        cm = cs = None
        if graphs[0].collection == "tile":
            c = _log(np.concatenate([g.config_feat for g in graphs]).astype(np.float64))
            cm, cs = c.mean(axis=0).astype(np.float32), np.where(c.std(axis=0) > 1e-8, c.std(axis=0), 1.0)
            cs = cs.astype(np.float32)
        return cls(x.mean(axis=0).astype(np.float32),
                   np.where(std > 1e-8, std, 1.0).astype(np.float32), cm, cs)

    def __call__(self, g: CostGraph) -> CostGraph:
        """``g`` with normalized features.

        Raises
        ------
        CostModelError
            The graph's feature widths differ from those fitted.
        """
        if g.node_feat.shape[1] != len(self.node_mean):
            raise CostModelError(f"{g.source or g.name}: node features have {g.node_feat.shape[1]} "
                                 f"columns, the model was trained on {len(self.node_mean)}")
        x = ((_log(g.node_feat) - self.node_mean) / self.node_std).astype(np.float32)
        cfg = g.config_feat
        if self.config_mean is not None:
            if cfg.shape[-1] != len(self.config_mean):
                raise CostModelError(f"{g.source or g.name}: config features have {cfg.shape[-1]} "
                                     f"columns, the model was trained on {len(self.config_mean)}")
            cfg = ((_log(cfg) - self.config_mean) / self.config_std).astype(np.float32)
        return replace(g, node_feat=x, config_feat=cfg)

    def arrays(self) -> dict[str, np.ndarray]:
        """The fitted arrays by name (for a safetensors checkpoint)."""
        out = {"node_mean": self.node_mean, "node_std": self.node_std}
        if self.config_mean is not None:
            out |= {"config_mean": self.config_mean, "config_std": self.config_std}
        return out

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> FeatureNormalizer:
        return cls(a["node_mean"], a["node_std"], a.get("config_mean"), a.get("config_std"))


def sample_configs(runtime: np.ndarray, k: int, rng: np.random.Generator,
                   fast_bias: float = 0.0) -> np.ndarray:
    """Indices of ``min(k, c)`` distinct configurations of one graph.

    With ``fast_bias > 0`` the chance of a configuration is proportional to
    ``exp(-fast_bias * rank / c)`` where rank 0 is the fastest (the layout baseline
    skews sampling toward fast configurations); 0 samples uniformly.

    >>> sample_configs(np.array([3.0, 1.0, 2.0]), 5, np.random.default_rng(0)).tolist()
    [2, 0, 1]
    """
    c = len(runtime)
    if c <= k:
        return rng.permutation(c)
    if fast_bias <= 0:
        return rng.choice(c, size=k, replace=False)
    rank = np.empty(c)
    rank[np.argsort(runtime, kind="stable")] = np.arange(c)
    w = np.exp(-fast_bias * rank / c)
    return rng.choice(c, size=k, replace=False, p=w / w.sum())


def split_configs(graphs: list[CostGraph], test_fraction: float,
                  seed: int) -> tuple[list[CostGraph], list[CostGraph]]:
    """Hold out a random ``test_fraction`` of each graph's configurations (at least 2
    on each side). For collections of few graphs, such as one tuned module."""
    if not 0 < test_fraction < 1:
        raise CostModelError(f"test_fraction must be in (0, 1), got {test_fraction}")
    train, test = [], []
    for i, g in enumerate(graphs):
        if g.num_configs < 4:
            train.append(g)
            continue
        perm = np.random.default_rng([seed, i]).permutation(g.num_configs)
        n_test = min(max(2, round(test_fraction * g.num_configs)), g.num_configs - 2)
        test.append(g.take(np.sort(perm[:n_test])))
        train.append(g.take(np.sort(perm[n_test:])))
    if not test:
        raise CostModelError("no graph has 4 or more configurations to split")
    return train, test


def split_graphs(graphs: list[CostGraph], test_fraction: float = 0.25, seed: int = 0,
                 test_names: list[str] | None = None) -> tuple[list[CostGraph], list[CostGraph]]:
    """Hold out whole graphs: those named in ``test_names``, else a random
    ``test_fraction`` of them (at least one on each side)."""
    if len(graphs) < 2:
        raise CostModelError(f"a graph split needs 2 or more graphs, got {len(graphs)}; "
                             "use split='configs'")
    if test_names is not None:
        unknown = set(test_names) - {g.name for g in graphs}
        if unknown:
            raise CostModelError(f"test graphs {sorted(unknown)} are not in the dataset")
        held = set(test_names)
    else:
        if not 0 < test_fraction < 1:
            raise CostModelError(f"test_fraction must be in (0, 1), got {test_fraction}")
        perm = np.random.default_rng(seed).permutation(len(graphs))
        n_test = min(max(1, round(test_fraction * len(graphs))), len(graphs) - 1)
        held = {graphs[i].name for i in perm[:n_test]}
    return [g for g in graphs if g.name not in held], [g for g in graphs if g.name in held]
