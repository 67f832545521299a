"""PyTorch frontend: forward graphs from ``torch.export``, training steps from ``make_fx``.

A forward graph is the ATen graph of :func:`torch.export.export`, decomposed to core
ATen. A training step is one functional step traced with
:func:`~torch.fx.experimental.proxy_tensor.make_fx` on fake tensors (nothing runs, so
models of any size trace on a laptop): the model through
:func:`torch.func.functional_call`, a loss, the backward pass from
:func:`torch.autograd.grad`, and one in-place update op per parameter (``sgd_update``
or ``adam_update``, as TensorFlow's ``ApplyGradientDescent`` and ``ApplyAdam``).

Every ATen op becomes one node of the IR, named by :data:`ATEN_TO_IR` or by its own
name where the vocabulary (:mod:`graphopt.ir.ops`) has it; FLOPs and bytes come from
:func:`graphopt.ir.formulas.op_cost` with the traced shapes. Views (``view``,
``permute``, ``getitem``, ...) are zero-cost ``view`` nodes; an edge out of one carries
the bytes a copy of the view would move. Parameters, buffers and Adam's moments are
source nodes whose ``persistent_bytes`` is their size; their edges carry their whole
value. Each node keeps the module path it came from; in a training step each parameter,
its optimizer state, its update op and the ops writing its gradient share a colocation
group.

Conversion walks the traced graph once: O(nodes + edges).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import operator
import os
import pickle
import warnings
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.fx.traceback as fx_traceback
from torch import Tensor, fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.attention import SDPBackend, sdpa_kernel

from graphopt.ir.formulas import UnknownOpWarning, op_cost
from graphopt.frontends.model import summed_outputs
from graphopt.errors import FrontendError, GraphFormatError, GraphoptError
from graphopt._files import regular_file
from graphopt.ir.graph import Graph, GraphBuilder
from graphopt.ir.ops import OP_VOCAB, op_class

__all__ = ["ATEN_TO_IR", "KEEP_UNDECOMPOSED", "MAX_EXPANSION", "MAX_INPUT_BYTES", "TracedProgram",
           "first_line", "from_exported", "from_torch", "load_archive", "load_exported",
           "load_program", "trace_exported", "trace_program"]

#: The most bytes of example inputs drawn for a program loaded without them: a ``.pt2``
#: file declares their shapes, so this bounds what an outside file can make us allocate.
MAX_INPUT_BYTES = 2**31

#: How much larger a ``.pt2`` archive's members may be than the bytes they take in the
#: file: torch.export.save stores them uncompressed, and a zip bomb's ratio is in the
#: thousands (the reader allocates what a member declares).
MAX_EXPANSION = 100

#: ATen op (``name`` or ``name.overload``) → IR op type, where the names differ. Any
#: other ATen op keeps its name if the vocabulary has it, else it is an unknown op.
ATEN_TO_IR: dict[str, str] = {
    # ATen's views alias their input: no copy, unlike ONNX's and XLA's transpose/slice.
    "permute": "permute_view", "transpose": "transpose_view", "select": "select_view",
    "slice": "slice_view", "split": "split_view", "split_with_sizes": "split_view",
    "unbind": "unbind_view", "narrow": "narrow_view", "diagonal": "diagonal_view",
    "unfold": "unfold_view", "_unsafe_view": "unsafe_view", "lift_fresh": "alias",
    "_convolution": "convolution",
    "native_dropout": "dropout", "native_dropout_backward": "dropout_backward",
    "_to_copy": "cast", "lift_fresh_copy": "copy",
    "full": "fill", "full_like": "fill", "zeros": "fill", "zeros_like": "fill", "ones": "fill",
    "ones_like": "fill", "empty": "fill", "empty_like": "fill", "empty_strided": "fill",
    "empty_permuted": "fill", "new_zeros": "fill", "new_ones": "fill", "new_full": "fill",
    "new_empty": "fill", "scalar_tensor": "fill", "arange": "fill",
    "rand": "rng", "randn": "rng", "rand_like": "rng", "randn_like": "rng", "randint": "rng",
    "bernoulli": "rng", "normal": "rng", "uniform": "rng",
    "rsub": "sub", "reciprocal": "div", "true_divide": "div", "exp2": "exp", "log2": "log",
    "log10": "log", "expm1": "exponential-minus-one", "log1p": "log-plus-one",
    "eq": "compare", "ne": "compare", "lt": "compare", "le": "compare", "gt": "compare",
    "ge": "compare", "isnan": "compare", "isinf": "compare",
    "logical_not": "not", "bitwise_not": "not", "logical_and": "and", "bitwise_and": "and",
    "logical_or": "or", "bitwise_or": "or", "logical_xor": "xor", "bitwise_xor": "xor",
    "clamp_min": "clamp", "clamp_max": "clamp", "hardtanh": "clamp", "fmod": "remainder",
    "round": "round-nearest-even", "max.other": "maximum", "min.other": "minimum",
    "max": "amax", "min": "amin", "linalg_vector_norm": "norm_reduce",
    "nll_loss_forward": "nll_loss", "nll_loss2d_forward": "nll_loss",
    "nll_loss2d_backward": "nll_loss_backward",
    "_softmax": "softmax", "_log_softmax": "log_softmax",
    "_softmax_backward_data": "softmax_backward",
    "_log_softmax_backward_data": "log_softmax_backward",
    "native_layer_norm": "layer_norm", "native_layer_norm_backward": "layer_norm_backward",
    "native_batch_norm": "batch_norm", "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "_native_batch_norm_legit_functional": "batch_norm",
    "native_batch_norm_backward": "batch_norm_backward", "native_group_norm": "group_norm",
    "native_group_norm_backward": "group_norm_backward", "_fused_rms_norm": "rms_norm",
    "embedding_dense_backward": "embedding_backward", "scatter_add": "scatter",
    "scatter_reduce": "scatter", "index_add": "scatter", "_unsafe_index": "index",
    "_unsafe_index_put": "index_put", "topk": "sort",
    "constant_pad_nd": "pad",
    "max_pool2d_with_indices": "max_pool", "max_pool3d_with_indices": "max_pool",
    "max_pool2d_with_indices_backward": "max_pool_backward",
    "max_pool3d_with_indices_backward": "max_pool_backward",
    "avg_pool2d": "avg_pool", "avg_pool3d": "avg_pool", "avg_pool2d_backward": "avg_pool_backward",
    "avg_pool3d_backward": "avg_pool_backward", "_adaptive_avg_pool2d": "adaptive_avg_pool",
    "_adaptive_avg_pool2d_backward": "avg_pool_backward",
    "upsample_nearest2d": "upsample", "upsample_bilinear2d": "upsample",
    "upsample_nearest2d_backward": "upsample_backward",
    "upsample_bilinear2d_backward": "upsample_backward",
}

#: ATen ops left whole although core ATen decomposes them: each is one kernel with a
#: cost formula, where its decomposition would be several elementwise ops.
KEEP_UNDECOMPOSED = frozenset({
    "threshold_backward", "native_layer_norm_backward", "native_batch_norm_backward",
    "native_group_norm_backward", "_fused_rms_norm", "_softmax_backward_data",
    "_log_softmax_backward_data", "embedding_dense_backward", "gelu_backward", "silu",
    "silu_backward", "sigmoid_backward", "tanh_backward", "native_dropout_backward",
    "nll_loss_forward", "nll_loss_backward", "upsample_nearest2d",
})

_VOCAB = frozenset(OP_VOCAB)
_STATE_OPS = frozenset({"parameter", "buffer", "optimizer_state"})
_LR, _BETAS, _EPS = 1e-3, (0.9, 0.999), 1e-8


# -- the optimizer update ops ------------------------------------------------------------
@torch.library.custom_op("graphopt::sgd_update", mutates_args=("param",))
def _sgd_update(param: Tensor, grad: Tensor, lr: float) -> None:
    """``param -= lr * grad`` in place: one op per parameter, like ``ApplyGradientDescent``."""
    param.sub_(grad, alpha=lr)


@_sgd_update.register_fake
def _(param: Tensor, grad: Tensor, lr: float) -> None:
    return None


@torch.library.custom_op("graphopt::adam_update",
                         mutates_args=("param", "exp_avg", "exp_avg_sq"))
def _adam_update(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, lr: float,
                 beta1: float, beta2: float, eps: float, step: int) -> None:
    """One Adam step in place (Kingma & Ba 2015), like TensorFlow's ``ApplyAdam``."""
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt_().add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))


