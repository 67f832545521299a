"""ONNX models → :class:`~graphopt.ir.Graph`.

Every ONNX node becomes one node whose op type is the IR's name for it (``MatMul`` →
``matmul``, ``Gemm`` → ``addmm``/``mm``, ``Conv`` → ``conv``, ``Relu`` → ``relu`` ...; see
:data:`ONNX_OPS`); ops without an IR counterpart keep their ONNX name in snake case
(``NonMaxSuppression`` → ``non_max_suppression``), are costed at one FLOP per output
element and listed in ``graph.meta["unmapped_ops"]``. Graph inputs become ``input``
nodes; initializers (and ``Constant`` nodes) become ``parameter`` (``constant``) nodes
holding their bytes as persistent memory, sending their whole value on each edge.
Shapes come from ``onnx.shape_inference.infer_shapes`` (with data propagation, so
``Reshape`` targets computed in the graph resolve); FLOPs and bytes from
:func:`graphopt.ir.formulas.op_cost`, with exact formulas for ``Gemm`` (transposes),
``ConvTranspose`` and pools (kernel size).

What is not modelled: the bodies of ``If``/``Loop``/``Scan`` (one opaque node each,
costed by its outputs); values (only shapes are read; external weight files are never
loaded).
"""

from __future__ import annotations

import graphlib
import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from graphopt.ir.formulas import UnknownOpWarning, op_cost
from graphopt.errors import GraphError, GraphFormatError
from graphopt.ir.graph import MAX_BYTES, Graph, GraphBuilder
from graphopt._files import regular_file
from graphopt.ir.ops import op_class

__all__ = ["ONNX_OPS", "from_onnx"]

#: ONNX op type → IR op type (those not listed keep their name in snake case).
ONNX_OPS: dict[str, str] = {
    "MatMul": "matmul", "Gemm": "addmm", "Conv": "conv", "ConvTranspose": "conv",
    "Einsum": "einsum", "Relu": "relu", "LeakyRelu": "relu", "PRelu": "relu",
    "Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Reciprocal": "div", "Neg": "neg",
    "Mod": "remainder",
    "Exp": "exp", "Log": "log", "Tanh": "tanh", "Sigmoid": "sigmoid", "HardSigmoid": "sigmoid",
    "Gelu": "gelu", "Mish": "gelu", "HardSwish": "silu", "Elu": "exp", "Selu": "exp",
    "Softplus": "exp", "Erf": "erf", "Sqrt": "sqrt", "Pow": "pow", "Abs": "abs", "Sin": "sin",
    "Cos": "cos", "Floor": "floor", "Ceil": "ceil", "Sign": "sign", "Max": "maximum",
    "Min": "minimum", "Clip": "clamp", "Where": "where", "Equal": "compare", "Less": "compare",
    "Greater": "compare", "LessOrEqual": "compare", "GreaterOrEqual": "compare", "Not": "not",
    "And": "and", "Or": "or", "Xor": "xor", "Cast": "cast", "CastLike": "cast",
    "Dropout": "dropout", "Identity": "alias", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "LayerNormalization": "layer_norm", "BatchNormalization": "batch_norm",
    "InstanceNormalization": "group_norm", "GroupNormalization": "group_norm",
    "RMSNormalization": "rms_norm", "SimplifiedLayerNormalization": "rms_norm",
    "ReduceMean": "mean", "ReduceSum": "sum", "ReduceSumSquare": "sum", "ReduceMax": "amax",
    "ReduceMin": "amin", "ReduceProd": "prod", "ReduceL1": "norm_reduce",
    "ReduceL2": "norm_reduce", "ReduceLogSumExp": "sum", "CumSum": "sum", "ArgMax": "argmax",
    "ArgMin": "argmin", "MaxPool": "max_pool", "AveragePool": "avg_pool",
    "GlobalAveragePool": "adaptive_avg_pool", "GlobalMaxPool": "adaptive_avg_pool",
    "Resize": "upsample", "Upsample": "upsample", "Reshape": "reshape", "Flatten": "reshape",
    "Squeeze": "squeeze", "Unsqueeze": "unsqueeze", "Transpose": "transpose",
    "DepthToSpace": "permute", "SpaceToDepth": "permute", "Concat": "concat", "Split": "split",
    "Slice": "slice", "Expand": "expand", "Tile": "repeat", "Pad": "pad", "Gather": "gather",
    "GatherElements": "gather", "GatherND": "gather", "ScatterElements": "scatter",
    "ScatterND": "scatter", "TopK": "sort", "Shape": "shape", "Size": "size",
    "Constant": "constant", "ConstantOfShape": "fill", "Range": "iota", "Trilu": "where",
    "If": "conditional", "Loop": "while", "Scan": "while",
}

