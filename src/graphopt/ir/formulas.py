"""FLOP and byte counts of ops from their tensor shapes.

Frontends call :func:`op_cost` with an op's input and output shapes; the result goes
into the graph's ``flops``, ``bytes_read`` and ``bytes_written``. Conventions: a
multiply-add is 2 FLOPs; bytes are the tensors an op reads and writes once each
(what an unfused kernel moves through memory); views move nothing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from graphopt.ir.ops import op_class

__all__ = ["DTYPE_BYTES", "UnknownOpWarning", "dtype_bytes", "numel", "op_cost"]

Shape = Sequence[int]

DTYPE_BYTES = {
    "float64": 8, "float32": 4, "tfloat32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
    # XLA's names
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2, "s64": 8, "s32": 4, "s16": 2, "s8": 1, "u8": 1,
    "u32": 4, "u64": 8, "pred": 1, "c64": 8, "c128": 16,
}
# Unsigned types the ONNX, JAX and TpuGraphs frontends meet (appended).
DTYPE_BYTES.update({"uint16": 2, "uint32": 4, "uint64": 8, "u16": 2})

# FLOPs per output element for elementwise ops that are more than one arithmetic op.
_TRANSCENDENTAL = {"exp": 4, "log": 4, "tanh": 6, "sigmoid": 5, "gelu": 10, "silu": 6, "erf": 6,
                   "pow": 4, "sqrt": 2, "rsqrt": 2, "sin": 4, "cos": 4, "gelu_backward": 14,
                   "silu_backward": 8, "sigmoid_backward": 3, "tanh_backward": 3,
                   "adam_update": 12, "sgd_update": 2, "dropout": 2, "logistic": 5,
                   "exponential": 4, "power": 4}
# Optimizer updates write the parameter and its state; their FLOPs count per parameter
# element (the first output).
_OPTIMIZER_UPDATES = frozenset({"sgd_update", "adam_update"})


class UnknownOpWarning(UserWarning):
    """An op the cost formulas do not know got a best-effort cost from its tensor sizes."""


def dtype_bytes(dtype: str) -> int:
    """Bytes per element; 4 for an unknown dtype name."""
    return DTYPE_BYTES.get(str(dtype).replace("torch.", ""), 4)


def numel(shape: Shape) -> int:
    return int(math.prod(int(d) for d in shape))


def op_cost(op: str, in_shapes: Sequence[Shape], out_shapes: Sequence[Shape],
            dtype: str = "float32", in_dtypes: Sequence[str] | None = None,
            warn: bool = True, output_mask: Sequence[bool] | None = None
            ) -> tuple[float, float, float]:
    """``(flops, bytes_read, bytes_written)`` of one op.

    Parameters
    ----------
    op : str
        Op type (see :mod:`graphopt.ir.ops`).
    in_shapes, out_shapes : sequences of shapes
        Tensor inputs in argument order (for ``linear``: input, weight[, bias]; for
        ``addmm``: bias, a, b; for ``conv``: input, weight[, bias]; for
        ``conv_backward_*`` and ``convolution_backward``: grad_out, input, weight; for
        ``adam_update``: parameter, gradient, first and second moments), and outputs
        (for an optimizer update: the tensors it writes in place, parameter first).
    dtype : str
        Element type of the outputs (and of the inputs unless ``in_dtypes`` is given).
    warn : bool
        Warn (:class:`UnknownOpWarning`) for an op type the formulas do not know; its
        cost is then one FLOP per output element and its tensors' bytes, never zero.
    output_mask : sequence of bool, optional
        For ``convolution_backward``: which of grad_input, grad_weight and grad_bias it
        computes (PyTorch's ``output_mask``; default all three). ``out_shapes`` lists
        only the computed ones.

    Examples
    --------
    >>> op_cost("mm", [(64, 128), (128, 32)], [(64, 32)])
    (524288.0, 49152.0, 8192.0)
    >>> op_cost("relu", [(10,)], [(10,)])
    (10.0, 40.0, 40.0)
    >>> op_cost("convolution_backward", [(1, 4, 8, 8), (1, 2, 8, 8), (4, 2, 3, 3)],
    ...         [(4, 2, 3, 3)], output_mask=[False, True, False])[0]  # weight gradient only
    9216.0
    """
    cls = op_class(op)
    isz = [dtype_bytes(d) for d in (in_dtypes or [dtype] * len(in_shapes))]
    osz = dtype_bytes(dtype)
    read = float(sum(numel(s) * b for s, b in zip(in_shapes, isz)))
    written = float(sum(numel(s) for s in out_shapes) * osz)
    out_n = sum(numel(s) for s in out_shapes)
    in_n = sum(numel(s) for s in in_shapes)
    if cls in ("view", "input"):
        return 0.0, 0.0, 0.0
    if cls == "matmul":
        return float(2 * out_n * _contraction(op, in_shapes, out_shapes) + _bias_flops(op, out_n)), \
            read, written
    if cls == "conv":
        return _conv_flops(op, in_shapes, out_shapes, output_mask), read, written
    if cls == "elementwise":
        n = numel(out_shapes[0]) if op in _OPTIMIZER_UPDATES and out_shapes else out_n
        return float(n * _TRANSCENDENTAL.get(op, 1)), read, written
    if cls == "reduction":
        return float(in_n), read, written
    if cls == "softmax":
        return float(5 * max(out_n, in_n)), read, written
    if cls == "norm":
        return float((12 if op.endswith("backward") or op.endswith("grad") else 8) * out_n), \
            read, written
    if cls == "pool":
        return float(max(in_n, out_n)), read, written
    if cls == "embedding":
        if op in ("embedding", "gather", "index_select", "index", "dynamic-slice"):
            # Only the gathered rows (and the indices) are read, not the whole table.
            idx = numel(in_shapes[1]) * 8 if len(in_shapes) > 1 else 0
            return 0.0, float(written + idx), written
        return float(out_n), read, written
    if cls in ("data_movement", "collective"):
        return 0.0, read, written
    if warn:
        warnings.warn(f"op {op!r} has no cost formula; using its tensor sizes "
                      f"({out_n} FLOPs, {read + written:.0f} bytes)", UnknownOpWarning, stacklevel=2)
    return float(out_n), read, written


def _contraction(op: str, ins: Sequence[Shape], outs: Sequence[Shape]) -> int:
    """Length of the summed dimension of a matrix product."""
    if op in ("addmm", "baddbmm") and len(ins) >= 2 and len(ins[1]):
        return int(ins[1][-1])
    if ins and len(ins[0]):
        if op in ("mm", "bmm", "matmul", "linear", "dot") and len(ins) >= 2:
            return int(ins[0][-1])
    # einsum and anything else: from sizes, numel(a) * numel(b) = numel(out) * k^2 when
    # there is no batch dimension; good enough for a cost estimate.
    if len(ins) >= 2 and outs:
        a, b, o = numel(ins[0]), numel(ins[1]), max(numel(outs[0]), 1)
        return max(1, int(round(math.sqrt(a * b / o))))
    return 1


def _bias_flops(op: str, out_n: int) -> int:
    return out_n if op in ("addmm", "baddbmm") else 0


def _conv_flops(op: str, ins: Sequence[Shape], outs: Sequence[Shape],
                output_mask: Sequence[bool] | None) -> float:
    if op in ("conv", "convolution"):
        # input, weight (C_out, C_in/groups, *kernel): each output element is a dot
        # product of length C_in/groups * prod(kernel).
        w = ins[1] if len(ins) > 1 else (1,)
        return float(2 * numel(outs[0]) * numel(w[1:]))
    # Backward: grad_out, input, weight. Each of the input and weight gradients costs
    # as much as the forward convolution; the bias gradient sums grad_out.
    if len(ins) >= 3:
        w, g = ins[2], ins[0]
        if op == "convolution_backward":
            want_in, want_w, want_b = (bool(m) for m in (output_mask or (True, True, True)))
            return float(2 * numel(g) * numel(w[1:]) * (want_in + want_w) + numel(g) * want_b)
        return float(2 * numel(g) * numel(w[1:]))
    return float(2 * sum(numel(s) for s in outs))
