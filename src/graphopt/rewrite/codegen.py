"""What each term means in PyTorch: one function that turns an e-node into an ATen call,
used both to infer shapes (on meta tensors) and to build the rewritten program.

``W`` nodes are evaluated to tensors when the program is built (constant folding, as
TASO and Tensat do for weight ops); ``T`` nodes become ``call_function`` nodes of ATen
ops, so the result is a plain :class:`torch.fx.GraphModule` that ``torch.export`` and
``torch.compile`` accept.

A linear or convolution with a fused activation (``T.linear_act``, ``T.conv_act``)
becomes PyTorch's fused CPU kernel (``mkldnn._linear_pointwise``,
``mkldnn._convolution_pointwise``: oneDNN applies the activation as it writes the
output, as inductor's CPU backend does) where PyTorch has oneDNN, else the op and its
activation as two ATen calls, so the program runs everywhere.
"""

from __future__ import annotations

import copy
import functools
import heapq
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

from graphopt.rewrite.terms import FUSED, UNARY, RewriteError, Slot, Translation

__all__ = ["ARGS", "ENode", "Unfused", "build_module", "call_of", "fused_dtypes", "fused_kernels",
           "post_order", "unfuse", "weight_value"]

_aten = torch.ops.aten

#: Constructor → kinds of its arguments: T, W, L (e-classes) or i, f, s (int, float and
#: string literals).
ARGS: dict[str, str] = {
    "T": "s", "T.const": "W", "T.linear": "TWWi", "T.conv": "TWWiiiisii",
    "T.linear_act": "sTWWi", "T.conv_act": "sTWWiiiisii", "T.bn": "TWWWWf",
    "T.matmul": "TT", "T.add": "TT", "T.mul": "TT", "T.muls": "Tf", "T.un": "sT",
    "T.permute": "Ts", "T.reshape": "Ts", "T.slice": "Tiii", "T.cat": "TTiii", "T.op": "sL",
    "T.item": "Ti", "T.output": "L",
    "W": "s", "W.zeros": "i", "W.cat": "WW", "W.scale": "Wf", "W.bn_weight": "WWWf",
    "W.bn_bias": "WWWWWf", "W.pad": "Wii",
    "L.nil": "", "L.cons": "TL",
}


@dataclass(frozen=True)
class ENode:
    """One e-node: its constructor and arguments (class ids for terms, values for
    literals), and its e-class."""

    op: str
    args: tuple
    eclass: str

    @property
    def children(self) -> list[str]:
        """The e-classes it takes as operands."""
        return [a for a, k in zip(self.args, ARGS[self.op]) if k in "TWL"]


@dataclass(frozen=True)
class Unfused:
    """The target of a fused op where PyTorch has no fused kernel: ``act(op(*args))``,
    built as two calls."""

    op: Any
    act: Any


@functools.cache
def fused_kernels() -> bool:
    """Whether this PyTorch has oneDNN's fused convolution and linear kernels."""
    return torch.backends.mkldnn.is_available() and all(
        hasattr(torch.ops.mkldnn, k) for k in ("_convolution_pointwise", "_linear_pointwise"))


@functools.cache
def fused_dtypes() -> tuple[torch.dtype, ...]:
    """Element types oneDNN's fused kernels run in on this CPU: float32 always; bfloat16
    and float16 only where oneDNN says the CPU has them (AVX-512 and its BF16 and FP16
    extensions: an AVX2-only CPU refuses a bfloat16 fused linear when it is called, not
    when it is built)."""
    mk = torch.ops.mkldnn
    return (torch.float32,
            *((torch.bfloat16,) if mk._is_mkldnn_bf16_supported() else ()),
            *((torch.float16,) if mk._is_mkldnn_fp16_supported() else ()))


def _ints(s: str) -> list[int]:
    return [int(v) for v in s.split(",")] if s else []