#: ONNX ``TensorProto.DataType`` → (dtype name, bytes per element).
_DTYPES: dict[int, tuple[str, float]] = {
    1: ("float32", 4), 2: ("uint8", 1), 3: ("int8", 1), 4: ("uint16", 2), 5: ("int16", 2),
    6: ("int32", 4), 7: ("int64", 8), 8: ("string", 0), 9: ("bool", 1), 10: ("float16", 2),
    11: ("float64", 8), 12: ("uint32", 4), 13: ("uint64", 8), 14: ("complex64", 8),
    15: ("complex128", 16), 16: ("bfloat16", 2), 17: ("float8_e4m3fn", 1),
    18: ("float8_e4m3fnuz", 1), 19: ("float8_e5m2", 1), 20: ("float8_e5m2fnuz", 1),
    21: ("uint4", 0.5), 22: ("int4", 0.5),
}

_POOLS = {"MaxPool", "AveragePool"}
#: Recurrent layers: gates per step. No IR op is one (the frontends for programs unroll
#: them into matmuls); they keep their name and are costed by their gates (:func:`_cost`).
_RECURRENT = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _snake(op_type: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", op_type).lower()


def _module_path(node_name: str) -> str:
    """``/layer1/layer1.0/conv1/Conv`` (PyTorch's exporter) → ``layer1.0.conv1``."""
    if not node_name.startswith("/"):
        return ""
    path = ""
    for part in node_name.strip("/").split("/")[:-1]:
        path = part if not path or part.startswith(path + ".") else f"{path}.{part}"
    return path


def _attr(node, name: str, default: Any = None) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _load(model: Any) -> tuple[Any, str]:
    import onnx

    if isinstance(model, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        return m, f"<onnx model {m.graph.name!r}>"
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model)), "<bytes>"
        except Exception as err:  # protobuf's DecodeError and friends
            raise GraphFormatError(f"<bytes>: not an ONNX model ({err})") from err
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        regular_file(p)
        try:
            return onnx.load(str(p), load_external_data=False), str(p)
        except Exception as err:
            raise GraphFormatError(f"{p}: not an ONNX model ({type(err).__name__}: {err})") from err
    raise TypeError(f"from_onnx expects a path, bytes or onnx.ModelProto, got {type(model).__name__}")


def _dims(type_proto) -> tuple[list[int | str | None], int] | None:
    """(dims, elem_type) of a tensor type; dims hold ints, symbolic names or None."""
    if not type_proto.HasField("tensor_type"):
        return None
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None, tt.elem_type  # type: ignore[return-value]
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return dims, tt.elem_type


#: Ops whose output holds exactly the elements of their first input, in another shape.
_SAME_COUNT = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def _check_same_count(node, before: list[int] | None, after: list[int] | None, source: str,
                      where: str) -> None:
    """Refuse a reshape whose known input and output shapes hold different element counts
    (a ``Reshape`` of 8 elements into 9: ONNX's shape inference, not strict, lets it be)."""
    if before is None or after is None:
        return
    a, b = math.prod(before), math.prod(after)
    if a != b:
        raise GraphFormatError(f"{source}: {where} turns {node.input[0]!r} of shape {before} "
                               f"({a:,} elements) into {node.output[0]!r} of shape {after} "
                               f"({b:,} elements); a {node.op_type} keeps the element count")


