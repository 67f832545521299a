"""TpuGraphs: XLA programs measured on TPUs, as raw tuning protos and as the public ``.npz`` files.

Two forms of the same data come in here:

* **Raw tuning protobufs** (``ModuleTuningData`` / ``TuningData``, package ``tpu_graphs``):
  an XLA ``HloModuleProto`` plus every measured run (configuration, error flag,
  whether it is the compiler default, ``compute_time_ns``). :func:`load_tuning_data`
  reads them into :class:`TuningRecord` objects. The messages are declared here, at
  run time, from their field numbers (no generated ``_pb2`` code); only the fields
  this module reads are declared, everything else is skipped as unknown fields.
  Needs the ``protobuf`` package.
* **The public dataset's ``.npz`` files** (tile and layout collections):
  :func:`load_tpugraphs_npz` reads one into a :class:`TpuGraphsSample`, checking
  every key, dtype and shape first. Needs only numpy; never unpickles.

From an HLO module to a :class:`~graphopt.ir.Graph` (``view`` argument)
-----------------------------------------------------------------------
``"program"`` (default): the program as it runs. Nodes are the instructions of the
entry computation, named as in HLO, with their XLA opcode as op type.

- ``while``, ``conditional`` and ``call`` bodies are *inlined*: their instructions
  become nodes named ``<call site>/<instruction>``; a body's ``parameter`` stands for
  the caller's operand (no node), and the caller node (zero cost, no new buffer)
  consumes the roots. Loop bodies count once: trip counts are not in the proto.
- ``fusion`` computations are *summarized*: the fusion is one node (one kernel)
  whose FLOPs are the sum over its fused instructions and whose bytes are only its
  operands and outputs, like the simulator's fused kernels.
- scalar computations passed to ``reduce``, ``reduce-window``, ``sort``, ``scatter``,
  ``select-and-scatter``, ``map``, ``all-reduce`` ... are not nodes: the caller's
  cost formula already counts them.

``"tpugraphs"``: the node set of the TpuGraphs encoder: every instruction of every
computation, in proto order, so node ``i`` is TpuGraphs node ``i`` and
``config_index_to_node`` indexes the graph directly. Edges go from operand to user
and from each called computation's root to its caller. Costs are per instruction as
if unfused, and callers of computations carry no FLOPs of their own; use this view
for learned models that need the TpuGraphs numbering, not for simulation.

Costs from shapes
-----------------
FLOPs and bytes come from :func:`graphopt.ir.formulas.op_cost` on the operand and
result shapes (tuples flattened), with three XLA-specific formulas: ``dot`` uses the
contracting dimensions of ``dot_dimension_numbers`` (field 30 of XLA's public
``HloInstructionProto``; when absent or inconsistent with the shapes, the contracted
size is estimated from the operand and result sizes), ``convolution`` uses
``kernel_output_feature_dimension`` of ``convolution_dimension_numbers`` (field 16;
fallback: the kernel's last dimension, TensorFlow's HWIO), and ``reduce-window``
multiplies the window size (field 15). Entry parameters and constants hold
persistent bytes (they live for the whole program); views (``bitcast``,
``get-tuple-element``, ``tuple``, ``reshape`` ...) own no buffer. A dimension of size 0
is stored as 1 in :attr:`Graph.shape` (which allows only positive sizes); its bytes
and FLOPs stay 0.

References
----------
P. M. Phothilimthana et al., "TpuGraphs: A Performance Prediction Dataset on Large
Tensor Computational Graphs", NeurIPS 2023 Datasets and Benchmarks.
https://github.com/google-research-datasets/tpu_graphs
"""

from __future__ import annotations

import functools
import math
import os
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphopt.ir.formulas import op_cost
from graphopt.errors import GraphError, GraphFormatError
from graphopt.ir.graph import Graph, GraphBuilder
from graphopt.ir.ops import op_class

__all__ = [
    "TPUGRAPHS_OPCODES",
    "LayoutConfig",
    "TileConfig",
    "TpuGraphsSample",
    "TuningRecord",
    "hlo_module_to_graph",
    "is_tpugraphs_npz",
    "load_hlo_graph",
    "load_npz_graph",
    "load_tpugraphs_npz",
    "load_tuning_data",
    "opcode_name",
]

# ------------------------------------------------------------------------------------
# Vocabularies
# ------------------------------------------------------------------------------------

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