def weight_value(op: str, args: tuple, value: Callable[[str], Any], constants: dict,
                 meta: bool) -> torch.Tensor:
    """The tensor of a ``W`` node whose operand classes have the tensors ``value(cls)``."""
    if op == "W":
        t = constants[args[0]]
        return torch.empty_like(t, device="meta") if meta else t
    if op == "W.zeros":
        return torch.zeros(args[0], device="meta" if meta else "cpu")
    if op == "W.cat":
        return torch.cat([value(args[0]), value(args[1])])
    if op == "W.scale":
        return value(args[0]) * args[1]
    w = value(args[0])
    if op == "W.pad":
        return F.pad(w, (args[2], args[2], args[1], args[1]))
    if op == "W.bn_weight":
        g, var = value(args[1]), value(args[2])
        return w * (g / torch.sqrt(var + args[3])).reshape(-1, *[1] * (w.dim() - 1))
    if op == "W.bn_bias":
        g, beta, mean, var = (value(a) for a in args[1:5])
        return (w - mean) * (g / torch.sqrt(var + args[5])) + beta
    raise RewriteError(f"unknown weight constructor {op!r}")


def call_of(op: str, args: tuple, value: Callable[[str], Any], tr: Translation | None
            ) -> tuple[Any, tuple]:
    """``(target, args)`` of the ATen call of a ``T`` node; ``value(cls)`` gives the
    operand of an e-class (a tensor, a meta tensor or an fx node); ``tr`` is needed for
    ``T.op`` only (its op table)."""
    v = value
    if op == "T.const":
        return None, (v(args[0]),)
    if op == "T.linear":
        return _aten.linear.default, (v(args[0]), v(args[1]), v(args[2]))
    if op == "T.conv":
        kh, kw, ph, pw, sd, groups = args[3:9]
        sh, sw, dh, dw = _ints(sd)
        return _aten.conv2d.default, (v(args[0]), v(args[1]), v(args[2]), [sh, sw], [ph, pw],
                                      [dh, dw], groups)
    if op in ("T.linear_act", "T.conv_act"):
        fn = args[0]
        target, call = call_of(op.removesuffix("_act"), args[1:], v, tr)
        if not fused_kernels():
            return Unfused(target, UNARY[fn]), call
        x = call[0]
        if isinstance(x, torch.Tensor) and x.dtype not in fused_dtypes():
            # raised while shapes are inferred: the e-node is dropped, never extracted
            raise TypeError(f"oneDNN's fused kernels take {', '.join(map(str, fused_dtypes()))} "
                            f"on this CPU, not {x.dtype}")
        attr, algorithm = FUSED[fn]
        # [None]: no scalar arguments (an empty list of scalars cannot be serialized by
        # torch.export.save)
        if op == "T.linear_act":
            return torch.ops.mkldnn._linear_pointwise.default, (*call, attr, [None], algorithm)
        x, w, b, stride, padding, dilation, groups = call
        return torch.ops.mkldnn._convolution_pointwise.default, (
            x, w, b, padding, stride, dilation, groups, attr, [None], algorithm)
    if op == "T.bn":
        return _aten.batch_norm.default, (v(args[0]), *(v(a) for a in args[1:5]), False, 0.0,
                                          args[5], True)
    if op in ("T.matmul", "T.add", "T.mul"):
        target = {"T.matmul": _aten.matmul.default, "T.add": _aten.add.Tensor,
                  "T.mul": _aten.mul.Tensor}[op]
        return target, (v(args[0]), v(args[1]))
    if op == "T.muls":
        return _aten.mul.Tensor, (v(args[0]), args[1])
    if op == "T.un":
        return UNARY[args[0]], (v(args[1]),)
    if op == "T.permute":
        return _aten.permute.default, (v(args[0]), _ints(args[1]))
    if op == "T.reshape":
        return _aten.reshape.default, (v(args[0]), _ints(args[1]))
    if op == "T.slice":
        dim, start, n = args[1:4]
        return _aten.slice.Tensor, (v(args[0]), -dim, start, start + n)
    if op == "T.cat":
        return _aten.cat.default, ([v(args[0]), v(args[1])], -args[2])
    if op == "T.item":
        return operator.getitem, (v(args[0]), args[1])
    if op == "T.op":
        target, template, kwargs = tr.table[args[0]]
        operands = v(args[1])
        fill = lambda a: operands[a.index] if isinstance(a, Slot) else a  # noqa: E731
        return target, (_map(template, fill), _map(kwargs, fill))
    raise RewriteError(f"unknown tensor constructor {op!r}")