@_adam_update.register_fake
def _(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, lr: float,
      beta1: float, beta2: float, eps: float, step: int) -> None:
    return None


_UPDATES = {torch.ops.graphopt.sgd_update.default: "sgd_update",
            torch.ops.graphopt.adam_update.default: "adam_update"}


# -- public entry points -------------------------------------------------------------------
def from_torch(model: torch.nn.Module, example_inputs: tuple | Tensor, training: bool = False,
               optimizer: str = "sgd", loss: Callable[[Any], Tensor] | None = None,
               name: str | None = None) -> Graph:
    """The graph of a PyTorch model: its forward pass, or a whole training step.

    Parameters
    ----------
    model : torch.nn.Module
        The model; it is put in eval mode (forward) or train mode (training) while it
        is traced and given back in the mode it came in.
    example_inputs : tuple
        Positional arguments of ``model.forward`` (a lone tensor is taken as a 1-tuple).
        Their shapes fix every shape in the graph.
    training : bool
        ``False``: the forward graph, from :func:`torch.export.export`. ``True``: forward,
        loss, backward and one optimizer update per parameter that requires a gradient,
        traced with ``make_fx`` on fake tensors.
    optimizer : {"sgd", "adam"}
        The update of a training step. Adam's two moment buffers per parameter are
        ``optimizer_state`` nodes holding persistent bytes; its step counter is a host
        scalar.
    loss : callable, optional
        ``loss(output) -> scalar tensor``. Default: the sum of the means of the model's
        floating-point outputs.
    name : str, optional
        Graph name; default ``"<ModelClass>-forward"`` or ``"<ModelClass>-train-<optimizer>"``.

    Returns
    -------
    Graph
        Validated. ``persistent_bytes`` sums to the parameters and buffers, plus twice
        the trainable parameters with Adam.

    Raises
    ------
    FrontendError
        The model fails to export or trace (data-dependent control flow, an op without
        a meta kernel, ...): the message names the model's class and gives the first
        line of the underlying error. Also for an unknown ``optimizer`` or a loss that
        is not a scalar.

    Warns
    -----
    UnknownOpWarning
        Once per ATen op type the cost formulas do not know; those ops are costed from
        their tensor sizes (one FLOP per output element, their bytes).

    Notes
    -----
    Scaled dot-product attention is traced with PyTorch's math backend and recurrent
    layers without oneDNN's fused kernels, so attention and LSTM cells appear as matrix
    products and elementwise ops in both directions, whatever machine traces them.
    Dynamic shapes are not supported: every dimension takes its value from
    ``example_inputs``.

    Examples
    --------
    >>> import torch
    >>> g = from_torch(torch.nn.Linear(8, 16), (torch.randn(4, 8),))
    >>> [(str(o), float(f)) for o, f in zip(g.op, g.flops) if f]
    [('addmm', 1088.0)]
    >>> t = from_torch(torch.nn.Linear(8, 16), (torch.randn(4, 8),), training=True,
    ...                optimizer="adam")
    >>> int(t.persistent_bytes.sum()) == 3 * (8 * 16 + 16) * 4
    True
    """
    return trace_program(model, example_inputs, training, optimizer, loss, name).graph


