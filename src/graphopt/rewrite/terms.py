"""The term language of the e-graph and the translation of a torch.fx graph into it.

Two sorts, as in Tensat: :class:`T`, the tensors a program computes, and :class:`W`,
constant tensors (parameters and buffers, and what rules make of them: concatenated,
scaled or batch-norm-folded weights). A ``W`` term costs nothing: it is evaluated once
when the rewritten program is built, like TASO's and Tensat's weight ops. Ops the rules
know have their own constructor (``T.linear``, ``T.conv``, ``T.permute``, ...); every
other ATen op is ``T.op(key, args)``, where ``key`` names an entry of a side table that
keeps the op and its non-tensor arguments, so any forward graph can be rewritten and
rebuilt.

Conventions that make rules simple: dimensions are counted from the end (``1`` is the
last), so a linear's features are at ``1`` and a convolution's channels at ``3`` whatever
the rank; a concatenation is binary and carries the sizes of its two parts along its
dimension, and a split is a ``T.slice``; sizes of new tensors are computed by the rules
with egglog's integer arithmetic, never looked up.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from egglog import (EGraph, Expr, String, StringLike, f64Like, function, i64, i64Like, let,
                    relation, set_)
from torch import fx

from graphopt.errors import RewriteError

__all__ = ["FUSED", "L", "RewriteError", "T", "Translation", "W", "hi", "is_identity", "lo",
           "fx_order", "perm_compose", "shape_of", "to_terms"]



class W(Expr):
    """A constant tensor: a parameter or buffer, or a weight a rule derived from others."""

    def __init__(self, name: StringLike) -> None:
        """The parameter or buffer of that qualified name (``layer1.0.conv1.weight``)."""

    @classmethod
    def zeros(cls, n: i64Like) -> W:
        """``n`` zeros: the bias of an op that has none."""

    @classmethod
    def cat(cls, a: W, b: W) -> W:
        """``a`` and ``b`` concatenated along dimension 0 (output features or channels)."""

    @classmethod
    def scale(cls, a: W, s: f64Like) -> W:
        """``a * s``."""

    @classmethod
    def bn_weight(cls, w: W, gamma: W, var: W, eps: f64Like) -> W:
        """A convolution's weight with an inference batch norm folded in."""

    @classmethod
    def bn_bias(cls, b: W, gamma: W, beta: W, mean: W, var: W, eps: f64Like) -> W:
        """A convolution's bias with an inference batch norm folded in."""

    @classmethod
    def pad(cls, w: W, ph: i64Like, pw: i64Like) -> W:
        """A convolution kernel enlarged by ``ph`` and ``pw`` zeros on each side."""