#: XLA ``PrimitiveType`` enum values → (dtype name, bytes per element). Names follow
#: the rest of graphopt (numpy's), not XLA's short forms.
_ELEMENT_TYPES: dict[int, tuple[str, float]] = {
    1: ("bool", 1), 2: ("int8", 1), 3: ("int16", 2), 4: ("int32", 4), 5: ("int64", 8),
    6: ("uint8", 1), 7: ("uint16", 2), 8: ("uint32", 4), 9: ("uint64", 8),
    10: ("float16", 2), 11: ("float32", 4), 12: ("float64", 8), 15: ("complex64", 8),
    16: ("bfloat16", 2), 18: ("complex128", 16), 19: ("float8_e5m2", 1),
    20: ("float8_e4m3fn", 1), 21: ("int4", 0.5), 22: ("uint4", 0.5),
}
_TUPLE, _OPAQUE, _TOKEN = 13, 14, 17

#: The element-type one-hot of the ``.npz`` node features (columns 2..20) in order.
_NPZ_TYPES = (None, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 15, 18, _TUPLE, _OPAQUE, _TOKEN)

# Opcodes whose called computations run as part of the program (inlined in the
# program view) and the kernel whose computation is summarized into one node.
_CONTROL_FLOW = frozenset({"while", "conditional", "call"})
_FUSION = "fusion"


# ------------------------------------------------------------------------------------
# Records
# ------------------------------------------------------------------------------------

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
        The module as a graph (see the module docstring for the two views).
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
    >>> import os
    >>> from graphopt.data import tpugraphs_dir
    >>> path = tpugraphs_dir() / "module_tuning_data_layout.pb"
    >>> if os.path.exists(path):  # doctest: +SKIP
    ...     rec = load_tuning_data(path)[0]
    ...     rec.kind, len(rec.configs), int(rec.errors.sum()), rec.config_nodes.shape
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


# ------------------------------------------------------------------------------------
# Protobuf schema, declared at run time from field numbers
# ------------------------------------------------------------------------------------

_REP = "repeated"
# message → [(field, number, type or message name[, "repeated"])]. The TpuGraphs
# messages follow tpu_graphs/proto/tuning.proto; the XLA ones xla/service/hlo.proto
# and xla/xla_data.proto (only the fields read here).
_SCHEMA: dict[str, list[tuple]] = {
    "TuningData": [("modules", 1, "ModuleTuningData", _REP)],
    "ModuleTuningData": [("module", 1, "HloModuleProto"), ("fingerprint", 2, "uint64"),
                         ("runs", 3, "ConfigProfile", _REP),
                         ("config_index_to_node", 4, "uint64", _REP)],
    "ConfigProfile": [("op_config", 1, "HloOpConfig"), ("module_config", 2, "HloModuleConfig"),
                      ("error", 3, "bool"), ("profile", 4, "ExecutionProfile"),
                      ("is_default", 5, "bool")],
    "HloOpConfig": [("tile_size_config", 1, "TileSizeConfig")],
    "TileSizeConfig": [("kernel_bounds", 1, "int64", _REP), ("output_bounds", 2, "int64", _REP),
                       ("input_bounds", 3, "int64", _REP), ("iteration_bounds", 4, "int64", _REP)],
    "HloModuleConfig": [("layout_config", 1, "LayoutConfig")],
    "LayoutConfig": [("nodes", 1, "NodeLayoutConfig", _REP)],
    "NodeLayoutConfig": [("tensors", 1, "TensorLayoutConfig", _REP)],
    "TensorLayoutConfig": [("dims", 1, "int32", _REP)],
    "ExecutionProfile": [("compute_time_ns", 4, "int64")],
    "HloModuleProto": [("name", 1, "string"), ("entry_computation_name", 2, "string"),
                       ("computations", 3, "HloComputationProto", _REP),
                       ("entry_computation_id", 6, "int64")],
    "HloComputationProto": [("name", 1, "string"), ("instructions", 2, "HloInstructionProto", _REP),
                            ("id", 5, "int64"), ("root_id", 6, "int64")],
    "HloInstructionProto": [
        ("name", 1, "string"), ("opcode", 2, "string"), ("shape", 3, "ShapeProto"),
        ("parameter_number", 9, "int64"), ("tuple_index", 13, "int64"),
        ("window", 15, "Window"),
        ("convolution_dimension_numbers", 16, "ConvolutionDimensionNumbers"),
        ("dot_dimension_numbers", 30, "DotDimensionNumbers"), ("id", 35, "int64"),
        ("operand_ids", 36, "int64", _REP), ("called_computation_ids", 38, "int64", _REP)],
    "ShapeProto": [("element_type", 2, "int32"), ("dimensions", 3, "int64", _REP),
                   ("tuple_shapes", 4, "ShapeProto", _REP), ("layout", 5, "LayoutProto")],
    "LayoutProto": [("minor_to_major", 1, "int64", _REP)],
    "Window": [("dimensions", 1, "WindowDimension", _REP)],
    "WindowDimension": [("size", 1, "int64"), ("stride", 2, "int64")],
    "ConvolutionDimensionNumbers": [("kernel_output_feature_dimension", 4, "int64"),
                                    ("output_feature_dimension", 10, "int64")],
    "DotDimensionNumbers": [("lhs_contracting_dimensions", 1, "int64", _REP),
                            ("rhs_contracting_dimensions", 2, "int64", _REP),
                            ("lhs_batch_dimensions", 3, "int64", _REP),
                            ("rhs_batch_dimensions", 4, "int64", _REP)],
}