@dataclass(frozen=True, eq=False)
class TracedProgram:
    """A traced PyTorch program and the IR graph built from the same trace.

    :mod:`graphopt.exec` runs ``module`` op by op where a plan of ``graph`` puts each
    op; both come from one trace, so every IR node is one FX node of ``module``.

    Attributes
    ----------
    graph : Graph
        The IR, as :func:`from_torch` returns it.
    module : torch.fx.GraphModule
        The ATen program. A training step returns ``(loss,)`` and updates its state
        placeholders in place; a forward program returns the model's outputs.
    ir_names : dict
        FX node name -> IR node name, for every FX node that is an IR node.
    feeds : tuple
        The value of every placeholder of ``module``, in order: the model's state
        (parameters, buffers, Adam's moments as zeros), then the example inputs.
    state : tuple
        Per placeholder, the qualified name of the state tensor it holds, or None for
        an input.
    training : bool
    """

    graph: Graph
    module: fx.GraphModule
    ir_names: dict[str, str]
    feeds: tuple[Any, ...]
    state: tuple[str | None, ...]
    training: bool


def trace_program(model: torch.nn.Module, example_inputs: tuple | Tensor, training: bool = False,
                  optimizer: str = "sgd", loss: Callable[[Any], Tensor] | None = None,
                  name: str | None = None) -> TracedProgram:
    """:func:`from_torch`, keeping the traced program and its inputs beside the graph.

    Examples
    --------
    >>> import torch
    >>> t = trace_program(torch.nn.Linear(8, 16), (torch.randn(4, 8),), training=True)
    >>> t.state, t.graph.num_nodes
    (('weight', 'bias', None), 17)
    """
    if optimizer not in ("sgd", "adam"):
        raise FrontendError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    inputs = (example_inputs,) if isinstance(example_inputs, Tensor) else example_inputs
    if not isinstance(inputs, (tuple, list)):
        raise FrontendError(f"example_inputs must be a tuple of {type(model).__name__}'s "
                            f"positional arguments, got {type(example_inputs).__name__}")
    inputs = tuple(inputs)
    cls = type(model).__name__
    meta = {"frontend": "torch", "model": cls, "torch": torch.__version__,
            "training": bool(training),
            "input_shapes": [list(x.shape) for x in inputs if isinstance(x, Tensor)]}
    was_training = model.training
    try:
        model.train(training)
        with _portable_kernels():
            if not training:
                ep = _traced(cls, "export", lambda: torch.export.export(model, inputs))
                return trace_exported(ep, inputs, name=name or f"{cls}-forward", meta=meta)
            gm, roles, updates = _trace_step(model, inputs, optimizer, loss or _mean_loss)
    finally:
        model.train(was_training)
    meta["optimizer"] = optimizer
    ir_names: dict[fx.Node, str] = {}
    graph = _convert(gm.graph, roles, name or f"{cls}-train-{optimizer}", meta,
                     _step_modules(gm.graph, roles), _colocation(updates, roles), ir_names)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    feeds, state, args = [], [], iter(inputs)
    for node in gm.graph.find_nodes(op="placeholder"):
        role = roles.get(node)
        if role is not None and role.op == "optimizer_state":
            owner = role.name.rpartition(".")[0]
            feeds.append(torch.zeros_like(tensors[owner].detach()))
        elif role is not None and role.op != "input":
            feeds.append(tensors[role.name].detach().clone())
        else:
            feeds.append(next(args))
        state.append(role.name if role is not None and role.op != "input" else None)
    return TracedProgram(graph, gm, {n.name: v for n, v in ir_names.items()}, tuple(feeds),
                         tuple(state), True)


def from_exported(program: torch.export.ExportedProgram, name: str = "exported",
                  meta: dict | None = None) -> Graph:
    """The graph of a :class:`torch.export.ExportedProgram`'s ATen graph.

    The program is decomposed to core ATen first (but for :data:`KEEP_UNDECOMPOSED`).
    Parameters and buffers become state nodes named by their qualified names, lifted
    constants and user inputs plain sources.

    Examples
    --------
    >>> import torch
    >>> ep = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
    ...                          (torch.randn(2, 4),))
    >>> from_exported(ep, name="seq").op.tolist()
    ['parameter', 'permute_view', 'parameter', 'input', 'addmm', 'relu']
    """
    return trace_exported(program, None, name, meta).graph