class T(Expr):
    """A tensor the program computes."""

    def __init__(self, name: StringLike) -> None:
        """The program's input of that name."""

    @classmethod
    def const(cls, w: W) -> T:
        """A constant used as an operand."""

    @classmethod
    def linear(cls, x: T, w: W, b: W, n: i64Like) -> T:
        """``x @ w.T + b`` with ``n`` output features."""

    @classmethod
    def conv(cls, x: T, w: W, b: W, kh: i64Like, kw: i64Like, ph: i64Like, pw: i64Like,
             sd: StringLike, groups: i64Like, n: i64Like) -> T:
        """2-d convolution with a ``kh`` x ``kw`` kernel, padding ``ph``, ``pw``, stride and
        dilation ``sd`` (``"sh,sw,dh,dw"``), ``n`` output channels."""

    @classmethod
    def linear_act(cls, fn: StringLike, x: T, w: W, b: W, n: i64Like) -> T:
        """``fn(linear(x, w, b))`` as one kernel (TASO's linear with an activation mode);
        ``fn`` one of :data:`FUSED`."""

    @classmethod
    def conv_act(cls, fn: StringLike, x: T, w: W, b: W, kh: i64Like, kw: i64Like, ph: i64Like,
                 pw: i64Like, sd: StringLike, groups: i64Like, n: i64Like) -> T:
        """``fn(conv(x, w, b, ...))`` as one kernel (TASO's convolution with an activation
        mode); ``fn`` one of :data:`FUSED`."""

    @classmethod
    def bn(cls, x: T, gamma: W, beta: W, mean: W, var: W, eps: f64Like) -> T:
        """Batch norm in inference (running statistics) over dimension 1."""

    @classmethod
    def matmul(cls, a: T, b: T) -> T:
        """``a @ b`` (batched, broadcasting)."""

    @classmethod
    def add(cls, a: T, b: T) -> T:
        """``a + b`` (broadcasting)."""

    @classmethod
    def mul(cls, a: T, b: T) -> T:
        """``a * b`` (broadcasting)."""

    @classmethod
    def muls(cls, a: T, s: f64Like) -> T:
        """``a * s`` for a Python number ``s``."""

    @classmethod
    def un(cls, op: StringLike, a: T) -> T:
        """An elementwise function of :data:`UNARY` by name."""

    @classmethod
    def permute(cls, a: T, p: StringLike) -> T:
        """``a.permute(p)``, ``p`` a comma-separated permutation."""

    @classmethod
    def reshape(cls, a: T, s: StringLike) -> T:
        """``a.reshape(s)``, ``s`` the comma-separated target shape."""

    @classmethod
    def slice(cls, a: T, dim: i64Like, start: i64Like, n: i64Like) -> T:
        """``n`` entries of ``a`` along ``dim`` (counted from the end) from ``start``."""

    @classmethod
    def cat(cls, a: T, b: T, dim: i64Like, na: i64Like, nb: i64Like) -> T:
        """``a`` (``na`` long along ``dim``, counted from the end) and ``b`` (``nb``)
        concatenated."""

    @classmethod
    def op(cls, key: StringLike, args: L) -> T:
        """Any other op: ``key`` names its entry in :attr:`Translation.table`."""

    @classmethod
    def item(cls, t: T, i: i64Like) -> T:
        """Output ``i`` of an op with several."""

    @classmethod
    def output(cls, outs: L) -> T:
        """The program's outputs: the root of the e-graph."""


class L(Expr):
    """A list of tensors (the operands of ``T.op``, the outputs of ``T.output``)."""

    @classmethod
    def nil(cls) -> L:
        """The empty list."""

    @classmethod
    def cons(cls, head: T, tail: L) -> L:
        """``head`` followed by ``tail``."""


@function
def shape_of(t: T) -> String:
    """The comma-separated shape of ``t``, known for the input program's tensors."""


@function(merge=lambda old, new: old.min(new))
def fx_order(t: T) -> i64:
    """The position of ``t``'s node in the input program, the earliest where two nodes
    are one value (an identity op and its input): the rewritten program keeps the
    original's order of ops where it can (codegen's ``program_order``)."""


@function
def perm_compose(p: StringLike, q: StringLike) -> String:
    """The permutation of ``permute(permute(x, p), q)``, for the pairs the graph needs."""


@function
def lo(w: W) -> i64:
    """The least index of the input program's weights that ``w`` is made of."""


@function
def hi(w: W) -> i64:
    """The greatest index of the input program's weights that ``w`` is made of."""


is_identity = relation("is_identity", String)

#: Elementwise functions that become ``T.un``: ATen op name → its default overload.
UNARY = {"relu": torch.ops.aten.relu.default, "gelu": torch.ops.aten.gelu.default,
         "tanh": torch.ops.aten.tanh.default, "sigmoid": torch.ops.aten.sigmoid.default,
         "silu": torch.ops.aten.silu.default}

#: Elementwise functions a convolution or linear kernel can apply to its output before
#: writing it (oneDNN post-ops): name → ``(attr, algorithm)`` of PyTorch's fused CPU
#: kernels ``mkldnn._convolution_pointwise`` and ``mkldnn._linear_pointwise`` (``"none"``:
#: gelu with erf, which is ``aten.gelu``'s default).
FUSED = {"relu": ("relu", None), "gelu": ("gelu", "none"), "tanh": ("tanh", None),
         "sigmoid": ("sigmoid", None), "silu": ("swish", None)}

_aten = torch.ops.aten
# Ops that return their input's values unchanged in inference.
_IDENTITY = {_aten.dropout.default, _aten.clone.default, _aten.contiguous.default,
             _aten.alias.default, _aten.detach.default}
_VIEWS = {_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default,
          _aten.flatten.using_ints, _aten.unflatten.int}


def _csv(xs) -> str:
    return ",".join(str(int(x)) for x in xs)