def _map(a: Any, fn: Callable) -> Any:
    if isinstance(a, (list, tuple)):
        return type(a)(_map(x, fn) for x in a) if not isinstance(a, fx.immutable_collections
                                                                   .immutable_list) \
            else [_map(x, fn) for x in a]
    if isinstance(a, dict):
        return {k: _map(x, fn) for k, x in a.items()}
    return fn(a)


def run_call(target: Any, args: tuple, op: str) -> Any:
    """Execute the call :func:`call_of` made (on tensors or meta tensors)."""
    if op == "T.const":
        return args[0]
    if op == "T.op":
        return target(*args[0], **args[1])
    if isinstance(target, Unfused):
        return target.act(target.op(*args))
    return target(*args)


def post_order(choice: dict[str, ENode], root: str,
               follow: Callable[[str], bool] = lambda c: True) -> Iterator[str]:
    """The e-classes the program ``choice`` names, operands before users, each once,
    descending only into the classes ``follow`` accepts. Iterative: programs are deep."""
    seen: set[str] = set()
    stack = [(root, False)]
    while stack:
        c, ready = stack.pop()
        if c in seen:
            continue
        if ready:
            seen.add(c)
            yield c
            continue
        stack.append((c, True))
        stack.extend((k, False) for k in choice[c].children if k not in seen and follow(k))


def program_order(choice: dict[str, ENode], root: str, position: dict[str, int],
                  follow: Callable[[str], bool] = lambda c: True) -> list[str]:
    """The e-classes :func:`post_order` yields, ordered as the input program ran them:
    a class holding one of its nodes at that node's position, a new one (a merged op)
    just after its last operand. Emitting depth-first from the outputs instead cost
    GNMT-2 9% on this CPU with no rewrite at all (the decoder's ops interleaved with
    the encoder's, the live tensors out of cache)."""
    classes = list(post_order(choice, root, follow))
    key: dict[str, float] = {}
    for c in classes:  # operands first
        kids = [key[k] for k in choice[c].children if k in key]
        key[c] = position.get(c, max(kids, default=-1.0) + 0.5)
    users: dict[str, list[str]] = {c: [] for c in classes}
    waiting = {}
    for c in classes:
        kids = {k for k in choice[c].children if k in key}
        waiting[c] = len(kids)
        for k in kids:
            users[k].append(c)
    index = {c: i for i, c in enumerate(classes)}  # ties: depth-first order
    ready = [(key[c], index[c], c) for c in classes if not waiting[c]]
    heapq.heapify(ready)
    out = []
    while ready:
        c = heapq.heappop(ready)[2]
        out.append(c)
        for u in users[c]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (key[u], index[u], u))
    return out


def _set_nested(root: nn.Module, name: str, value: nn.Parameter | torch.Tensor) -> None:
    *path, leaf = name.split(".")
    mod = root
    for part in path:
        if not hasattr(mod, part):
            mod.add_module(part, nn.Module())
        mod = getattr(mod, part)
    if isinstance(value, nn.Parameter):
        mod.register_parameter(leaf, value)
    else:
        mod.register_buffer(leaf, value)