def trace_exported(program: torch.export.ExportedProgram, example_inputs: tuple | None = None,
                   name: str = "exported", meta: dict | None = None) -> TracedProgram:
    """:func:`from_exported`, keeping the decomposed program and its inputs beside the graph.

    ``example_inputs`` feed the user inputs; by default each is drawn from its traced
    shape and dtype (standard normal floats, zeros otherwise), seeded.
    """
    cls = (meta or {}).get("model", "ExportedProgram")
    with _portable_kernels():
        ep = _traced(cls, "decompose", lambda: program.run_decompositions(_decompositions()))
    roles: dict[fx.Node, _Role] = {}
    kinds = {"PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant",
             "USER_INPUT": "input"}
    values = {**ep.state_dict, **ep.constants}
    by_name = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    first: dict[tuple, fx.Node] = {}
    tied: dict[fx.Node, str] = {}  # placeholder -> the state it duplicates
    for spec in ep.graph_signature.input_specs:
        node = by_name.get(getattr(spec.arg, "name", ""))
        kind = kinds.get(spec.kind.name)
        if node is None or kind is None:
            continue
        fqn = spec.target if kind != "input" else node.name
        if kind in ("parameter", "buffer") and values[fqn].numel():  # empty ones share address 0
            # torch.export lifts a tied tensor once per name; one tensor is one node,
            # or its bytes count twice
            key = _tensor_identity(values[fqn])
            if key in first:
                node.replace_all_uses_with(first[key])
                tied[node] = roles[first[key]].name
                continue
            first[key] = node
        roles[node] = _Role(kind, fqn, _parent(fqn) if kind != "input" else "")
    if tied:
        ep.graph_module.recompile()
    meta = {"frontend": "torch", "torch": torch.__version__, **(meta or {})}
    ir_names: dict[fx.Node, str] = {}
    graph = _convert(ep.graph, roles, name, meta, _export_modules(ep.graph, roles), {}, ir_names)
    gen = torch.Generator().manual_seed(0)
    user = iter(example_inputs) if example_inputs is not None else None
    feeds, state = [], []
    for node in ep.graph.find_nodes(op="placeholder"):
        role = roles.get(node)
        if role is not None and role.op != "input":
            feeds.append(values[role.name].detach().clone())
            state.append(role.name)
            continue
        if node in tied:  # read by no op: fed for the program's signature
            feeds.append(values[tied[node]].detach().clone())
            state.append(None)
            continue
        val = node.meta.get("val")
        if user is not None:
            feeds.append(next(user))
        elif isinstance(val, Tensor) and val.is_floating_point():
            feeds.append(torch.randn(val.shape, dtype=val.dtype, generator=gen))
        elif isinstance(val, Tensor):
            feeds.append(torch.zeros(val.shape, dtype=val.dtype))
        else:
            feeds.append(val)
        state.append(None)
    return TracedProgram(graph, ep.graph_module, {n.name: v for n, v in ir_names.items()},
                         tuple(feeds), tuple(state), False)


def load_exported(path: str | os.PathLike) -> Graph:
    """The forward graph of a ``.pt2`` file: :func:`load_program`'s graph."""
    return load_program(path).graph


def load_program(path: str | os.PathLike) -> TracedProgram:
    """The forward program of a program saved with :func:`torch.export.save` (``.pt2``),
    read by :func:`load_archive`.

    Raises
    ------
    GraphFormatError
        The file is missing, not a ``torch.export`` archive, or holds pickled or
        compiled content.
    FrontendError
        Its inputs are too large to draw, or its program cannot be decomposed.

    Examples
    --------
    >>> import os, tempfile, torch
    >>> p = os.path.join(tempfile.mkdtemp(), "lin.pt2")
    >>> torch.export.save(torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), p)
    >>> load_program(p).graph.name
    'lin'
    """
    path = Path(path)
    program = load_archive(path)
    try:
        return trace_exported(program, None, name=path.stem, meta={"source": str(path)})
    except FrontendError as err:  # it names the program's class; name the file too
        raise FrontendError(f"{path}: {err}") from err


#: Libraries whose output classes a program's outputs may be, registered with torch's
#: pytree when the library defines them: a program exported in another process names
#: them, and they must be imported before it loads (a Hugging Face model's ModelOutput).
OUTPUT_TYPE_LIBRARIES = ("transformers.",)


def _register_output_types(err: BaseException) -> bool:
    """Import the module of an output type that ``err`` says pytree does not know, when it
    belongs to one of :data:`OUTPUT_TYPE_LIBRARIES` and is installed (importing it
    registers its classes); True when it did. Nothing else a file names is imported."""
    import importlib
    import re

    found = re.search(r"Deserializing ([\w.]+) in pytree is not registered", str(err))
    if not found or not found.group(1).startswith(OUTPUT_TYPE_LIBRARIES):
        return False
    module = found.group(1).rsplit(".", 1)[0]
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def load_archive(path: str | os.PathLike) -> torch.export.ExportedProgram:
    """The program in a ``.pt2`` file (:func:`torch.export.save`), checked before it is read
    and read without unpickling.

    An archive holding pickled tensors or objects, compiled AOTInductor code or sample
    inputs that ``torch.load(weights_only=True)`` refuses is rejected; so is one whose
    user inputs declare shapes of more than :data:`MAX_INPUT_BYTES` in all (seeded random
    example inputs of those shapes are drawn to run or trace it).

    Raises
    ------
    GraphFormatError
        The file is missing, not a ``torch.export`` archive, or holds pickled or
        compiled content.
    FrontendError
        Its inputs are too large to draw.
    """
    from torch.export.pt2_archive._package import load_pt2

    path = Path(path)
    _check_archive(path)
    # load_pt2 is what torch.export.load runs first; when it fails, torch.export.load logs
    # a traceback, hides the cause and retries the archive as torch < 2.8's format, whose
    # loader unpickles with weights_only=False
    for attempt in range(2):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's own deprecation notices, not the user's
                programs = load_pt2(path).exported_programs
            break
        except Exception as err:  # torch raises many types for a malformed archive
            if attempt or not _register_output_types(err):
                raise GraphFormatError(f"{path}: torch.export.load failed: "
                                       f"{first_line(err)}") from err
    if "model" not in programs:
        raise GraphFormatError(f"{path}: holds no program named 'model' (it has "
                               f"{sorted(programs) or 'none'}); save it with torch.export.save")
    ep = programs["model"]
    user = set(ep.graph_signature.user_inputs)
    total = 0
    for node in ep.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if node.name in user and isinstance(val, Tensor):
            total += val.numel() * val.element_size()
            if total > MAX_INPUT_BYTES:
                raise FrontendError(f"{path}: input {node.name!r} has shape {list(val.shape)}; "
                                    f"the inputs would take {total:,} bytes, more than the "
                                    f"{MAX_INPUT_BYTES:,} graphopt draws "
                                    "(graphopt.frontends.torch.MAX_INPUT_BYTES)")
    return ep