def _fix_inputs(model, shapes: Mapping[str, Sequence[int]], source: str) -> None:
    names = {i.name: i for i in model.graph.input}
    for k, dims in shapes.items():
        if k not in names:
            raise GraphFormatError(f"{source}: input_shapes names {k!r}, which is not a graph input; "
                                   f"inputs are {sorted(names)}")
        tt = names[k].type.tensor_type
        tt.shape.Clear()
        for d in dims:
            if int(d) < 0:
                raise GraphFormatError(f"{source}: input_shapes[{k!r}] = {list(dims)} has a "
                                       "negative size")
            tt.shape.dim.add().dim_value = int(d)


#: Elements of a value the shape folding computes (:func:`_fold_shapes`): shape vectors
#: and small constants, never weights; it bounds what a file can make the folding allocate.
FOLD_MAX_ELEMENTS = 1024
#: Ops the folding evaluates (on values of at most FOLD_MAX_ELEMENTS elements each): the
#: arithmetic of shapes, as exporters write it (``Shape -> Gather -> Unsqueeze -> Concat``).
_FOLDABLE = frozenset({
    "Constant", "Identity", "Cast", "CastLike", "Shape", "Size", "Gather", "GatherElements", "Unsqueeze",
    "Squeeze", "Concat", "Slice", "Reshape", "Flatten", "Transpose", "Add", "Sub", "Mul", "Div", "Mod",
    "Neg", "Abs", "Floor", "Ceil", "Sqrt", "Pow", "Min", "Max", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Not", "And", "Or", "Where", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin",
    "ConstantOfShape", "Range", "Expand", "Tile"})


def _infer(onnx, m):
    return onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=False, data_prop=True)


def _static(vi) -> tuple[int, ...] | None:
    d = _dims(vi.type)
    if not d or d[0] is None or not all(isinstance(x, int) and x >= 0 for x in d[0]):
        return None
    return tuple(d[0])


def _fold_shapes(onnx, m) -> None:
    """Give ``m`` the shapes ONNX's inference leaves unknown where the graph computes them
    from other tensors' shapes (a ``Slice`` whose ends come from ``Shape``, as
    ``torch.onnx.export`` writes attention): those computations are evaluated with
    ``onnx.reference`` on known shapes and small constants, and inference runs again
    with their values, until nothing more folds. Only shapes change; every node stays.
    Best effort: what cannot be evaluated keeps its unknown shape, for the caller to report."""
    import numpy as np
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    g = m.graph
    small = FOLD_MAX_ELEMENTS
    values = {}
    for t in g.initializer:
        if math.prod(t.dims) <= small and not t.external_data:
            try:
                values[t.name] = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001  values that do not match their dims: left unread
                continue
    produced = {o for node in g.node for o in node.output if o}
    for _ in range(8):  # each round's shapes can make more shape computations constant
        shapes = {vi.name: _static(vi) for vi in (*g.input, *g.value_info, *g.output)}
        shapes.update((t.name, tuple(t.dims)) for t in g.initializer)
        new = {}
        for node in g.node:
            outs = [o for o in node.output if o]
            if (node.domain not in ("", "ai.onnx") or node.op_type not in _FOLDABLE or not outs
                    or all(o in values for o in outs)):
                continue
            ins = [t for t in node.input if t]
            if node.op_type in ("Shape", "Size"):
                shape = shapes.get(node.input[0])
                if shape is None:
                    continue
                dims = np.array(shape, np.int64)
                out = [dims[_attr(node, "start", 0):_attr(node, "end", len(dims))] if node.op_type == "Shape"
                       else np.array(dims.prod(), np.int64)]
            elif all(t in values for t in ins) and _fold_fits(node, [values[t] for t in ins], small):
                try:
                    model = helper.make_model(helper.make_graph(
                        [node], "fold", [], [helper.make_value_info(o, onnx.TypeProto()) for o in outs]),
                        opset_imports=m.opset_import)
                    with warnings.catch_warnings(), np.errstate(all="ignore"):  # a file's overflows
                        warnings.simplefilter("ignore")
                        out = ReferenceEvaluator(model).run(None, {t: values[t] for t in ins})
                except Exception:  # noqa: BLE001  an op the reference cannot run: its shape stays unknown
                    continue
            else:
                continue
            for o, v in zip(outs, out):
                if np.asarray(v).size <= small:
                    values[o] = new[o] = np.asarray(v)
        if not any(o in produced for o in new):
            break
        # inference on a copy where the folded tensors are initializers, their writers gone
        keep = [node for node in g.node if not all(o in values for o in node.output if o)]
        folded = [numpy_helper.from_array(v, k) for k, v in values.items() if k in produced]
        try:
            inferred = _infer(onnx, helper.make_model(
                helper.make_graph(keep, g.name, list(g.input), list(g.output), [*g.initializer, *folded]),
                opset_imports=m.opset_import, ir_version=m.ir_version))
        except Exception:  # noqa: BLE001  the folded values contradict the graph: keep what is known
            return
        info = {vi.name: vi for vi in inferred.graph.value_info}
        for t in folded:
            info[t.name] = helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        del g.value_info[:]
        g.value_info.extend(info.values())
        for vi, out in zip(g.output, inferred.graph.output):  # inference types the outputs in place
            if _static(vi) is None:
                vi.CopyFrom(out)