def build_module(choice: dict[str, ENode], root: str, tr: Translation,
                 original: fx.GraphModule, position: dict[str, int] | None = None
                 ) -> fx.GraphModule:
    """The program that computes the terms chosen for each e-class, from ``root``.

    Parameters
    ----------
    choice : dict
        E-class → the e-node chosen for it (an acyclic choice covering what ``root``
        needs).
    root : str
        The e-class of ``T.output``.
    tr : Translation
        Inputs, constants and the op table of the original program.
    original : torch.fx.GraphModule
        The original program: its input and output structure and parameters are kept.
    position : dict, optional
        E-class → position in the original program (``EClasses.position``): ops are
        emitted in the original's order where they have one (:func:`program_order`).

    Notes
    -----
    Weights the rules made (``W.cat``, ``W.bn_weight``, ...) are computed here once and
    stored as buffers ``rewritten.w0``, ``rewritten.w1``, ...; parameters kept as they
    were keep their names. O(chosen nodes).
    """
    graph = fx.Graph()
    mod = nn.Module()
    placeholders = {n.name: graph.placeholder(n.name) for n in original.graph.nodes
                    if n.op == "placeholder"}
    done: dict[str, Any] = {}
    weights: dict[str, torch.Tensor] = {}
    derived: dict[str, fx.Node | None] = {}

    def wvalue(c: str) -> torch.Tensor:
        if c not in weights:
            node = choice[c]
            weights[c] = weight_value(node.op, node.args, wvalue, tr.constants, meta=False)
        return weights[c]

    def weight_node(c: str) -> fx.Node | None:
        if c in derived:
            return derived[c]
        node = choice[c]
        if node.op == "W":
            name = node.args[0]
            if not _has(mod, name):
                orig = operator.attrgetter(name)(original)
                _set_nested(mod, name, orig if isinstance(orig, nn.Parameter) else orig.detach())
            derived[c] = graph.get_attr(name)
        elif node.op == "W.zeros":
            derived[c] = None  # an absent bias
        else:
            name = f"rewritten.w{sum(n.startswith('rewritten.') for n in derived_names)}"
            derived_names.append(name)
            _set_nested(mod, name, wvalue(c).detach().clone())
            derived[c] = graph.get_attr(name)
        return derived[c]

    derived_names: list[str] = []

    def value(c: str) -> Any:
        return weight_node(c) if choice[c].op.startswith("W") else done[c]

    for c in program_order(choice, root, position or {},
                           lambda k: not choice[k].op.startswith("W")):
        node = choice[c]
        op = node.op
        if op == "T":
            done[c] = placeholders[node.args[0]]
        elif op == "L.nil":
            done[c] = []
        elif op == "L.cons":
            done[c] = [done[node.args[0]], *done[node.args[1]]]
        elif op == "T.output":
            done[c] = graph.output(tuple(done[node.args[0]]))
        else:
            target, args = call_of(op, node.args, value, tr)
            if op == "T.const":
                done[c] = args[0]
            elif op == "T.op":
                done[c] = graph.call_function(target, tuple(args[0]), dict(args[1]))
            elif op == "T.cat":
                # cat(cat(a, b), c) is one n-ary cat: each extra one would copy again
                parts = [p for part in args[0] for p in (
                    part.args[0] if isinstance(part, fx.Node) and part.target is target
                    and part.args[1] == args[1] else [part])]
                done[c] = graph.call_function(target, (parts, args[1]))
            elif isinstance(target, Unfused):
                done[c] = graph.call_function(target.act, (graph.call_function(target.op,
                                                                                tuple(args)),))
            else:
                done[c] = graph.call_function(target, tuple(args))
    graph._codegen = copy.deepcopy(original.graph._codegen)
    graph.eliminate_dead_code()
    return fx.GraphModule(mod, graph, class_name="Rewritten")


def _has(mod: nn.Module, name: str) -> bool:
    try:
        operator.attrgetter(name)(mod)
    except AttributeError:
        return False
    return True


def unfuse(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` with each oneDNN fused kernel :func:`build_module` emitted replaced
    by the op and its activation (two ATen calls), for ``torch.compile``: inductor lowers
    the fused kernels only when their weights are frozen constants, and fuses
    activations itself.

    Examples
    --------
    >>> import torch
    >>> from graphopt.rewrite import rewrite
    >>> res = rewrite(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
    ...               (torch.randn(2, 4),))
    >>> [str(n.target) for n in unfuse(res.module).graph.nodes if n.op == "call_function"]
    ['aten.linear.default', 'aten.relu.default']
    """
    gm = copy.deepcopy(gm)
    act = {v: UNARY[k] for k, v in FUSED.items()}
    mk = torch.ops.mkldnn
    fused = ({mk._linear_pointwise.default, mk._convolution_pointwise.default}
             if fused_kernels() else set())
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in fused:
            continue
        linear = n.target is mk._linear_pointwise.default
        attr, algorithm = n.args[3:6:2] if linear else n.args[7:10:2]
        if (attr, algorithm) not in act:
            continue  # not one build_module emits
        with gm.graph.inserting_before(n):
            if linear:
                op = gm.graph.call_function(_aten.linear.default, n.args[:3])
            else:
                x, w, b, padding, stride, dilation, groups = n.args[:7]
                op = gm.graph.call_function(_aten.conv2d.default,
                                            (x, w, b, stride, padding, dilation, groups))
            out = gm.graph.call_function(act[(attr, algorithm)], (op,))
        n.replace_all_uses_with(out)
        gm.graph.erase_node(n)
    gm.recompile()
    return gm
