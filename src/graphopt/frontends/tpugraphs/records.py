"""TpuGraphs' raw tuning protobufs: HLO modules with every measured run of them.

A ``ModuleTuningData`` (package ``tpu_graphs``) holds an XLA ``HloModuleProto`` plus
every measured run: its configuration (whole-module layouts or one kernel's tile
sizes), an error flag, whether it is the compiler default, and ``compute_time_ns``.
A ``TuningData`` holds many of them. :func:`load_tuning_data` reads either into
:class:`TuningRecord` objects; :func:`load_hlo_graph` reads one module's graph. The
module becomes a graph as :mod:`graphopt.frontends.tpugraphs.hlo` describes. Needs
the ``protobuf`` package.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphopt.errors import GraphFormatError
from graphopt._files import regular_file
from graphopt.frontends.tpugraphs._wire import parse, require_protobuf, top_level_fields
from graphopt.frontends.tpugraphs._xla import read_only
from graphopt.frontends.tpugraphs.hlo import _HloConverter
from graphopt.ir.graph import Graph

__all__ = ["LayoutConfig", "TileConfig", "TuningRecord", "load_hlo_graph", "load_tuning_data"]


@dataclass(frozen=True)
class TileConfig:
    """One tile-size configuration of a fused kernel (``TileSizeConfig``).

    Examples
    --------
    >>> TileConfig(output_bounds=(2, 26, 4, 2)).features()[8:16].tolist()
    [2.0, 26.0, 4.0, 2.0, 0.0, 0.0, 34.0, 416.0]
    """

    kernel_bounds: tuple[int, ...] = ()
    output_bounds: tuple[int, ...] = ()
    input_bounds: tuple[int, ...] = ()
    iteration_bounds: tuple[int, ...] = ()

    def features(self) -> np.ndarray:
        """The 24 TpuGraphs tile config features (``config_feat`` of the tile ``.npz``).

        Kernel, output and input bounds in turn, each as its first six values (0
        padded), their sum and their product (0 for an empty list).
        """
        out: list[float] = []
        for b in (self.kernel_bounds, self.output_bounds, self.input_bounds):
            out += [float(x) for x in b[:6]] + [0.0] * (6 - min(len(b), 6))
            out += [float(sum(b)), float(math.prod(b)) if b else 0.0]
        return np.asarray(out, dtype=np.float32)


@dataclass(frozen=True)
class LayoutConfig:
    """One layout configuration of a module: for each configurable node, for each of
    its tensors (output, input, kernel), the dimension order (minor to major) chosen.

    Examples
    --------
    >>> c = LayoutConfig(nodes=(((4, 0), (4, 0), (4, 3)), ((), ())))
    >>> c.features()[0].tolist()
    [4, 0, -1, -1, -1, -1, 4, 0, -1, -1, -1, -1, 4, 3, -1, -1, -1, -1]
    """

    nodes: tuple[tuple[tuple[int, ...], ...], ...] = ()

    def features(self, max_tensors: int = 3, max_dims: int = 6) -> np.ndarray:
        """int64 array ``(nodes, max_tensors * max_dims)``, -1 padded: the TpuGraphs
        ``node_config_feat`` of this configuration (more tensors or dims are cut)."""
        out = np.full((len(self.nodes), max_tensors * max_dims), -1, dtype=np.int64)
        for i, tensors in enumerate(self.nodes):
            for t, dims in enumerate(tensors[:max_tensors]):
                d = list(dims[:max_dims])
                out[i, t * max_dims:t * max_dims + len(d)] = d
        return out


@dataclass(frozen=True, eq=False)
class TuningRecord:
    """One HLO module and every measured run of it.

    Attributes
    ----------
    module : Graph
        The module as a graph (see :mod:`graphopt.frontends.tpugraphs.hlo` for the two
        views).
    kind : {"layout", "tile", "none"}
        What the runs configure: whole-module layouts or the tile sizes of one kernel.
    configs : list of LayoutConfig or TileConfig, length R
        The configuration of each run (an empty one where a run has none).
    runtimes_ns : int64 array (R,)
        Measured ``compute_time_ns``; 0 where the run failed.
    errors, is_default : bool arrays (R,)
        Whether the run failed to compile or run; whether it is the compiler's choice.
    config_nodes : int64 array (C,)
        Graph node of each configurable node: for layouts, the node running
        ``config_index_to_node[k]`` (the fusion or caller holding it when the view folds
        it away; -1 when no node does); for tiles, the kernel (the entry's root).
    config_instructions : tuple of str (C,)
        HLO instruction names of the configurable nodes.
    fingerprint : int
        The module's fingerprint from the file.
    num_computations, num_instructions : int
        Size of the HLO module as stored (all computations).

    Examples
    --------
    >>> from graphopt.data import tpugraphs_dir
    >>> rec = load_tuning_data(tpugraphs_dir() / "module_tuning_data_layout.pb")[0]  # doctest: +SKIP
    >>> rec.kind, len(rec.configs), int(rec.errors.sum()), rec.config_nodes.shape  # doctest: +SKIP
    ('layout', 122, 10, (62,))
    """

    module: Graph
    kind: str
    configs: list
    runtimes_ns: np.ndarray
    errors: np.ndarray
    is_default: np.ndarray
    config_nodes: np.ndarray
    config_instructions: tuple[str, ...]
    fingerprint: int = 0
    num_computations: int = 0
    num_instructions: int = 0

    def __repr__(self) -> str:
        return (f"TuningRecord({self.module.name!r}, kind={self.kind!r}, runs={len(self.configs)}, "
                f"errors={int(self.errors.sum())}, nodes={self.module.num_nodes})")

    @property
    def num_runs(self) -> int:
        return len(self.configs)

    @property
    def valid(self) -> np.ndarray:
        """bool (R,): runs without error and with a positive measured time."""
        return ~self.errors & (self.runtimes_ns > 0)

    @property
    def default_runtime_ns(self) -> int | None:
        """Runtime of the (first valid) compiler-default run, or None."""
        idx = np.flatnonzero(self.is_default & self.valid)
        return int(self.runtimes_ns[idx[0]]) if len(idx) else None

    def config_features(self) -> np.ndarray:
        """Configurations as arrays in the ``.npz`` layout: float32 ``(R, 24)`` for tile
        records (``config_feat``), int64 ``(R, C, 18)`` for layout records
        (``node_config_feat``)."""
        if self.kind == "tile":
            return np.stack([c.features() for c in self.configs]) if self.configs \
                else np.zeros((0, 24), dtype=np.float32)
        if self.kind == "layout":
            return np.stack([c.features() for c in self.configs]) if self.configs \
                else np.zeros((0, len(self.config_nodes), 18), dtype=np.int64)
        raise GraphFormatError(f"module {self.module.name!r} has no configurations")


def _read_bytes(path: str | os.PathLike) -> tuple[bytes, str]:
    p = Path(path)
    regular_file(p)
    data = p.read_bytes()
    if not data:
        raise GraphFormatError(f"{p}: empty file, expected a TpuGraphs tuning protobuf")
    return data, str(p)


def _decode_tuning_file(data: bytes, source: str, message: str) -> list[Any]:
    """The ModuleTuningData messages in a file holding one ModuleTuningData or a TuningData."""
    if message not in ("auto", "ModuleTuningData", "TuningData"):
        raise ValueError(f"message must be 'auto', 'ModuleTuningData' or 'TuningData', "
                         f"got {message!r}")
    if message == "auto":
        fields = set(top_level_fields(data, source))
        # TuningData has only field 1 (modules); ModuleTuningData also 2, 3, 4. A lone
        # field 1 is a TuningData when each entry decodes as a module with its runs.
        message = "ModuleTuningData" if fields - {1} else "TuningData"
        if message == "TuningData":
            try:
                td = parse("TuningData", data, source)
                ok = all(m.HasField("module") and len(m.module.computations) for m in td.modules)
            except GraphFormatError:
                ok = False
            if ok:
                return list(td.modules)
            message = "ModuleTuningData"
    if message == "TuningData":
        return list(parse("TuningData", data, source).modules)
    return [parse("ModuleTuningData", data, source)]


def _record(mtd, k: int, source: str, view: str) -> TuningRecord:
    where = f"{source}: module {k}"
    if not mtd.HasField("module"):
        raise GraphFormatError(f"{where}: has no HLO module (field 'module' = 1)")
    conv = _HloConverter(mtd.module, view, source, None)
    graph = conv.build()
    where = f"{source}: module {k} ({conv.mname!r})"
    runs = list(mtd.runs)
    has_layout = [r.HasField("module_config") for r in runs]
    has_tile = [r.HasField("op_config") for r in runs]
    kind = "layout" if any(has_layout) else "tile" if any(has_tile) else "none"
    if any(has_layout) and any(has_tile):
        j = next(i for i, r in enumerate(runs) if r.HasField("op_config"))
        raise GraphFormatError(f"{where}: run {j} has a tile config but other runs have layout "
                               "configs; expected one kind per module")
    nflat = len(conv.flat)
    configs: list = []
    if kind == "layout":
        cin = [int(x) for x in mtd.config_index_to_node]
        bad = [j for j, x in enumerate(cin) if not 0 <= x < nflat]
        if bad:
            raise GraphFormatError(f"{where}: config_index_to_node[{bad[0]}] = {cin[bad[0]]}, out "
                                   f"of range for {nflat} instructions")
        config_nodes = [conv.node_of_flat(x) for x in cin]
        config_instr = tuple(str(conv.comps[conv.flat[x][0]].by_id[conv.flat[x][1]].name)
                             for x in cin)
        for j, r in enumerate(runs):
            nodes = tuple(tuple(tuple(int(d) for d in t.dims) for t in nd.tensors)
                          for nd in r.module_config.layout_config.nodes)
            if r.HasField("module_config") and len(nodes) != len(cin):
                raise GraphFormatError(f"{where}: run {j} configures {len(nodes)} nodes, but "
                                       f"config_index_to_node lists {len(cin)}")
            configs.append(LayoutConfig(nodes))
    else:
        root = conv.entry.by_id[conv.entry.root_id]
        config_nodes = [conv.node_of.get((conv.entry.id, conv.entry.root_id), -1)] \
            if kind == "tile" else []
        config_instr = (str(root.name),) if kind == "tile" else ()
        for r in runs:
            t = r.op_config.tile_size_config
            configs.append(TileConfig(*(tuple(int(x) for x in getattr(t, f))
                                        for f in ("kernel_bounds", "output_bounds",
                                                  "input_bounds", "iteration_bounds"))))
    runtimes = np.array([int(r.profile.compute_time_ns) for r in runs], dtype=np.int64)
    errors = np.array([bool(r.error) for r in runs], dtype=bool)
    if (runtimes < 0).any():
        j = int(np.flatnonzero(runtimes < 0)[0])
        raise GraphFormatError(f"{where}: run {j} has compute_time_ns = {int(runtimes[j])}; "
                               "expected >= 0")
    ro = {k: read_only(v) for k, v in (("rt", runtimes), ("err", errors),
                                      ("dflt", np.array([bool(r.is_default) for r in runs],
                                                        dtype=bool)),
                                      ("cn", np.array(config_nodes, dtype=np.int64)))}
    return TuningRecord(module=graph, kind=kind, configs=configs, runtimes_ns=ro["rt"],
                        errors=ro["err"], is_default=ro["dflt"], config_nodes=ro["cn"],
                        config_instructions=config_instr, fingerprint=int(mtd.fingerprint),
                        num_computations=len(conv.comps), num_instructions=nflat)


def load_tuning_data(path: str | os.PathLike, *, view: str = "program",
                     message: str = "auto") -> list[TuningRecord]:
    """Read a raw TpuGraphs tuning protobuf: one :class:`TuningRecord` per HLO module.

    Parameters
    ----------
    path : path
        A serialized ``ModuleTuningData`` (one module and its layout runs, like
        ``module_tuning_data_layout.pb``) or ``TuningData`` (many modules and their
        tile runs, like ``op_tuning_data.pb``).
    view : {"program", "tpugraphs"}
        How each module becomes a graph (see :mod:`graphopt.frontends.tpugraphs.hlo`).
    message : {"auto", "ModuleTuningData", "TuningData"}
        Which message the file holds; ``"auto"`` tells them apart by their top-level
        fields.

    Returns
    -------
    list of TuningRecord
        In file order. Every run is kept, failed ones included (``errors``; their
        time is 0): filter with :attr:`TuningRecord.valid`.

    Raises
    ------
    GraphFormatError
        Missing, empty, truncated or undecodable file; a module without HLO; a
        malformed module (see :func:`hlo_module_to_graph`); ``config_index_to_node``
        out of range; a run configuring another number of nodes than the module
        lists; a negative runtime; tile and layout runs mixed in one module. The
        message names the file, module, run or instruction.
    ImportError
        The ``protobuf`` package is missing.

    Examples
    --------
    >>> from graphopt.data import tpugraphs_dir
    >>> recs = load_tuning_data(tpugraphs_dir() / "op_tuning_data.pb")  # doctest: +SKIP
    >>> len(recs), sum(r.num_runs for r in recs)  # doctest: +SKIP
    (15, 754)
    """
    data, source = _read_bytes(path)
    require_protobuf()
    modules = _decode_tuning_file(data, source, message)
    return [_record(m, k, source, view) for k, m in enumerate(modules)]


def load_hlo_graph(path: str | os.PathLike, *, index: int = 0, view: str = "program") -> Graph:
    """The graph of one module of a TpuGraphs tuning file (the ``.pb`` reader of
    ``import_graph``).

    Parameters
    ----------
    path : path
        A ``ModuleTuningData`` or ``TuningData`` file.
    index : int
        Which module, for files holding several (default the first).
    view : {"program", "tpugraphs"}

    Raises
    ------
    GraphFormatError
        As :func:`load_tuning_data`, or ``index`` out of range.
    """
    data, source = _read_bytes(path)
    require_protobuf()
    modules = _decode_tuning_file(data, source, "auto")
    if not -len(modules) <= index < len(modules):
        raise GraphFormatError(f"{source}: module index {index} out of range; the file holds "
                               f"{len(modules)} modules")
    m = modules[index]
    if not m.HasField("module"):
        raise GraphFormatError(f"{source}: module {index} has no HLO module (field 'module' = 1)")
    return _HloConverter(m.module, view, source, None).build()