def _compose(p: str, q: str) -> str:
    """``permute(permute(x, p), q) == permute(x, _compose(p, q))``."""
    pp = [int(v) for v in p.split(",")]
    return _csv(pp[int(v)] for v in q.split(","))


@dataclass
class Slot:
    """Where the ``index``-th tensor operand goes in an op's argument template."""

    index: int

    def __repr__(self) -> str:
        return f"Slot({self.index})"


@dataclass
class Translation:
    """An fx graph as terms, and what is needed to rebuild a program from terms.

    Attributes
    ----------
    root : T
        ``T.output`` of the program's outputs.
    inputs : list of str
        Placeholder names in order.
    constants : dict
        Name of every ``W`` leaf → its tensor.
    table : dict
        Key of every ``T.op`` → ``(target, args, kwargs)`` with :class:`Slot` where
        tensor operands go.
    out_spec : Any
        The module's output pytree spec (from ``torch.export``), to rebuild outputs.
    facts : list
        egglog facts: shapes of the input program's tensors, permutation compositions.
    lets : list
        ``(name, term)`` of every term, each over the names of its operands.
    input_values : list of Tensor
        A meta tensor of each input's shape and dtype.
    num_ops : int
        Call nodes of the program.
    shape_cache : dict
        Meta values of e-nodes by their arguments' shapes (filled by extraction).
    """

    root: T
    inputs: list[str]
    constants: dict[str, torch.Tensor]
    table: dict[str, tuple[Any, tuple, dict]] = field(default_factory=dict)
    out_spec: Any = None
    facts: list = field(default_factory=list)
    lets: list = field(default_factory=list)
    input_values: list[torch.Tensor] = field(default_factory=list)
    num_ops: int = 0
    shape_cache: dict = field(default_factory=dict)

    def egraph(self) -> EGraph:
        """A new e-graph holding the program and its facts."""
        eg = EGraph()
        eg.register(*(let(name, term) for name, term in self.lets), self.root, *self.facts)
        return eg


class _Lets:
    """Gives every term of a program a let name, so each term sent to egglog is one
    constructor over named operands: a program's DAG is never unfolded into a tree
    (exponential with residual connections), and egglog-python's own let-binding of
    shared subterms, which in egglog 13.2 sometimes aliased distinct subterms once a
    process had built many e-graphs, is never needed."""

    def __init__(self, prefix: str, lets: list):
        self.prefix, self.lets, self.scratch = prefix, lets, EGraph()

    def __call__(self, term: Any) -> Any:
        name = f"{self.prefix}{len(self.lets)}"
        self.lets.append((name, term))
        return self.scratch.let(name, term)


def _from_end(dim: int, rank: int) -> int:
    """A dimension counted from the end (1 is the last): egglog's serialized e-graph
    mixes up negative integers, so terms hold none."""
    return rank - dim if dim >= 0 else -dim


def _val(n: fx.Node) -> torch.Tensor:
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor):
        raise RewriteError(f"node {n.name!r} ({n.target}) has no traced tensor value; "
                           "rewrite takes graphs from torch.export")
    return v