# -- tracing --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Role:
    """What a source node of the traced graph holds."""

    op: str  # parameter, buffer, optimizer_state, constant or input
    name: str  # qualified name (state) or argument name (inputs)
    module: str


def _decompositions() -> dict:
    table = torch.export.default_decompositions()
    for op in [op for op in table if op._opname in KEEP_UNDECOMPOSED]:
        del table[op]
    return table


@contextlib.contextmanager
def _portable_kernels() -> Iterator[None]:
    """Math attention and no oneDNN recurrent kernels, so a model traces to the same
    decomposed graph on every machine."""
    was = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False  # type: ignore[assignment]  # a ContextProp
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.mkldnn.enabled = was


def first_line(err: BaseException) -> str:
    """``"Type: the message's first line"``: an error a model raised, as one line."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _traced(cls: str, what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, with any failure turned into a FrontendError naming the model."""
    try:
        return fn()
    except GraphoptError:
        raise
    except Exception as err:  # export and tracing raise anything a model can raise
        raise FrontendError(f"cannot {what} {cls}: {first_line(err)}") from err


def _mean_loss(output: Any) -> Tensor:
    return summed_outputs(output, Tensor.mean)


def _trace_step(model: torch.nn.Module, inputs: tuple, optimizer: str,
                loss: Callable[[Any], Tensor]) -> tuple[fx.GraphModule, dict, list]:
    """make_fx of one training step; also the roles of its placeholders and, per update
    op, ``(update node, parameter node, state nodes)``."""
    cls = type(model).__name__
    trainable = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    frozen = [(k, p) for k, p in model.named_parameters() if not p.requires_grad]
    buffers = list(model.named_buffers())
    names = [k for k, _ in trainable + frozen + buffers]
    adam = optimizer == "adam"

    def step(params, others, state, args):
        with fx_traceback.annotate({"phase": "forward"}):
            out = torch.func.functional_call(model, dict(zip(names, params + others)), tuple(args))
            value = loss(out)
        if not isinstance(value, Tensor) or value.numel() != 1:
            shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise FrontendError(f"{cls}: the loss must be a scalar tensor, got {shape}")
        with _grad_fn_annotations(value), fx_traceback.annotate({"phase": "backward"}):
            grads = torch.autograd.grad(value, params, allow_unused=True)
        with torch.no_grad(), fx_traceback.annotate({"phase": "update"}):
            for i, (p, g) in enumerate(zip(params, grads)):
                if g is None:
                    continue
                if adam:
                    torch.ops.graphopt.adam_update(p, g, state[2 * i], state[2 * i + 1], _LR,
                                                   *_BETAS, _EPS, 1)
                else:
                    torch.ops.graphopt.sgd_update(p, g, _LR)
        return (value,)  # the output node is not an IR node; graphopt.exec reads the loss

    params = [p.detach().requires_grad_() for _, p in trainable]
    others = [t.detach() for _, t in frozen + buffers]
    state = [torch.zeros_like(p) for p in params for _ in range(2)] if adam else []
    with fx_traceback.preserve_node_meta(), _module_annotations(model):
        gm = _traced(cls, "trace a training step of",
                     lambda: make_fx(step, _decompositions(), tracing_mode="fake",
                                     _allow_non_fake_inputs=True)(params, others, state,
                                                                   list(inputs)))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    roles: dict[fx.Node, _Role] = {}
    kinds = (["parameter"] * len(trainable + frozen) + ["buffer"] * len(buffers)
             + ["optimizer_state"] * len(state))
    fqns = names + [f"{k}.{s}" for k, _ in trainable if adam for s in ("exp_avg", "exp_avg_sq")]
    for node, kind, fqn in zip(placeholders, kinds, fqns):
        roles[node] = _Role(kind, fqn, _parent(fqn.removesuffix(".exp_avg_sq")
                                              .removesuffix(".exp_avg")))
    arg_names = _argument_names(model, len(inputs))
    for node, arg in zip(placeholders[len(fqns):], arg_names):
        if isinstance(node.meta.get("val"), Tensor):
            roles[node] = _Role("input", arg, "")
    updates = [(n, _param_of(n), [a for a in n.args[2:4] if isinstance(a, fx.Node)])
               for n in gm.graph.nodes if n.op == "call_function" and n.target in _UPDATES]
    return gm, roles, updates