def _require_protobuf():
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as err:
        raise ImportError("reading TpuGraphs tuning protos needs the 'protobuf' package: "
                          "pip install protobuf") from err
    return descriptor_pb2, descriptor_pool, message_factory


@functools.cache
def _messages() -> dict[str, Any]:
    """Message classes built from :data:`_SCHEMA` in a private descriptor pool."""
    descriptor_pb2, descriptor_pool, message_factory = _require_protobuf()
    F = descriptor_pb2.FieldDescriptorProto
    scalar = {"int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64, "int32": F.TYPE_INT32,
              "bool": F.TYPE_BOOL, "string": F.TYPE_STRING}
    pkg = "graphopt_tpugraphs"
    fdp = descriptor_pb2.FileDescriptorProto(name="graphopt_tpugraphs.proto", package=pkg,
                                             syntax="proto3")
    for mname, fields in _SCHEMA.items():
        m = fdp.message_type.add(name=mname)
        for fname, number, typ, *rep in fields:
            f = m.field.add(name=fname, number=number,
                            label=F.LABEL_REPEATED if rep else F.LABEL_OPTIONAL)
            if typ in scalar:
                f.type = scalar[typ]
            else:
                f.type, f.type_name = F.TYPE_MESSAGE, f".{pkg}.{typ}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {m: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{pkg}.{m}"))
            for m in _SCHEMA}


