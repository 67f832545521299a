"""The protobuf side of TpuGraphs' tuning files: their messages, declared at run time.

The messages are declared here from their field numbers (no generated ``_pb2`` code);
only the fields the readers use are declared, everything else is skipped as unknown
fields. Needs the ``protobuf`` package, imported only when a file is read.
"""

from __future__ import annotations

import functools
from typing import Any

from graphopt.errors import GraphFormatError

_REP = "repeated"
# message → [(field, number, type or message name[, "repeated"])]. The TpuGraphs
# messages follow tpu_graphs/proto/tuning.proto; the XLA ones xla/service/hlo.proto
# and xla/xla_data.proto (only the fields read here).
SCHEMA: dict[str, list[tuple]] = {
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


def require_protobuf():
    """The protobuf modules the messages are built with; a clear error when missing."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as err:
        raise ImportError("reading TpuGraphs tuning protos needs the 'protobuf' package: "
                          "pip install protobuf") from err
    return descriptor_pb2, descriptor_pool, message_factory


@functools.cache
def messages() -> dict[str, Any]:
    """Message classes built from :data:`SCHEMA` in a private descriptor pool."""
    descriptor_pb2, descriptor_pool, message_factory = require_protobuf()
    F = descriptor_pb2.FieldDescriptorProto
    scalar = {"int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64, "int32": F.TYPE_INT32,
              "bool": F.TYPE_BOOL, "string": F.TYPE_STRING}
    pkg = "graphopt_tpugraphs"
    fdp = descriptor_pb2.FileDescriptorProto(name="graphopt_tpugraphs.proto", package=pkg,
                                             syntax="proto3")
    for mname, fields in SCHEMA.items():
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
            for m in SCHEMA}


def top_level_fields(data: bytes, source: str) -> list[int]:
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


def parse(message: str, data: bytes, source: str):
    """Decode ``data`` as the message named ``message``; a :class:`GraphFormatError`
    naming ``source`` when it does not decode."""
    from google.protobuf.message import DecodeError

    try:
        return messages()[message].FromString(data)
    except (DecodeError, RecursionError, ValueError) as err:
        raise GraphFormatError(f"{source}: cannot decode it as a TpuGraphs {message} "
                               f"({err})") from err