def _argument_names(model: torch.nn.Module, count: int) -> list[str]:
    """Names of the first ``count`` positional parameters of ``model.forward``, as
    torch.export names its inputs (``input<i>`` for those a ``*args`` takes)."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:count]
    return names + [f"input{i}" for i in range(len(names), count)]


@contextlib.contextmanager
def _module_annotations(model: torch.nn.Module) -> Iterator[None]:
    """Tag every node traced inside a submodule's forward with ``custom["module"]``, its
    path in ``model`` (the innermost module wins)."""
    stack: list = []

    def enter(path: str) -> Callable:
        def hook(mod, args) -> None:
            cm = fx_traceback.annotate({"module": path})
            cm.__enter__()
            stack.append(cm)
        return hook

    def leave(mod, args, out) -> None:
        if stack:
            stack.pop().__exit__(None, None, None)

    handles = []
    for path, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(enter(path)))
        handles.append(mod.register_forward_hook(leave, always_call=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def _grad_fn_annotations(root: Tensor) -> Iterator[None]:
    """Tag every node a backward function traces with ``custom["grad_fn"]``: the sequence
    number of its autograd node, which the forward op that created that node carries as
    ``meta["seq_nr"]``. Gradient accumulations run outside any backward function and
    stay untagged."""
    stack: list = []

    def enter(seq: int) -> Callable:
        def hook(grad_outputs) -> None:
            cm = fx_traceback.annotate({"grad_fn": seq})
            cm.__enter__()
            stack.append(cm)
        return hook

    def leave(grad_inputs, grad_outputs) -> None:
        stack.pop().__exit__(None, None, None)

    handles, seen, todo = [], set(), [root.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        handles.append(fn.register_prehook(enter(fn._sequence_nr())))
        handles.append(fn.register_hook(leave))
        todo.extend(f for f, _ in fn.next_functions)
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# -- module paths and colocation -------------------------------------------------------------
def _tensor_identity(t: Tensor) -> tuple:
    """What makes two tensors one: the same memory seen the same way."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def _parent(fqn: str) -> str:
    """``encoder.layers.3.attn.q_proj.weight`` → ``encoder.layers.3.attn.q_proj``."""
    return fqn.rpartition(".")[0]


def _common_prefix(paths: Iterable[str]) -> str:
    parts = [p.split(".") for p in paths if p]
    if not parts:
        return ""
    out = parts[0]
    for p in parts[1:]:
        k = 0
        while k < min(len(out), len(p)) and out[k] == p[k]:
            k += 1
        out = out[:k]
    return ".".join(out)


def _export_modules(graph: fx.Graph, roles: dict) -> dict[fx.Node, str]:
    """Innermost ``nn_module_stack`` entry of each op; a source's module from its name."""
    out = {}
    for n in graph.nodes:
        stack = n.meta.get("nn_module_stack")
        out[n] = roles[n].module if n in roles else (list(stack.values())[-1][0] if stack else "")
    return out


def _step_modules(graph: fx.Graph, roles: dict) -> dict[fx.Node, str]:
    """Module of every node of a training step.

    Forward ops: the module whose forward traced them. Backward ops: the module of the
    forward op whose autograd node ran them. Gradient accumulations: the common prefix
    of their inputs' modules. Update ops: their parameter's module.
    """
    out: dict[fx.Node, str] = {}
    by_seq: dict[int, str] = {}
    for n in graph.nodes:
        custom = n.meta.get("custom") or {}
        if n in roles:
            out[n] = roles[n].module
        elif n.op == "call_function" and n.target in _UPDATES:
            out[n] = roles[_param_of(n)].module
        elif custom.get("phase") == "forward":
            out[n] = custom.get("module", "")
            by_seq.setdefault(n.meta.get("seq_nr", -1), out[n])
        elif "grad_fn" in custom and custom["grad_fn"] in by_seq:
            out[n] = by_seq[custom["grad_fn"]]
        else:
            out[n] = _common_prefix(out.get(a, "") for a in n.all_input_nodes)
    return out


def _colocation(updates: list, roles: dict) -> dict[fx.Node, str]:
    """Colocation group of each parameter with its state, its update op and the ops
    that write its gradient: the gradient's producer and the views between them.
    Groups that share an op merge (a convolution's weight and bias share their
    backward op)."""
    parent: dict[str, str] = {}

    def find(g: str) -> str:
        while parent.setdefault(g, g) != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    group: dict[fx.Node, str] = {}
    for upd, param, state in updates:
        gid = find(roles[param].name)
        members = [param, upd, *state]
        grad = upd.args[1]
        while isinstance(grad, fx.Node) and grad.op == "call_function":
            members.append(grad)
            ins = grad.all_input_nodes
            if op_class(_ir_op(grad)) != "view" or len(ins) != 1:
                break
            grad = ins[0]
        for m in members:
            if m in group:
                parent[find(group[m])] = gid
            group[m] = gid
    return {n: find(g) for n, g in group.items()}


# -- conversion -------------------------------------------------------------------------------
def _param_of(update: fx.Node) -> fx.Node:
    """The parameter an update op writes (its first argument)."""
    return cast(fx.Node, update.args[0])