def _top_level_fields(data: bytes, source: str) -> list[int]:
    """Field numbers at the top level of a serialized message, in order (wire format)."""
    def varint(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            if pos >= len(data) or shift > 63:
                raise GraphFormatError(f"{source}: truncated or not a protobuf file "
                                       f"(bad varint at byte {pos})")
            b = data[pos]
            value |= (b & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if not b & 0x80:
                return value, pos

    pos, fields = 0, []
    while pos < len(data):
        tag, pos = varint(pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = varint(pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            n, pos = varint(pos)
            pos += n
        elif wire == 5:
            pos += 4
        else:
            raise GraphFormatError(f"{source}: not a protobuf file (wire type {wire} at the top "
                                   "level)")
        if pos > len(data) or number == 0:
            raise GraphFormatError(f"{source}: truncated or not a protobuf file "
                                   f"(field {number} runs past the end)")
        fields.append(number)
    return fields


def _parse(message: str, data: bytes, source: str):
    from google.protobuf.message import DecodeError

    try:
        return _messages()[message].FromString(data)
    except (DecodeError, RecursionError, ValueError) as err:
        raise GraphFormatError(f"{source}: cannot decode it as a TpuGraphs {message} "
                               f"({err})") from err


# ------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Arr:
    """One array leaf of an XLA shape."""

    dims: tuple[int, ...]
    dtype: str
    itemsize: float

    @property
    def numel(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> float:
        return self.numel * self.itemsize


def _leaves(shape, where: str) -> list[_Arr]:
    """Array leaves of a ShapeProto, tuples flattened depth first."""
    et = int(shape.element_type)
    if et == _TUPLE or len(shape.tuple_shapes):
        out: list[_Arr] = []
        for s in shape.tuple_shapes:
            out += _leaves(s, where)
        return out
    if et in (_OPAQUE, _TOKEN, 0):
        return []
    dims = tuple(int(d) for d in shape.dimensions)
    if any(d < 0 for d in dims):
        raise GraphFormatError(f"{where}: shape has a negative dimension {list(dims)}")
    name, size = _ELEMENT_TYPES.get(et, (f"xla_type_{et}", 4.0))
    return [_Arr(dims, name, size)]


def _shape_dtype(shape, leaves: list[_Arr]) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) to store for a node: its first array leaf; zero dims become 1."""
    if leaves:
        return tuple(max(d, 1) for d in leaves[0].dims), leaves[0].dtype
    et = int(shape.element_type)
    return (), {_TUPLE: "tuple", _OPAQUE: "opaque", _TOKEN: "token"}.get(et, "tuple")


# ------------------------------------------------------------------------------------
# Costs of XLA instructions
# ------------------------------------------------------------------------------------

def _dot_contraction(lhs: tuple, rhs: tuple, out: tuple, dn) -> int:
    """Product of the contracted sizes of a dot: from ``dot_dimension_numbers`` when it
    is present and agrees with the shapes, else estimated from the sizes."""
    if dn is not None:
        lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
        if (len(lc) == len(rc) and all(0 <= d < len(lhs) for d in lc)
                and all(0 <= d < len(rhs) for d in rc)
                and all(lhs[a] == rhs[b] for a, b in zip(lc, rc))):
            return math.prod(lhs[d] for d in lc)
    # numel(lhs) * numel(rhs) = numel(out) * batch * K^2, batch dims leading in all three.
    nb = 0
    while (nb < min(len(lhs), len(rhs), len(out) - 2) and lhs[nb] == rhs[nb] == out[nb]):
        nb += 1
    batch = math.prod(out[:nb])
    denom = max(math.prod(out), 1) * max(batch, 1)
    return max(1, round(math.sqrt(math.prod(lhs) * math.prod(rhs) / denom)))


def _conv_output_features(kernel: tuple, out: tuple, dn) -> int:
    """Size of the kernel's output-feature dimension."""
    if dn is not None:
        k, o = int(dn.kernel_output_feature_dimension), int(dn.output_feature_dimension)
        if 0 <= k < len(kernel) and 0 <= o < len(out) and kernel[k] == out[o]:
            return kernel[k]
    for k in (len(kernel) - 1, 0):  # HWIO (TensorFlow, XLA on TPU), then OIHW (PyTorch)
        if kernel and kernel[k] in out:
            return kernel[k]
    return kernel[-1] if kernel else 1


def _xla_cost(op: str, ins: list[_Arr], outs: list[_Arr], instr=None) -> tuple[float, float, float]:
    """(flops, bytes_read, bytes_written) of one unfused XLA instruction."""
    cls = op_class(op)
    if cls in ("view", "input") or not outs:
        return 0.0, 0.0, 0.0
    read = float(sum(a.nbytes for a in ins))
    written = float(sum(a.nbytes for a in outs))
    out_n = sum(a.numel for a in outs)
    if op == "dot" and len(ins) >= 2:
        dn = instr.dot_dimension_numbers if instr is not None and \
            instr.HasField("dot_dimension_numbers") else None
        return 2.0 * out_n * _dot_contraction(ins[0].dims, ins[1].dims, outs[0].dims, dn), \
            read, written
    if op == "convolution" and len(ins) >= 2:
        dn = instr.convolution_dimension_numbers if instr is not None and \
            instr.HasField("convolution_dimension_numbers") else None
        c_out = max(_conv_output_features(ins[1].dims, outs[0].dims, dn), 1)
        return 2.0 * outs[0].numel * ins[1].numel / c_out, read, written
    if op == "reduce-window" and instr is not None and len(instr.window.dimensions):
        return float(out_n * math.prod(max(int(w.size), 1) for w in instr.window.dimensions)), \
            read, written
    dtype = outs[0].dtype
    flops, rd, wr = op_cost(op, [a.dims for a in ins], [a.dims for a in outs], dtype,
                            in_dtypes=[a.dtype for a in ins], warn=False)
    if cls == "embedding":  # gathers read only the rows they take
        return flops, min(rd, read) if read else rd, written
    return flops, read, written


@functools.lru_cache(maxsize=65536)
def _shape_cost(op: str, ins: tuple[_Arr, ...], outs: tuple[_Arr, ...]) -> tuple[float, float, float]:
    """:func:`_xla_cost` from shapes alone, memoized (graphs repeat the same ops a lot)."""
    return _xla_cost(op, list(ins), list(outs))


# ------------------------------------------------------------------------------------
# HLO module → Graph
# ------------------------------------------------------------------------------------

class _Comp:
    """A computation with its instructions indexed by id."""

    def __init__(self, proto, where: str):
        self.proto, self.name, self.id = proto, str(proto.name), int(proto.id)
        self.where = f"{where}, computation {self.name!r}"
        self.instrs = list(proto.instructions)
        self.by_id: dict[int, Any] = {}
        if not self.instrs:
            raise GraphFormatError(f"{self.where}: has no instructions")
        for ins in self.instrs:
            iid = int(ins.id)
            if iid in self.by_id:
                raise GraphFormatError(f"{self.where}: instructions {self.by_id[iid].name!r} and "
                                       f"{ins.name!r} share id {iid}")
            if not ins.opcode:
                raise GraphFormatError(f"{self.where}, instruction {ins.name!r}: no opcode")
            self.by_id[iid] = ins
        self.root_id = int(proto.root_id) if int(proto.root_id) in self.by_id \
            else int(self.instrs[-1].id)


class _HloConverter:
    """Builds one Graph from one HloModuleProto."""

    def __init__(self, module, view: str, source: str, name: str | None):
        if view not in ("program", "tpugraphs"):
            raise ValueError(f"view must be 'program' or 'tpugraphs', got {view!r}")
        self.view, self.source = view, source
        self.mname = str(module.name) or "hlo_module"
        where = f"{source}: module {self.mname!r}"
        self.where = where
        if not len(module.computations):
            raise GraphFormatError(f"{where}: has no computations")
        self.comps: dict[int, _Comp] = {}
        self.flat: list[tuple[int, int]] = []  # TpuGraphs node index → (comp id, instr id)
        for c in module.computations:
            comp = _Comp(c, where)
            if comp.id in self.comps:
                raise GraphFormatError(f"{where}: computations {self.comps[comp.id].name!r} and "
                                       f"{comp.name!r} share id {comp.id}")
            self.comps[comp.id] = comp
            self.flat += [(comp.id, int(i.id)) for i in comp.instrs]
        entry = self.comps.get(int(module.entry_computation_id))
        if entry is None or (module.entry_computation_name and
                             entry.name != module.entry_computation_name):
            named = [c for c in self.comps.values() if c.name == module.entry_computation_name]
            entry = named[0] if named else entry
        if entry is None:
            raise GraphFormatError(f"{where}: entry computation (id {module.entry_computation_id}, "
                                   f"name {module.entry_computation_name!r}) not found")
        self.entry = entry
        self.b = GraphBuilder(name or self.mname, meta={
            "format": "xla-hlo", "source": source, "view": view, "hlo_module": self.mname,
            "entry_computation": entry.name, "num_computations": len(self.comps),
            "num_instructions": len(self.flat)})
        self.node_of: dict[tuple[int, int], int] = {}  # (comp, instr) → first node running it
        self._names: set[str] = set()
        self._inserted: list[str] = []  # node names in insertion order
        self._leaf_cache: dict[tuple[int, int], list[_Arr]] = {}
        self._fusion_flops: dict[int, float] = {}

    # -- helpers ----------------------------------------------------------------------
    def leaves(self, comp: _Comp, ins) -> list[_Arr]:
        key = (comp.id, int(ins.id))
        if key not in self._leaf_cache:
            self._leaf_cache[key] = _leaves(ins.shape, f"{comp.where}, instruction {ins.name!r}")
        return self._leaf_cache[key]

    def called(self, comp: _Comp, ins) -> list[_Comp]:
        out = []
        for cid in ins.called_computation_ids:
            if int(cid) not in self.comps:
                raise GraphFormatError(f"{comp.where}, instruction {ins.name!r}: calls computation "
                                       f"id {int(cid)}, which is not in the module")
            out.append(self.comps[int(cid)])
        return out

    def operands(self, comp: _Comp, ins) -> list[Any]:
        out = []
        for oid in ins.operand_ids:
            if int(oid) not in comp.by_id:
                raise GraphFormatError(f"{comp.where}, instruction {ins.name!r}: operand id "
                                       f"{int(oid)} is not an instruction of this computation")
            out.append(comp.by_id[int(oid)])
        return out

    def unique(self, name: str) -> str:
        base, k = name, 1
        while name in self._names:
            k += 1
            name = f"{base}#{k}"
        self._names.add(name)
        return name

    def add(self, comp: _Comp, ins, name: str, module: str, flops: float, read: float,
            written: float, out_bytes: float, persistent: float) -> int:
        leaves = self.leaves(comp, ins)
        shape, dtype = _shape_dtype(ins.shape, leaves)
        name = self.unique(name)
        i = self.b.add_node(name, str(ins.opcode), shape=shape, dtype=dtype,
                            flops=flops, bytes_read=read, bytes_written=written,
                            out_bytes=out_bytes, persistent_bytes=persistent, module=module)
        self._inserted.append(name)
        self.node_of.setdefault((comp.id, int(ins.id)), i)
        return i

    def fusion_flops(self, comp: _Comp, stack: tuple[int, ...]) -> float:
        """FLOPs of every instruction of a fused computation (nested fusions included)."""
        if comp.id in self._fusion_flops:
            return self._fusion_flops[comp.id]
        if comp.id in stack:
            raise GraphFormatError(f"{comp.where}: calls itself (a cycle of computations)")
        total = 0.0
        for ins in comp.instrs:
            op = str(ins.opcode)
            if op == _FUSION:
                total += sum(self.fusion_flops(c, (*stack, comp.id)) for c in self.called(comp, ins))
                continue
            ins_leaves = [a for o in self.operands(comp, ins) for a in self.leaves(comp, o)]
            total += _xla_cost(op, ins_leaves, self.leaves(comp, ins), ins)[0]
        self._fusion_flops[comp.id] = total
        return total

    def mark_folded(self, comp: _Comp, node: int, stack: tuple[int, ...] = ()) -> None:
        """Map every instruction of ``comp`` (and what it calls) to ``node``."""
        if comp.id in stack:
            return
        for ins in comp.instrs:
            self.node_of.setdefault((comp.id, int(ins.id)), node)
            for c in self.called(comp, ins):
                self.mark_folded(c, node, (*stack, comp.id))

    # -- program view -----------------------------------------------------------------
    def expand(self, comp: _Comp, prefix: str, module: str, args: list[tuple[int, float]] | None,
               stack: tuple[int, ...]) -> tuple[int, float]:
        """Add the nodes of ``comp``; return (node, bytes) of its root.

        ``args[k]`` is the (node, bytes) standing for parameter k (None: the entry,
        whose parameters are nodes)."""
        if comp.id in stack:
            raise GraphFormatError(f"{comp.where}: calls itself (a cycle of computations)")
        stack = (*stack, comp.id)
        val: dict[int, tuple[int, float]] = {}
        for ins in comp.instrs:
            op, iid = str(ins.opcode), int(ins.id)
            where = f"{comp.where}, instruction {ins.name!r}"
            leaves = self.leaves(comp, ins)
            nbytes = float(sum(a.nbytes for a in leaves))
            name = f"{prefix}{ins.name}"
            if op == "parameter" and args is not None:
                k = int(ins.parameter_number)
                if not 0 <= k < len(args):
                    raise GraphFormatError(f"{where}: parameter number {k}, but the caller passes "
                                           f"{len(args)} operands")
                val[iid] = args[k]
                self.node_of.setdefault((comp.id, iid), args[k][0])
                continue
            ops = self.operands(comp, ins)
            for o in ops:
                if int(o.id) not in val:
                    raise GraphFormatError(f"{where}: uses {o.name!r} before it is defined "
                                           "(instructions must be in dependency order, as XLA "
                                           "writes them)")
            inputs = [val[int(o.id)] for o in ops]
            in_leaves = [a for o in ops for a in self.leaves(comp, o)]
            callees = self.called(comp, ins)
            if op in _CONTROL_FLOW and callees:
                roots = []
                for j, c in enumerate(callees):
                    cargs = inputs[1 + j:2 + j] if op == "conditional" else inputs
                    roots.append(self.expand(c, f"{name}/", f"{module}/{c.name}", cargs, stack))
                node = self.add(comp, ins, name, module, 0.0, 0.0, 0.0, 0.0, 0.0)
                for src, eb in roots:
                    self.b.add_edge(src, node, eb)
                if op == "conditional" and inputs:
                    self.b.add_edge(inputs[0][0], node, inputs[0][1])
            elif op == _FUSION:
                flops = sum(self.fusion_flops(c, stack) for c in callees)
                read = float(sum(a.nbytes for a in in_leaves))
                node = self.add(comp, ins, name, module, flops, read, nbytes, nbytes, 0.0)
                for c in callees:
                    self.mark_folded(c, node, stack)
                self._edges(inputs, node)
            else:
                cls = op_class(op)
                persistent = nbytes if op in ("parameter", "constant") else 0.0
                out_b = 0.0 if cls == "view" or persistent else nbytes
                if cls == "input" and not persistent:
                    out_b = nbytes  # iota, rng state ...: a fresh buffer
                flops, rd, wr = _xla_cost(op, in_leaves, leaves, ins)
                node = self.add(comp, ins, name, module, flops, rd, wr, out_b, persistent)
                for c in callees:  # to_apply computations: folded into the caller's cost
                    self.mark_folded(c, node, stack)
                if op == "get-tuple-element":  # takes one element, not the whole tuple
                    inputs = [(src, min(eb, nbytes)) for src, eb in inputs]
                self._edges(inputs, node)
            val[iid] = (node, nbytes)
        if comp.root_id not in val:
            raise GraphFormatError(f"{comp.where}: root id {comp.root_id} not found")
        return val[comp.root_id]

    def _edges(self, inputs: Iterable[tuple[int, float]], node: int) -> None:
        for src, eb in inputs:
            if src != node:
                self.b.add_edge(src, node, eb)

    # -- TpuGraphs view ---------------------------------------------------------------
    def flat_graph(self) -> None:
        module_of = {c.id: c.name for c in self.comps.values()}
        for cid, iid in self.flat:
            comp = self.comps[cid]
            ins = comp.by_id[iid]
            op = str(ins.opcode)
            leaves = self.leaves(comp, ins)
            nbytes = float(sum(a.nbytes for a in leaves))
            in_leaves = [a for o in self.operands(comp, ins) for a in self.leaves(comp, o)]
            if ins.called_computation_ids and (op in _CONTROL_FLOW or op == _FUSION):
                flops = 0.0
                rd, wr = (float(sum(a.nbytes for a in in_leaves)), nbytes) if op == _FUSION \
                    else (0.0, 0.0)
            else:
                flops, rd, wr = _xla_cost(op, in_leaves, leaves, ins)
            persistent = nbytes if op == "constant" or (op == "parameter" and comp is self.entry) \
                else 0.0
            out_b = 0.0 if op_class(op) == "view" or persistent or op in _CONTROL_FLOW else nbytes
            name = str(ins.name) if not self.dup_names else f"{comp.name}/{ins.name}"
            self.add(comp, ins, name, module_of[cid], flops, rd, wr, out_b, persistent)
        for cid, iid in self.flat:
            comp = self.comps[cid]
            ins = comp.by_id[iid]
            me = self.node_of[(cid, iid)]
            for o in self.operands(comp, ins):
                ob = float(sum(a.nbytes for a in self.leaves(comp, o)))
                src = self.node_of[(cid, int(o.id))]
                if src != me:
                    self.b.add_edge(src, me, ob)
            for c in self.called(comp, ins):
                root = c.by_id[c.root_id]
                rb = float(sum(a.nbytes for a in self.leaves(c, root)))
                src = self.node_of[(c.id, c.root_id)]
                if src != me:
                    self.b.add_edge(src, me, rb)

    def build(self) -> Graph:
        try:
            if self.view == "program":
                self.expand(self.entry, "", self.entry.name, None, ())
            else:
                names = [str(self.comps[c].by_id[i].name) for c, i in self.flat]
                self.dup_names = len(set(names)) != len(names)
                self.flat_graph()
            g = self.b.build()
        except GraphError as err:
            raise GraphError(f"{self.where}: {err}") from err
        # The builder sorts nodes topologically; map insertion indices to graph indices.
        final = [g.index[n] for n in self._inserted]
        self.node_of = {k: final[v] for k, v in self.node_of.items()}
        return g

    def node_of_flat(self, k: int) -> int:
        return self.node_of.get(self.flat[k], -1)


def hlo_module_to_graph(module: bytes | Any, *, view: str = "program", name: str | None = None,
                        source: str = "<bytes>") -> Graph:
    """Convert one XLA ``HloModuleProto`` to a :class:`~graphopt.ir.Graph`.

    Parameters
    ----------
    module : bytes or message
        A serialized ``HloModuleProto``, or one decoded by this module.
    view : {"program", "tpugraphs"}
        ``"program"``: the entry computation with control flow inlined and fusions
        summarized; ``"tpugraphs"``: every instruction of every computation in proto
        order (TpuGraphs' node numbering). See the module docstring.
    name : str, optional
        Graph name; default the module's name.
    source : str
        What to call the input in error messages (a file name).

    Returns
    -------
    Graph
        Op types are XLA opcode names; ``graph.meta`` records the module name, entry
        computation, view and the module's computation and instruction counts.

    Raises
    ------
    GraphFormatError
        The bytes do not decode, or the module is inconsistent: no entry computation,
        an operand or called computation id that does not exist, duplicate ids, a use
        before definition, a computation calling itself, a negative dimension.
    ImportError
        The ``protobuf`` package is missing.

    Notes
    -----
    O(instructions + operands). Not checked: that shapes agree with the opcode's
    semantics (an ``add`` of mismatched shapes is taken as given), layouts, and the
    instruction fields not declared in the schema (metadata, literals, sharding).

    Examples
    --------
    >>> from pathlib import Path
    >>> from graphopt.data import tpugraphs_dir
    >>> p = tpugraphs_dir() / "op_tuning_data.pb"
    >>> if p.exists():  # doctest: +SKIP
    ...     g = load_tuning_data(p)[0].module
    ...     g.op.tolist()
    ['parameter', 'parameter', 'fusion']
    """
    if isinstance(module, (bytes, bytearray, memoryview)):
        module = _parse("HloModuleProto", bytes(module), source)
    return _HloConverter(module, view, source, name).build()


# ------------------------------------------------------------------------------------
# Tuning files
# ------------------------------------------------------------------------------------

def _read_bytes(path: str | os.PathLike) -> tuple[bytes, str]:
    p = Path(path)
    if not p.is_file():
        raise GraphFormatError(f"{p}: no such file")
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
        fields = set(_top_level_fields(data, source))
        # TuningData has only field 1 (modules); ModuleTuningData also 2, 3, 4. A lone
        # field 1 is a TuningData when each entry decodes as a module with its runs.
        message = "ModuleTuningData" if fields - {1} else "TuningData"
        if message == "TuningData":
            try:
                td = _parse("TuningData", data, source)
                ok = all(m.HasField("module") and len(m.module.computations) for m in td.modules)
            except GraphFormatError:
                ok = False
            if ok:
                return list(td.modules)
            message = "ModuleTuningData"
    if message == "TuningData":
        return list(_parse("TuningData", data, source).modules)
    return [_parse("ModuleTuningData", data, source)]


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
    ro = {k: _frozen(v) for k, v in (("rt", runtimes), ("err", errors),
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
        How each module becomes a graph (see the module docstring).
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
    _require_protobuf()
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
    _require_protobuf()
    modules = _decode_tuning_file(data, source, "auto")
    if not -len(modules) <= index < len(modules):
        raise GraphFormatError(f"{source}: module index {index} out of range; the file holds "
                               f"{len(modules)} modules")
    m = modules[index]
    if not m.HasField("module"):
        raise GraphFormatError(f"{source}: module {index} has no HLO module (field 'module' = 1)")
    return _HloConverter(m.module, view, source, None).build()


# ------------------------------------------------------------------------------------
# The public .npz files
# ------------------------------------------------------------------------------------

def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


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


def _npz_node_shapes(feat: np.ndarray) -> tuple[list[tuple[int, ...]], list[str], np.ndarray]:
    """Shapes, dtypes and output bytes per node from the 140 standard node features
    (columns 2..20 element type one-hot, 21..26 dims, 28 element count)."""
    n = len(feat)
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
        if et is not None and et in _ELEMENT_TYPES:
            name, size = _ELEMENT_TYPES[et]
        else:  # tuples, tokens, or no type given: no array of its own
            name = {_TUPLE: "tuple", _OPAQUE: "opaque", _TOKEN: "token"}.get(et or 0, "float32")
            size = 0.0
            shape = () if et in (_TUPLE, _OPAQUE, _TOKEN) else shape
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
    the module docstring).

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
    if not p.is_file():
        raise GraphFormatError(f"{source}: no such file")
    try:
        with np.load(p, allow_pickle=False) as npz:
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise GraphFormatError(f"{source}: a single .npy array, expected an .npz archive "
                                       "of TpuGraphs keys")
            z = {k: npz[k] for k in npz.files}
    except ValueError as err:
        if "pickle" in str(err):
            raise GraphFormatError(f"{source}: contains pickled objects, which graphopt never "
                                   "loads; TpuGraphs files hold plain numeric arrays") from err
        raise GraphFormatError(f"{source}: unreadable npz ({err})") from err
    except (OSError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as err:
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
        graph=graph, collection="tile" if tile else "layout", node_feat=_frozen(feat),
        node_opcode=_frozen(opcode), edge_index=_frozen(edges), config_runtime=_frozen(runtime),
        **{k: None if v is None else _frozen(v) for k, v in extra.items()},
        node_index=_frozen(node_index), path=source)


def _npz_graph(p: Path, feat: np.ndarray, opcode: np.ndarray,
               edges: np.ndarray) -> tuple[Graph, np.ndarray]:
    n = len(opcode)
    ops = [opcode_name(o) for o in opcode]
    if feat.shape[1] >= 29:
        shapes, dtypes, nbytes = _npz_node_shapes(feat)
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
        arr = _Arr(shapes[i], dtypes[i], nbytes[i] / max(math.prod(shapes[i]), 1))
        ins = [_Arr(shapes[j], dtypes[j], nbytes[j] / max(math.prod(shapes[j]), 1))
               for j in preds[i]]
        flops, rd, wr = _shape_cost(op, tuple(ins), (arr,) if dtypes[i] not in
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

