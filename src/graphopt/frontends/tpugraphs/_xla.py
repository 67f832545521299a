"""XLA shapes and per-instruction costs, shared by the HLO and the ``.npz`` readers.

How costs follow from shapes is described in :mod:`graphopt.frontends.tpugraphs.hlo`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from graphopt.errors import GraphFormatError
from graphopt.ir.formulas import op_cost
from graphopt.ir.ops import op_class

#: XLA ``PrimitiveType`` enum values → (dtype name, bytes per element). Names follow
#: the rest of graphopt (numpy's), not XLA's short forms.
ELEMENT_TYPES: dict[int, tuple[str, float]] = {
    1: ("bool", 1), 2: ("int8", 1), 3: ("int16", 2), 4: ("int32", 4), 5: ("int64", 8),
    6: ("uint8", 1), 7: ("uint16", 2), 8: ("uint32", 4), 9: ("uint64", 8),
    10: ("float16", 2), 11: ("float32", 4), 12: ("float64", 8), 15: ("complex64", 8),
    16: ("bfloat16", 2), 18: ("complex128", 16), 19: ("float8_e5m2", 1),
    20: ("float8_e4m3fn", 1), 21: ("int4", 0.5), 22: ("uint4", 0.5),
}
#: ``PrimitiveType`` values of shapes that hold no array of their own.
TUPLE, OPAQUE, TOKEN = 13, 14, 17


# ------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Arr:
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


def array_leaves(shape, where: str) -> list[Arr]:
    """Array leaves of a ShapeProto, tuples flattened depth first."""
    et = int(shape.element_type)
    if et == TUPLE or len(shape.tuple_shapes):
        out: list[Arr] = []
        for s in shape.tuple_shapes:
            out += array_leaves(s, where)
        return out
    if et in (OPAQUE, TOKEN, 0):
        return []
    dims = tuple(int(d) for d in shape.dimensions)
    if any(d < 0 for d in dims):
        raise GraphFormatError(f"{where}: shape has a negative dimension {list(dims)} (a size "
                               "over 2^63-1, written unsigned, reads as negative)")
    name, size = ELEMENT_TYPES.get(et, (f"xla_type_{et}", 4.0))
    return [Arr(dims, name, size)]


def shape_dtype(shape, leaves: list[Arr]) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) to store for a node: its first array leaf; zero dims become 1."""
    if leaves:
        return tuple(max(d, 1) for d in leaves[0].dims), leaves[0].dtype
    et = int(shape.element_type)
    return (), {TUPLE: "tuple", OPAQUE: "opaque", TOKEN: "token"}.get(et, "tuple")


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


def xla_cost(op: str, ins: list[Arr], outs: list[Arr], instr=None) -> tuple[float, float, float]:
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
def shape_cost(op: str, ins: tuple[Arr, ...], outs: tuple[Arr, ...]) -> tuple[float, float, float]:
    """:func:`xla_cost` from shapes alone, memoized (graphs repeat the same ops a lot)."""
    return xla_cost(op, list(ins), list(outs))


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` contiguous and read-only: records and samples hand out arrays no caller may
    change."""
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a