def _ir_op(node: fx.Node) -> str:
    """IR op type of a call node."""
    t = node.target
    if t in _UPDATES:
        return _UPDATES[t]
    if isinstance(t, torch._ops.OpOverload):
        base = t._opname
        if base.endswith("_") and not base.endswith("__"):  # in place: add_ is add
            base = base[:-1]
        op = ATEN_TO_IR.get(f"{base}.{t._overloadname}") or ATEN_TO_IR.get(base)
        if op is not None or base in _VOCAB or t.namespace == "aten":
            return op or base
        return f"{t.namespace}.{base}"
    return "getitem" if t is operator.getitem else getattr(t, "__name__", str(t))


def _outputs(node: fx.Node) -> list[Tensor]:
    """Non-empty tensors a node writes (for an update op, the tensors it updates in
    place). Empty tensors (ATen's placeholders for unused outputs) carry nothing."""
    if node.op == "call_function" and node.target in _UPDATES:
        vals = [a.meta["val"] for a in (node.args[0], *node.args[2:4]) if isinstance(a, fx.Node)]
    else:
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (tuple, list)) else [val]
    return [v for v in vals if isinstance(v, Tensor) and _maybe_nonempty(v)]


def _maybe_nonempty(t: Tensor) -> bool:
    """False for a tensor of no elements; True where its size is symbolic (data-dependent,
    as after ``nonzero``), so that :func:`_info` refuses it by name."""
    n = t.numel()
    return not isinstance(n, int) or n > 0


@dataclass
class _Info:
    """What the conversion needs of one kept node, computed once."""

    op: str
    shapes: list[tuple[int, ...]]
    dtype: str
    nbytes: float  # all outputs
    edge_bytes: float  # what an edge out of it carries: a view's no more than its storage
    single: bool  # its value is one tensor (not a tuple), so consumers read it whole


def _info(n: fx.Node, role: _Role | None, module: str = "") -> _Info:
    outs = _outputs(n)
    try:
        shapes = [tuple(int(d) for d in t.shape) for t in outs]
    except (TypeError, RuntimeError) as err:
        where = f" in module {module!r}" if module else ""
        raise FrontendError(
            f"node {n.name!r} ({n.target}{where}) has a shape known only at run time, "
            f"{tuple(outs[0].shape)}: its size depends on its inputs' values (boolean-mask "
            "indexing, nonzero, unique) or on a dimension exported as dynamic; graphopt "
            "needs static shapes") from err
    op = role.op if role is not None else "constant" if n.op == "get_attr" else _ir_op(n)
    nbytes = float(sum(t.numel() * t.element_size() for t in outs))
    edge = nbytes
    if op_class(op) == "view" and role is None:
        edge = float(sum(min(t.numel() * t.element_size(), t.untyped_storage().nbytes())
                         for t in outs))
    return _Info(op, shapes, str(outs[0].dtype).removeprefix("torch."), nbytes, edge,
                 isinstance(n.meta.get("val"), Tensor))