def to_terms(gm: fx.GraphModule) -> Translation:
    """Terms of a ``torch.export``-ed forward graph (``ExportedProgram.module()``).

    Parameters
    ----------
    gm : torch.fx.GraphModule
        Its parameters and buffers are ``get_attr`` nodes and every node carries
        ``meta["val"]`` (what ``torch.export`` records).

    Returns
    -------
    Translation

    Raises
    ------
    RewriteError
        A node without a traced value or with a data-dependent size, or an output that
        is not a tensor.

    Notes
    -----
    One pass over the nodes: O(nodes). Parameters used as plain operands become
    ``T.const``; ATen ops the rules do not know become ``T.op``.
    """
    env: dict[fx.Node, Any] = {}
    weights: dict[fx.Node, W] = {}
    consts: dict[str, torch.Tensor] = {}
    tr = Translation(T("?"), [], consts)
    bind = _Lets("$v", tr.lets)
    perms: set[str] = set()
    ranks: set[int] = set()

    def tensor(a: Any) -> T:
        if a in weights:
            return T.const(weights[a])
        return env[a]

    def weight(a: Any, n: int) -> W | None:
        if a is None:
            return W.zeros(n)
        return weights.get(a)

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = bind(T(n.name))
            tr.inputs.append(n.name)
            v = _val(n)
            tr.input_values.append(torch.empty(v.shape, dtype=v.dtype, device="meta"))
            tr.facts.append(set_(shape_of(env[n])).to(String(_csv(v.shape))))
        elif n.op == "get_attr":
            value = operator.attrgetter(n.target)(gm)
            if isinstance(value, torch.Tensor):
                consts[n.target] = value.detach()
                weights[n] = bind(W(n.target))
        elif n.op == "call_module":
            continue  # torch.export's input guards: checked when the program is built
        elif n.op == "call_function":
            vals = n.meta.get("val")
            for v in vals if isinstance(vals, (tuple, list)) else [vals]:
                if isinstance(v, torch.Tensor) and not all(isinstance(d, int) for d in v.shape):
                    raise RewriteError(f"node {n.name!r} ({n.target}): its output's size "
                                       f"{tuple(v.shape)} depends on the input data; the "
                                       "rewriter needs static shapes")
            term = _term(n, tensor, weight, tr, perms)
            env[n] = [bind(t) for t in term] if isinstance(term, list) else bind(term)
            tr.num_ops += 1
            v = n.meta.get("val")
            if isinstance(env[n], T):
                tr.facts.append(set_(fx_order(env[n])).to(i64(tr.num_ops)))
            if isinstance(v, torch.Tensor) and n in env and isinstance(env[n], T):
                ranks.add(v.dim())
                tr.facts.append(set_(shape_of(env[n])).to(String(_csv(v.shape))))
        elif n.op == "output":
            outs = L.nil()
            for a in reversed(list(n.args[0])):
                if not isinstance(a, fx.Node) or a not in env and a not in weights:
                    raise RewriteError(f"output {a!r} is not a tensor the graph computes")
                outs = L.cons(tensor(a), outs)
            tr.root = T.output(outs)
    tr.out_spec = getattr(gm, "_out_spec", None)
    for i, w in enumerate(_merge_order(gm, weights)):
        tr.facts += [set_(lo(weights[w])).to(i64(i)), set_(hi(weights[w])).to(i64(i))]
    # permutations the rules may compose: the closure of the graph's under composition
    # is finite but can be large, so pairs of the graph's own and their inverses only
    inv = {_csv(sorted(range(len(p.split(","))), key=lambda i, p=p: int(p.split(",")[i])))
           for p in perms}
    known = perms | inv
    for p in known:
        for q in known:
            if len(p) == len(q):
                tr.facts.append(set_(perm_compose(p, q)).to(String(_compose(p, q))))
    for r in ranks | {len(p.split(",")) for p in known}:
        tr.facts.append(is_identity(String(_csv(range(r)))))
    return tr


def _merge_order(gm: fx.GraphModule, weights: dict[fx.Node, W]) -> list[fx.Node]:
    """Weights numbered so that those of the linears and convolutions reading one tensor
    are consecutive. Merge rules join only adjacent ranges of this order, so the ops
    sharing an input are merged in one order (not once per permutation): O(k²) merged
    ops for k siblings instead of O(2^k)."""
    order: list[fx.Node] = []
    seen: set[fx.Node] = set()
    for n in gm.graph.nodes:
        for u in n.users:
            if u.target in (_aten.linear.default, _aten.conv2d.default) and u.args[0] is n \
                    and u.args[1] in weights and u.args[1] not in seen:
                seen.add(u.args[1])
                order.append(u.args[1])
    return order + [w for w in weights if w not in seen]


