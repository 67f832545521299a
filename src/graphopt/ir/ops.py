"""The op vocabulary: op type names, the class each belongs to, and stable ids.

Frontends may emit any op type string. The class decides how the cost model times
an op and whether the fusion pass may fuse it; the id feeds learned models. An op
type not listed here is class ``other`` with id 0, so the vocabulary can grow
without breaking saved graphs (ids of listed ops never change: append only).
"""

from __future__ import annotations

import numpy as np

__all__ = ["FUSIBLE_CONSUMER", "FUSIBLE_PRODUCER", "OP_CLASSES", "OP_VOCAB", "op_class", "op_id", "op_ids"]

#: Op classes. ``view`` and ``input`` ops cost nothing and launch no kernel.
OP_CLASSES = (
    "other",
    "input",
    "view",
    "matmul",
    "conv",
    "elementwise",
    "reduction",
    "softmax",
    "norm",
    "embedding",
    "data_movement",
    "pool",
    "collective",
)

_CLASS_OF: dict[str, str] = {}


def _add(cls: str, names: str) -> None:
    for n in names.split():
        _CLASS_OF[n] = cls


# PyTorch-style names (what the torch frontend and the zoo emit) first, then XLA HLO
# opcodes (the TpuGraphs frontend). Order here fixes ids: append, never reorder.
_add("input", "input parameter constant placeholder iota rng-get-and-update-state")
_add("view", "view reshape expand squeeze unsqueeze t alias detach getitem slice_view "
     "bitcast get-tuple-element tuple unsafe_view as_strided")
_add("matmul", "matmul mm bmm addmm linear baddbmm einsum dot")
_add("conv", "conv conv_backward_input conv_backward_weight convolution")
_add("elementwise", "add sub mul div neg exp log tanh sigmoid relu gelu silu pow sqrt rsqrt "
     "where maximum minimum dropout clamp abs cast fill compare select erf sin cos "
     "relu_backward gelu_backward silu_backward sigmoid_backward tanh_backward "
     "dropout_backward sgd_update adam_update threshold_backward masked_fill "
     "subtract multiply divide negate exponential tanh_ logistic convert power "
     "and or not xor floor ceil round-nearest-afz sign clamp_ rem atan2 log-plus-one "
     "exponential-minus-one is-finite real imag")
_add("reduction", "sum mean amax amin argmax argmin var std reduce reduce-window "
     "cross_entropy nll_loss nll_loss_backward cross_entropy_backward all any prod norm_reduce")
_add("softmax", "softmax log_softmax softmax_backward log_softmax_backward")
_add("norm", "layer_norm layer_norm_backward batch_norm batch_norm_backward group_norm "
     "rms_norm batch-norm-training batch-norm-inference batch-norm-grad")
_add("embedding", "embedding embedding_backward gather scatter index index_put index_select "
     "dynamic-slice dynamic-update-slice sort")
_add("data_movement", "transpose permute concat cat split slice pad copy broadcast contiguous "
     "clone stack flip roll repeat reverse concatenate copy-start copy-done")
_add("pool", "max_pool avg_pool max_pool_backward avg_pool_backward adaptive_avg_pool "
     "upsample upsample_backward")
_add("collective", "all_reduce all_gather reduce_scatter all-reduce all-gather reduce-scatter "
     "all-to-all collective-permute send recv send-done recv-done")
_add("other", "fusion call custom-call while conditional map after-all partition-id replica-id "
     "infeed outfeed domain optimization-barrier")

# Appended for the TpuGraphs, ONNX and JAX frontends: the rest of XLA's opcodes (the
# TpuGraphs opcode table) and ONNX's shape queries.
_add("view", "add-dependency set-dimension-size dynamic-reshape opt-barrier shape size")
_add("elementwise", "bitcast-convert count-leading-zeros complex cosine sine tan cbrt popcnt "
     "reduce-precision remainder rng rng-bit-generator shift-left shift-right-arithmetic "
     "shift-right-logical round-nearest-even stochastic-convert tuple-select")
_add("input", "get-dimension-size")
_add("pool", "select-and-scatter")
_add("collective", "collective-permute-start collective-permute-done all-reduce-start "
     "all-reduce-done all-gather-start all-gather-done")
_add("other", "cholesky triangular-solve fft async-start async-update async-done trace")

# Appended for the PyTorch frontend: ATen's views (no copy, unlike ONNX's and XLA's
# transpose and slice), model state that is not a parameter, the fused convolution
# gradient and the group-norm gradient.
_add("view", "permute_view transpose_view select_view split_view unbind_view narrow_view "
     "diagonal_view unfold_view")
_add("input", "buffer optimizer_state")
_add("conv", "convolution_backward")
_add("norm", "group_norm_backward")
# The backward of slicing and selecting: writes a gradient into a zero tensor.
_add("data_movement", "slice_scatter select_scatter")

#: Ordered vocabulary; id 0 is reserved for op types not listed.
OP_VOCAB: tuple[str, ...] = ("<unknown>",) + tuple(_CLASS_OF)
_ID_OF = {name: i for i, name in enumerate(OP_VOCAB)}
_CLASS_ID = {c: i for i, c in enumerate(OP_CLASSES)}

#: Classes whose op may be fused into its consumer (XLA's loop and input fusion).
FUSIBLE_PRODUCER = frozenset({"elementwise", "data_movement", "view", "matmul", "conv", "norm",
                              "softmax", "reduction"})
#: Classes that may absorb a fusible producer.
FUSIBLE_CONSUMER = frozenset({"elementwise", "data_movement", "reduction", "softmax", "norm",
                              "pool", "view"})


def op_class(op: str) -> str:
    """Class of an op type, ``"other"`` when the op is not in the vocabulary.

    >>> op_class("addmm"), op_class("relu"), op_class("my_custom_op")
    ('matmul', 'elementwise', 'other')
    """
    return _CLASS_OF.get(op, "other")


def op_id(op: str) -> int:
    """Stable integer id of an op type (0 for unknown ops)."""
    return _ID_OF.get(op, 0)


def op_ids(ops: np.ndarray) -> np.ndarray:
    """Vectorized :func:`op_id`: int64 array of the same length as ``ops``."""
    return np.fromiter((_ID_OF.get(str(o), 0) for o in ops), dtype=np.int64, count=len(ops))


def class_ids(ops: np.ndarray) -> np.ndarray:
    """Index into :data:`OP_CLASSES` of every op type (int64)."""
    return np.fromiter((_CLASS_ID[_CLASS_OF.get(str(o), "other")] for o in ops),
                       dtype=np.int64, count=len(ops))