def _fold_fits(node, ins: list, small: int) -> bool:
    """Whether evaluating ``node`` on ``ins`` makes a value of at most ``small``
    elements; checked before, for the ops whose output size a value sets."""
    import numpy as np

    try:
        if node.op_type == "ConstantOfShape":
            return math.prod(int(d) for d in ins[0].reshape(-1)) <= small
        if node.op_type == "Range":
            start, limit, delta = (float(v) for v in ins)
            return delta != 0 and math.ceil((limit - start) / delta) <= small
        if node.op_type == "Expand":
            return math.prod(np.broadcast_shapes(ins[0].shape, tuple(int(d) for d in ins[1]))) <= small
        if node.op_type == "Tile":
            return ins[0].size * math.prod(int(d) for d in ins[1].reshape(-1)) <= small
        return all(v.size <= small for v in ins)  # the rest make at most a product of these
    except (ValueError, TypeError, OverflowError, IndexError):
        return False


def from_onnx(model: str | os.PathLike | bytes | Any, *,
              input_shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None,
              strict: bool = True) -> Graph:
    """Build a :class:`~graphopt.ir.Graph` from an ONNX model.

    Parameters
    ----------
    model : path, bytes or onnx.ModelProto
        The model (a given ``ModelProto`` is copied, never changed).
    input_shapes : mapping of str to sequence of int, optional
        Static shapes for graph inputs, replacing symbolic (dynamic) dimensions before
        shape inference, e.g. ``{"x": (1, 3, 224, 224)}``.
    name : str, optional
        Graph name; default the ONNX graph's name or the file's stem.
    strict : bool
        Raise when a tensor has no static shape after inference (default). With
        ``False``, such tensors get a scalar shape and 0 bytes and are listed in
        ``graph.meta["unknown_shapes"]``.

    Returns
    -------
    Graph
        ``graph.meta`` records the source, opset, producer and unmapped op types.

    Raises
    ------
    GraphFormatError
        Missing or undecodable file; shape inference fails; a tensor (an input with a
        dynamic dimension, or an op output) has no static shape — the message names
        it and says how to give shapes; a node reads a tensor nothing produces;
        ``input_shapes`` names an unknown input; a tensor's shape makes it larger than
        :data:`graphopt.ir.graph.MAX_BYTES` (checked before any FLOP count is derived).
    GraphError
        The graph has a cycle.
    ImportError
        The ``onnx`` package is missing.

    Examples
    --------
    >>> import pytest; _ = pytest.importorskip("onnx")  # the example needs the onnx package
    >>> from onnx import TensorProto, helper
    >>> g = helper.make_graph(
    ...     [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
    ...     "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
    ...     [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
    ...     [helper.make_tensor("w", TensorProto.FLOAT, [8, 4], [0.0] * 32)])
    >>> graph = from_onnx(helper.make_model(g))
    >>> graph.op.tolist(), float(graph.flops.sum())
    (['parameter', 'input', 'matmul', 'relu'], 136.0)
    """
    try:
        import onnx
    except ImportError as err:
        raise ImportError("from_onnx needs the 'onnx' package: pip install onnx "
                          "(or graphopt[onnx])") from err
    m, source = _load(model)
    if input_shapes:
        _fix_inputs(m, input_shapes, source)
    try:
        m = _infer(onnx, m)
    except Exception as err:  # InferenceError, ValidationError, a malformed proto
        raise GraphFormatError(f"{source}: ONNX shape inference failed: {err}") from err
    if any(_static(vi) is None for vi in (*m.graph.value_info, *m.graph.output)):
        _fold_shapes(onnx, m)
    g = m.graph
    gname = name or g.name or (Path(source).stem if source[:1] != "<" else "onnx")

    init = {t.name: (list(t.dims), t.data_type) for t in g.initializer}
    for st in g.sparse_initializer:
        init[st.values.name] = (list(st.dims), st.values.data_type)
    info: dict[str, tuple[list, int] | None] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        info[vi.name] = _dims(vi.type)
    unknown: list[str] = []

    def tensor(tname: str, where: str) -> tuple[tuple[int, ...], str, float]:
        """(shape, dtype, bytes) of a tensor; records it when its shape is unknown."""
        dims: list | None
        if tname in init:
            dims, et = init[tname]
        else:
            dims, et = info.get(tname) or (None, 0)
        dt, size = _DTYPES.get(et, ("float32", 4))
        if dims is not None and any(isinstance(d, int) and d < 0 for d in dims):
            # ONNX sizes are int64: a size written as uint64 over 2^63 (2^64-1) reads as -1
            raise GraphFormatError(f"{source}: tensor {tname!r} ({where or 'an edge'}) has shape "
                                   f"{dims}: a size must be 0 or more (one over 2^63-1, written "
                                   "unsigned, reads as negative)")
        if dims is None or any(not isinstance(d, int) or d < 0 for d in dims):
            if where:
                unknown.append(f"{tname!r} ({where}, shape {dims})")
            return (), dt, 0.0
        nbytes = math.prod(dims) * size
        if nbytes > MAX_BYTES:  # before any count derived from it can overflow
            raise GraphFormatError(f"{source}: tensor {tname!r} ({where or 'an edge'}) has shape "
                                   f"{dims}, {nbytes:.3g} bytes, above the limit {MAX_BYTES:.3g} "
                                   "(graphopt.ir.graph.MAX_BYTES)")
        return tuple(dims), dt, nbytes

    def static(tname: str) -> list[int] | None:
        """A tensor's dims when all are known, else None."""
        dims = init[tname][0] if tname in init else (info.get(tname) or (None, 0))[0]
        return None if dims is None or not all(isinstance(d, int) for d in dims) else dims

    def stored(shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(max(d, 1) for d in shape)  # the IR's shapes are positive; bytes stay 0

    def fail_unknown() -> None:
        example = {}
        for i in g.input:
            d = _dims(i.type)
            if i.name not in init and d and d[0] is not None:
                example[i.name] = tuple(x if isinstance(x, int) else 1 for x in d[0])
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        raise GraphFormatError(
            f"{source}: {len(unknown)} tensor(s) have no static shape after ONNX shape inference: "
            f"{', '.join(unknown[:3])}{more}. Give static input shapes, e.g. "
            f"from_onnx(..., input_shapes={example or {'input': (1, 3, 224, 224)}}) or graphopt "
            f"import FILE --input-shape {_cli_shape(example)} -o graph.npz; or export "
            "with fixed sizes (torch.onnx.export without dynamic_axes); or add the shapes with "
            "onnx.shape_inference.infer_shapes or onnxruntime's symbolic shape inference before "
            "loading (strict=False treats unknown shapes as scalars)")

    b = GraphBuilder(gname, meta={"format": "onnx", "source": source,
                                  "opset": {o.domain or "ai.onnx": int(o.version)
                                            for o in m.opset_import},
                                  "producer": f"{m.producer_name} {m.producer_version}".strip()})
    unique = b.unique_name

    made: dict[str, int] = {}  # tensor -> the index of the node that writes it: ONNX graphs are SSA
    sources = set(init) | {i.name for i in g.input}
    for k, node in enumerate(g.node):
        for t in node.output:
            if t in sources:
                raise GraphFormatError(f"{source}: node {node.name or k!r} ({node.op_type}) writes "
                                       f"tensor {t!r}, a graph input or initializer")
            if t and t in node.input:
                raise GraphFormatError(f"{source}: node {node.name or k!r} ({node.op_type}) reads "
                                       f"its own output {t!r} (a cycle)")
            if t in made:
                raise GraphFormatError(f"{source}: node {node.name or k!r} ({node.op_type}) writes "
                                       f"tensor {t!r}, which node {g.node[made[t]].name or made[t]!r} "
                                       "writes too")
            if t:
                made[t] = k
    for k, node in enumerate(g.node):
        for t in node.input:
            if t and t not in made and t not in sources:
                raise GraphFormatError(f"{source}: node {node.name or k!r} ({node.op_type}) reads "
                                       f"tensor {t!r}, which no node, graph input or initializer "
                                       "produces")
    try:  # before any shape is reported missing: a cycle's tensors have none
        graphlib.TopologicalSorter({k: {made[t] for t in node.input if t in made}
                                    for k, node in enumerate(g.node)}).prepare()
    except graphlib.CycleError as err:
        cycle = [g.node[k].name or k for k in dict.fromkeys(err.args[1])]
        raise GraphFormatError(f"{source}: nodes {cycle} form a cycle") from None
    producer: dict[str, int] = {}
    used = {t for node in g.node for t in node.input if t}
    for t in init:
        if t not in used:
            continue
        shape, dt, nb = tensor(t, "initializer")
        producer[t] = b.add_node(unique(t), "parameter", shape=stored(shape), dtype=dt,
                                 out_bytes=0.0, persistent_bytes=nb)
    for vi in g.input:
        if vi.name in init:
            continue
        shape, dt, nb = tensor(vi.name, "graph input")
        producer[vi.name] = b.add_node(unique(vi.name), "input", shape=stored(shape), dtype=dt,
                                       out_bytes=nb)
    if unknown and strict:
        fail_unknown()

    unmapped: dict[str, list[str | int]] = {}  # op type -> its nodes (name, else index)
    pending: list[tuple[int, Any]] = []
    for k, node in enumerate(g.node):
        where = f"node {node.name or k!r} ({node.op_type})"
        ins = [tensor(t, where) if t else None for t in node.input]
        outs = [tensor(t, where) for t in node.output if t]
        op = ONNX_OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if op is None:
            op = _snake(node.op_type)
            kind = node.op_type if not node.domain else f"{node.domain}.{node.op_type}"
            if not (node.op_type in _RECURRENT and not node.domain):
                unmapped.setdefault(kind, []).append(node.name or k)
        if node.op_type == "Gemm" and (len(node.input) < 3 or not node.input[2]):
            op = "mm"
        if node.op_type in _SAME_COUNT and not node.domain and node.input and node.output:
            _check_same_count(node, static(node.input[0]), static(node.output[0]), source, where)
        shape, dt = (outs[0][0], outs[0][1]) if outs else ((), "float32")
        nbytes = float(sum(o[2] for o in outs))
        flops, rd, wr = _cost(node, op, [i for i in ins if i is not None], outs, dt)
        cls = op_class(op)
        persistent = nbytes if op == "constant" else 0.0
        out_b = 0.0 if cls == "view" or persistent else nbytes
        i = b.add_node(unique(node.name or f"{node.op_type}_{k}"), op, shape=stored(shape), dtype=dt,
                       flops=flops, bytes_read=rd, bytes_written=wr, out_bytes=out_b,
                       persistent_bytes=persistent, module=_module_path(node.name))
        for t in node.output:
            if t:
                producer[t] = i
        pending.append((i, node))
    if unknown and strict:
        fail_unknown()
    for i, node in pending:  # edges once every producer is known (any node order)
        for t in node.input:
            if t and producer[t] != i:
                b.add_edge(producer[t], i, tensor(t, "")[2])
    if unmapped:
        b.meta["unmapped_ops"] = sorted(unmapped)
        which = [f"{op} (node {nodes[0]!r}" + (f" and {len(nodes) - 1} more)" if len(nodes) > 1 else ")")
                 for op, nodes in sorted(unmapped.items())]
        warnings.warn(f"{source}: ONNX ops without an IR mapping, costed at one FLOP per output "
                      f"element: {', '.join(which)}", UnknownOpWarning, stacklevel=2)
    if unknown:
        b.meta["unknown_shapes"] = sorted(set(unknown))
    try:
        return b.build()
    except GraphError as err:
        raise GraphError(f"{source}: {err}") from err


def _cli_shape(example: dict) -> str:
    """``{'x': (2, 8)}`` as ``graphopt import``'s option takes it: ``x=2x8``."""
    name, dims = next(iter(example.items()), ("input", (1, 3, 224, 224)))
    return f"{name}={'x'.join(map(str, dims))}"


def _cost(node, op: str, ins: list, outs: list, dtype: str) -> tuple[float, float, float]:
    """(flops, bytes_read, bytes_written) of one ONNX node."""
    read, written = float(sum(i[2] for i in ins)), float(sum(o[2] for o in outs))
    if op_class(op) in ("view", "input") or not outs:
        return 0.0, 0.0, 0.0
    out_n = sum(math.prod(o[0]) for o in outs)
    if node.op_type == "Gemm" and len(ins) >= 2 and len(ins[0][0]) == 2:
        a = ins[0][0]
        k = a[0] if _attr(node, "transA", 0) else a[1]
        return float(2 * out_n * k + (out_n if op == "addmm" else 0)), read, written
    if node.op_type == "ConvTranspose" and len(ins) >= 2:
        x, w = ins[0][0], ins[1][0]
        return float(2 * math.prod(x) * math.prod(w[1:])), read, written
    if node.op_type in _POOLS:
        kernel = _attr(node, "kernel_shape", None) or [1]
        return float(out_n * math.prod(kernel)), read, written
    if node.op_type in _RECURRENT and not node.domain and len(ins) >= 3 and len(ins[0][0]) == 3:
        # per step and direction: the gates' products with the input and the hidden
        # state, then one FLOP per gate element and two per hidden unit
        x, (dirs, gh, size) = ins[0][0], ins[1][0]
        seq, batch = (x[1], x[0]) if _attr(node, "layout", 0) else (x[0], x[1])
        hidden = gh // _RECURRENT[node.op_type]
        return float(seq * dirs * batch * (2 * gh * (size + hidden) + gh + 2 * hidden)), read, written
    flops, rd, wr = op_cost(op, [i[0] for i in ins], [o[0] for o in outs], dtype,
                            in_dtypes=[i[1] for i in ins], warn=False)
    if op_class(op) == "embedding":
        return flops, rd, wr
    return flops, read, written