def _term(n: fx.Node, tensor, weight, tr: Translation, perms: set[str]) -> Any:
    """The term of one call node (a list of terms for ``split``)."""
    t, a = n.target, n.args
    v = n.meta.get("val")
    if t is operator.getitem and isinstance(a[0], fx.Node):
        src = tensor(a[0])
        if isinstance(src, list):
            return src[a[1]]
        return T.item(src, a[1])
    if t in (_aten.split.Tensor, _aten.split_with_sizes.default):
        x = _val(a[0])
        dim = _from_end(a[2] if len(a) > 2 else n.kwargs.get("dim", 0), x.dim())
        parts, start = [], 0
        for piece in v:
            size = piece.shape[-dim]
            parts.append(T.slice(tensor(a[0]), dim, start, size))
            start += size
        return parts
    if t in _IDENTITY and isinstance(a[0], fx.Node) and not (t is _aten.dropout.default
                                                             and a[2]):
        return tensor(a[0])
    if t is _aten.linear.default and len(a) >= 2 and weight(a[1], 0) is not None:
        b = weight(a[2] if len(a) > 2 else None, v.shape[-1])
        if b is not None:
            return T.linear(tensor(a[0]), weight(a[1], 0), b, v.shape[-1])
    if t is _aten.conv2d.default and weight(a[1], 0) is not None and _val(a[0]).dim() == 4:
        args = list(a) + [None, 1, 0, 1, 1][len(a) - 2:]
        b, stride, pad, dil, groups = args[2:7]
        bias = weight(b, v.shape[1])
        if bias is not None and not isinstance(pad, str):
            pair = lambda x: list(x) * (2 // len(x)) if isinstance(x, (list, tuple)) else [x, x]  # noqa: E731
            (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(pad), pair(dil)
            kh, kw = _val(a[1]).shape[2:]
            return T.conv(tensor(a[0]), weight(a[1], 0), bias, kh, kw, ph, pw,
                          _csv([sh, sw, dh, dw]), groups, v.shape[1])
    if t is _aten.batch_norm.default and not a[5] and all(weight(x, 0) is not None and x is not None
                                                          for x in a[1:5]):
        return T.bn(tensor(a[0]), *(weight(x, 0) for x in a[1:5]), float(a[7]))
    if t is _aten.matmul.default:
        return T.matmul(tensor(a[0]), tensor(a[1]))
    if t in (_aten.add.Tensor, _aten.mul.Tensor, _aten.div.Tensor) and len(a) == 2 \
            and not n.kwargs:
        x, y = a
        if isinstance(y, (int, float)) and isinstance(x, fx.Node) and v.dtype.is_floating_point:
            if t is _aten.mul.Tensor:
                return T.muls(tensor(x), float(y))
            if t is _aten.div.Tensor:
                return T.muls(tensor(x), 1.0 / float(y))
        elif isinstance(x, fx.Node) and isinstance(y, fx.Node) and t is not _aten.div.Tensor:
            return (T.add if t is _aten.add.Tensor else T.mul)(tensor(x), tensor(y))
    name = getattr(t, "_opname", "")
    if name in UNARY and t is UNARY[name] and not n.kwargs:
        return T.un(name, tensor(a[0]))
    if t in _VIEWS:
        return T.reshape(tensor(a[0]), _csv(v.shape))
    if t in (_aten.permute.default, _aten.transpose.int, _aten.t.default):
        rank = _val(a[0]).dim()
        if t is _aten.permute.default:
            p = [d % rank for d in a[1]]
        else:
            d0, d1 = (a[1] % rank, a[2] % rank) if t is _aten.transpose.int else (0, 1)
            p = list(range(rank))
            p[d0], p[d1] = p[d1], p[d0]
        perms.add(_csv(p))
        return T.permute(tensor(a[0]), _csv(p))
    if t is _aten.cat.default and len(a[0]) >= 1:
        dim = _from_end(a[1] if len(a) > 1 else n.kwargs.get("dim", 0), v.dim())
        parts = list(a[0])
        acc, size = tensor(parts[0]), _val(parts[0]).shape[-dim]
        for p in parts[1:]:
            ps = _val(p).shape[-dim]
            acc = T.cat(acc, tensor(p), dim, size, ps)
            size += ps
        return acc
    return _opaque(n, tensor, tr)


def _opaque(n: fx.Node, tensor, tr: Translation) -> T:
    """``T.op`` of a node the rules do not know; equal ops on equal operands share a key,
    so the e-graph also removes common subexpressions."""
    operands: list[fx.Node] = []

    def slot(a: fx.Node) -> Slot:
        operands.append(a)
        return Slot(len(operands) - 1)

    args, kwargs = fx.node.map_arg((n.args, n.kwargs), slot)
    key = f"{n.target}{args!r}{kwargs!r}"
    if isinstance(n.target, torch._ops.OpOverload) and \
            torch.Tag.nondeterministic_seeded in n.target.tags:
        key += f"@{n.name}"  # random draws are never shared
    tr.table[key] = (n.target, tuple(args), dict(kwargs))
    lst = L.nil()
    for a in reversed(operands):
        lst = L.cons(tensor(a), lst)
    return T.op(key, lst)