def _tensor_args(node: fx.Node, info: dict[fx.Node, _Info]) -> list[_Info]:
    """Tensor arguments in argument order (one level into lists, as in ``cat``)."""
    out = []
    for a in (*node.args, *node.kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(x, fx.Node) and x in info and info[x].single:
                out.append(info[x])
    return out


def _convert(graph: fx.Graph, roles: dict[fx.Node, _Role], name: str, meta: dict,
             modules: dict[fx.Node, str], coloc: dict[fx.Node, str],
             names_out: dict[fx.Node, str] | None = None) -> Graph:
    """Build the IR from a traced ATen graph in one pass.

    Sources are emitted just before their first consumer and sinks (update ops) just
    after their last producer, so the topological order keeps a layer's parameters,
    gradients and updates near the layer's other ops. ``names_out``, when given,
    receives the IR name of every FX node that became an IR node.
    """
    try:
        info = {n: _info(n, roles.get(n), modules.get(n, "")) for n in graph.nodes
                if (n in roles or n.op in ("call_function", "get_attr")) and _outputs(n)}
    except FrontendError as err:  # name the model (a file's loader names the file)
        if "model" not in meta:
            raise
        raise FrontendError(f"{meta['model']}: {err}") from err
    preds = {n: [p for p in n.all_input_nodes if p in info] for n in info}
    has_users = {p for ps in preds.values() for p in ps}
    position = {n: i for i, n in enumerate(info)}
    late_sinks: dict[fx.Node, list[fx.Node]] = {}
    for n in info:
        if n.op == "call_function" and n not in has_users:
            ops = [p for p in preds[n] if p.op == "call_function"]
            if ops:
                late_sinks.setdefault(max(ops, key=position.__getitem__), []).append(n)

    b = GraphBuilder(name, meta=meta)
    index: dict[fx.Node, int] = {}
    names: set[str] = set()
    unknown: Counter[str] = Counter()

    def emit(n: fx.Node) -> None:
        for p in preds[n]:
            if p not in index:
                emit(p)
        node_name = _node_name(n, roles, names)
        if names_out is not None:
            names_out[n] = node_name
        index[n] = _add_node(b, n, node_name, info, n in roles or n.op == "get_attr",
                             [(index[p], info[n].nbytes if n.target is operator.getitem
                               else info[p].edge_bytes) for p in preds[n]],
                             modules.get(n, ""), coloc.get(n))
        if op_class(info[n].op) == "other":
            unknown[info[n].op] += 1
        for s in late_sinks.pop(n, ()):
            emit(s)

    deferred = {s for sinks in late_sinks.values() for s in sinks}
    for n in info:
        if n not in index and n not in deferred and n.op == "call_function":
            emit(n)
    for n in info:  # sources nobody reads
        if n not in index:
            emit(n)
    for op, count in sorted(unknown.items()):
        warnings.warn(f"{meta.get('model', name)}: {count} op(s) of type {op!r} have no cost "
                      "formula; costed from their tensor sizes (1 FLOP per output element, "
                      "their bytes)", UnknownOpWarning, stacklevel=3)
    return b.build()


def _node_name(n: fx.Node, roles: dict[fx.Node, _Role], taken: set[str]) -> str:
    """A source's qualified name, ``<parameter>.<update>`` for an update op, else the FX
    name; made unique."""
    if n in roles:
        name = roles[n].name
    elif n.op == "call_function" and n.target in _UPDATES:
        name = f"{roles[_param_of(n)].name}.{_UPDATES[n.target]}"
    else:
        name = n.name
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _add_node(b: GraphBuilder, n: fx.Node, name: str, info: dict[fx.Node, _Info], source: bool,
              inputs: list[tuple[int, float]], module: str, coloc: str | None) -> int:
    me = info[n]
    if source:  # state lives on the device all step: persistent, not an output
        state = me.op in _STATE_OPS
        return b.add_node(name, me.op, shape=me.shapes[0], dtype=me.dtype,
                          out_bytes=0.0 if state else me.nbytes,
                          persistent_bytes=me.nbytes if state else 0.0, module=module,
                          coloc=coloc, inputs=inputs)
    args = _tensor_args(n, info)
    mask = (cast(Sequence[bool], n.kwargs.get("output_mask", n.args[-1]))
            if me.op == "convolution_backward" else None)
    flops, read, written = op_cost(me.op, [a.shapes[0] for a in args], me.shapes, me.dtype,
                                   [a.dtype for a in args], warn=False, output_mask=mask)
    in_place = op_class(me.op) == "view" or n.target in _UPDATES
    return b.add_node(name, me.op, shape=me.shapes[0], dtype=me.dtype, flops=flops,
                      bytes_read=read, bytes_written=written,
                      out_bytes=0.0 if in_place else me.nbytes, module=module, coloc=coloc,
                      inputs=inputs)


def _member_reads(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> bool:
    """Whether one member of ``z`` decompresses and matches its CRC."""
    try:
        with z.open(info) as f:
            while f.read(2**20):
                pass
    except (zipfile.BadZipFile, zlib.error):
        return False
    return True


def _check_archive(path: Path) -> None:
    """Reject a ``.pt2`` archive that torch.export.load would unpickle or run code from:
    pickled weights or constants, custom objects, legacy ``.pt`` payloads (whose loader
    falls back to full unpickling), AOTInductor libraries, or sample inputs that
    ``torch.load(weights_only=True)`` refuses."""
    from torch.export.pt2_archive import constants as c

    regular_file(path)
    raw_prefixes = (c.WEIGHT_FILENAME_PREFIX, c.TENSOR_CONSTANT_FILENAME_PREFIX)
    try:
        with zipfile.ZipFile(path) as z:
            files = z.namelist()
            packed = sum(i.compress_size for i in z.infolist())
            unpacked = sum(i.file_size for i in z.infolist())
            if unpacked > MAX_EXPANSION * packed + 2**20:
                raise GraphFormatError(f"{path}: its members expand from {packed:,} to {unpacked:,} "
                                       f"bytes, more than {MAX_EXPANSION}x (a zip bomb; "
                                       "graphopt.frontends.torch.MAX_EXPANSION)")
            try:  # a flipped bit must not be read as another graph: check every member's CRC
                bad = z.testzip()
            except zlib.error:
                bad = next((i.filename for i in z.infolist()
                            if not _member_reads(z, i)), "a member")
            if bad is not None:
                raise GraphFormatError(f"{path}: member {bad} is corrupt (its CRC-32 does not "
                                       "match the archive's); the file was damaged")
            if not any(f"/{c.MODELS_DIR}" in f and f.endswith(".json") for f in files):
                raise GraphFormatError(f"{path}: not a torch.export archive (no {c.MODELS_DIR}"
                                       "*.json; save it with torch.export.save from torch >= 2.8)")
            for f in files:
                if f"/{c.AOTINDUCTOR_DIR}" in f:
                    raise GraphFormatError(f"{path}: holds compiled AOTInductor code ({f}), which "
                                           "graphopt never loads")
                if f"/{c.SAMPLE_INPUTS_DIR}" in f:
                    torch.load(io.BytesIO(z.read(f)), weights_only=True)
                elif f.endswith(".pt"):
                    raise GraphFormatError(f"{path}: {f} is a pickled legacy payload; re-save the "
                                           "program with torch.export.save")
                elif f.endswith("_config.json") and any(f"/{d}" in f for d in (c.WEIGHTS_DIR,
                                                                               c.CONSTANTS_DIR)):
                    config = json.loads(z.read(f)).get("config", {})
                    bad = [k for k, v in config.items() if v.get("use_pickle")
                           or not str(v.get("path_name", "")).startswith(raw_prefixes)]
                    if bad:
                        raise GraphFormatError(f"{path}: {f} stores {bad[0]!r} pickled; graphopt "
                                               "never unpickles")
    except GraphFormatError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, AttributeError, RuntimeError,
            EOFError, pickle.UnpicklingError) as err:
        raise GraphFormatError(f"{path}: unreadable or unsafe torch.export archive "
                               f"({first_line(err)})") from err
