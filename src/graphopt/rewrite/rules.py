"""TASO's rewrite rules for the ops of a ``torch.export`` forward graph, as egglog rules.

Two rulesets, as Tensat splits them: :data:`SINGLE`, rules whose left side is one term
(run every iteration), and :data:`MULTI`, Tensat's multi-pattern rules, whose left side
is two terms sharing an input (two linears or two convolutions of the same tensor are
merged into one wider op and split). Multi-pattern rules grow the e-graph fastest, so
Tensat runs them in the first iterations only (``RewriteConfig.multi_iterations``).

Every rule has a name (:data:`RULES` lists them with what each does) and a test in
``tests/rewrite/test_rules.py`` that checks, on random inputs, that the program it
produces computes what the original did.
"""

from __future__ import annotations

from egglog import String, eq, f64, i64, rule, ruleset, set_, union, var

from graphopt.rewrite.terms import FUSED, T, W, hi, is_identity, lo, perm_compose, shape_of

__all__ = ["ALL", "BY_NAME", "MULTI", "MULTI_NAMES", "RULES", "SINGLE"]

x, y, a, b, c, e1, e2 = (var(n, T) for n in ("x", "y", "a", "b", "c", "e1", "e2"))
w1, w2, b1, b2, g, bt, mu, vr = (var(n, W) for n in ("w1", "w2", "b1", "b2", "g", "bt", "mu",
                                                     "vr"))
n1, n2, d, s0, kh, kw, ph, pw, kh2, kw2, ph2, pw2, grp = (
    var(n, i64) for n in ("n1", "n2", "d", "s0", "kh", "kw", "ph", "pw", "kh2", "kw2", "ph2", "pw2",
                          "grp"))
s, t, eps = (var(n, f64) for n in ("s", "t", "eps"))
l1, h1, l2, h2, wv = (*(var(n, i64) for n in ("l1", "h1", "l2", "h2")), var("wv", W))
p, q, r, sh, sh2, sd, fn = (var(n, String) for n in ("p", "q", "r", "sh", "sh2", "sd", "fn"))


def _rw(name: str, lhs: T, rhs: T):
    """The rule ``lhs = rhs`` under ``name`` (egglog's ``rewrite`` takes no name)."""
    return rule(eq(e1).to(lhs), name=name).then(union(e1).with_(rhs))


def _ordered() -> tuple:
    """Facts: the weights of ``w2`` follow those of ``w1`` in the merge order."""
    return (eq(l1).to(lo(w1)), eq(h1).to(hi(w1)), eq(l2).to(lo(w2)), eq(h2).to(hi(w2)),
            eq(h1 + i64(1)).to(l2))


def _order_of(w: W) -> tuple:
    """Actions: ``w`` spans the weights from ``lo(w1)`` to ``hi(w2)``."""
    return set_(lo(w)).to(l1), set_(hi(w)).to(h2)


def _conv(x_, w_, b_, kh_=kh, kw_=kw, ph_=ph, pw_=pw, g_=grp, n_=n1):
    return T.conv(x_, w_, b_, kh_, kw_, ph_, pw_, sd, g_, n_)


#: Rule name → what it does (the TASO rule family it belongs to).
RULES: dict[str, str] = {
    "permute-compose": "permute(permute(x, p), q) = permute(x, p∘q)",
    "permute-identity": "permute(x, identity) = x",
    "reshape-compose": "reshape(reshape(x, s1), s2) = reshape(x, s2)",
    "reshape-identity": "reshape(x, shape of x) = x",
    "bn-fold": "batch_norm(conv(x, w, b)) = conv(x, w', b') in inference",
    "scale-compose": "(x * s) * t = x * (s t)",
    "scale-one": "x * 1 = x",
    "scale-linear": "linear(x, w, b) * s = linear(x, w s, b s)",
    "scale-conv": "conv(x, w, b) * s = conv(x, w s, b s)",
    "scale-matmul": "(a @ b) * s = (a * s) @ b = a @ (b * s)",
    "scale-view": "permute, reshape and slice commute with x * s",
    "add-commute": "a + b = b + a",
    "mul-commute": "a * b = b * a",
    "add-associate": "(a + b) + c = a + (b + c)",
    "distribute": "a c + b c = (a + b) c",
    "add-scales": "x s + x t = x (s + t); x + x s = x (1 + s); x + x = 2 x",
    "split-cat": "the parts of cat(a, b) split at its seam are a and b",
    "cat-slices": "cat of two adjacent slices of y is one slice of y",
    "slice-whole": "a slice of all of a linear's or convolution's output is that output",
    "cat-unary": "cat(f(a), f(b)) = f(cat(a, b)) for an elementwise f",
    "merge-linear": "linears of one input: one linear with concatenated weights, split",
    "merge-conv": "convolutions of one input (same kernel, stride, padding): one, split",
    "enlarge-conv": "convolutions of one input with different kernels: the smaller kernel "
                    "zero-padded to the larger, so merge-conv applies",
    "unary-slice": "f(slice(x)) = slice(f(x)) for an elementwise f, so that a merged op's "
                   "activation can be fused",
    **{f"conv-{f}-fuse": f"{f}(conv(x, w, b)) = conv(x, w, b, activation {f}), one kernel"
       for f in FUSED},
    **{f"linear-{f}-fuse": f"{f}(linear(x, w, b)) = linear(x, w, b, activation {f}), one kernel"
       for f in FUSED},
}

_SINGLE = (
    rule(eq(e1).to(T.permute(T.permute(x, p), q)), eq(r).to(perm_compose(p, q)),
         name="permute-compose").then(union(e1).with_(T.permute(x, r))),
    rule(eq(e1).to(T.permute(x, p)), is_identity(p), name="permute-identity").then(
        union(e1).with_(x)),
    _rw("reshape-compose", T.reshape(T.reshape(x, sh), sh2),
        T.reshape(x, sh2)),
    rule(eq(e1).to(T.reshape(x, sh)), eq(sh).to(shape_of(x)), name="reshape-identity").then(
        union(e1).with_(x)),
    _rw("bn-fold", T.bn(_conv(x, w1, b1), g, bt, mu, vr, eps),
        _conv(x, W.bn_weight(w1, g, vr, eps), W.bn_bias(b1, g, bt, mu, vr, eps))),
    _rw("scale-compose", T.muls(T.muls(x, s), t),
        T.muls(x, s * t)),
    _rw("scale-one", T.muls(x, f64(1.0)),
        x),
    _rw("scale-linear", T.muls(T.linear(x, w1, b1, n1), s),
        T.linear(x, W.scale(w1, s), W.scale(b1, s), n1)),
    _rw("scale-conv", T.muls(_conv(x, w1, b1), s),
        _conv(x, W.scale(w1, s), W.scale(b1, s))),
    _rw("scale-matmul", T.muls(T.matmul(a, b), s),
        T.matmul(T.muls(a, s), b)),
    _rw("scale-matmul-right", T.muls(T.matmul(a, b), s),
        T.matmul(a, T.muls(b, s))),
    _rw("scale-matmul-out", T.matmul(T.muls(a, s), b),
        T.muls(T.matmul(a, b), s)),
    _rw("scale-permute", T.muls(T.permute(x, p), s),
        T.permute(T.muls(x, s), p)),
    _rw("scale-permute-out", T.permute(T.muls(x, s), p),
        T.muls(T.permute(x, p), s)),
    _rw("scale-reshape", T.muls(T.reshape(x, sh), s),
        T.reshape(T.muls(x, s), sh)),
    _rw("scale-slice", T.muls(T.slice(x, d, s0, n1), s),
        T.slice(T.muls(x, s), d, s0, n1)),
    _rw("add-commute", T.add(a, b),
        T.add(b, a)),
    _rw("mul-commute", T.mul(a, b),
        T.mul(b, a)),
    _rw("add-associate", T.add(T.add(a, b), c),
        T.add(a, T.add(b, c))),
    _rw("distribute", T.add(T.mul(a, c), T.mul(b, c)),
        T.mul(T.add(a, b), c)),
    _rw("distribute-out", T.mul(T.add(a, b), c),
        T.add(T.mul(a, c), T.mul(b, c))),
    _rw("add-scales", T.add(T.muls(x, s), T.muls(x, t)),
        T.muls(x, s + t)),
    _rw("add-scales-self", T.add(x, T.muls(x, s)),
        T.muls(x, s + f64(1.0))),
    _rw("add-scales-twice", T.add(x, x),
        T.muls(x, f64(2.0))),
    _rw("split-cat", T.slice(T.cat(a, b, d, n1, n2), d, i64(0), n1),
        a),
    _rw("split-cat-right", T.slice(T.cat(a, b, d, n1, n2), d, n1, n2),
        b),
    _rw("cat-slices", T.cat(T.slice(y, d, s0, n1), T.slice(y, d, s0 + n1, n2), d, n1, n2),
        T.slice(y, d, s0, n1 + n2)),
    _rw("slice-whole", T.slice(T.linear(x, w1, b1, n1), i64(1), i64(0), n1),
        T.linear(x, w1, b1, n1)),
    _rw("slice-whole-conv", T.slice(_conv(x, w1, b1), i64(3), i64(0), n1),
        _conv(x, w1, b1)),
    # a weight concatenated in any grouping is one weight: merges reached in different
    # orders become the same op
    rule(eq(wv).to(W.cat(W.cat(w1, w2), g)), name="weight-cat-associate").then(
        union(wv).with_(W.cat(w1, W.cat(w2, g)))),
    # weights derived from one weight keep its place in the merge order
    *(rule(eq(wv).to(derived), eq(l1).to(lo(w1)), eq(h2).to(hi(w1)), name=f"order-{kind}").then(
        *_order_of(wv)) for kind, derived in (("scale", W.scale(w1, s)),
                                               ("bn", W.bn_weight(w1, g, vr, eps)))),
    _rw("cat-unary", T.cat(T.un(fn, a), T.un(fn, b), d, n1, n2),
        T.un(fn, T.cat(a, b, d, n1, n2))),
    _rw("cat-unary-out", T.un(fn, T.cat(a, b, d, n1, n2)),
        T.cat(T.un(fn, a), T.un(fn, b), d, n1, n2)),
    # the activation of a merged convolution's part becomes the merged one's, which fuses
    _rw("unary-slice", T.un(fn, T.slice(x, d, s0, n1)),
        T.slice(T.un(fn, x), d, s0, n1)),
    # TASO's activation modes: the activation is applied by the kernel as it writes its
    # output (one pass over memory less)
    *(_rw(f"conv-{f}-fuse", T.un(f, _conv(x, w1, b1)),
          T.conv_act(f, x, w1, b1, kh, kw, ph, pw, sd, grp, n1)) for f in FUSED),
    *(_rw(f"linear-{f}-fuse", T.un(f, T.linear(x, w1, b1, n1)),
          T.linear_act(f, x, w1, b1, n1)) for f in FUSED),
)

_MULTI = (
    rule(eq(e1).to(T.linear(x, w1, b1, n1)), eq(e2).to(T.linear(x, w2, b2, n2)), *_ordered(),
         name="merge-linear").then(
        *_order_of(W.cat(w1, w2)),
        union(e1).with_(T.slice(T.linear(x, W.cat(w1, w2), W.cat(b1, b2), n1 + n2), i64(1),
                                i64(0), n1)),
        union(e2).with_(T.slice(T.linear(x, W.cat(w1, w2), W.cat(b1, b2), n1 + n2), i64(1), n1,
                                n2))),
    rule(eq(e1).to(_conv(x, w1, b1, g_=i64(1), n_=n1)),
         eq(e2).to(_conv(x, w2, b2, g_=i64(1), n_=n2)), *_ordered(), name="merge-conv").then(
        *_order_of(W.cat(w1, w2)),
        union(e1).with_(T.slice(_conv(x, W.cat(w1, w2), W.cat(b1, b2), g_=i64(1), n_=n1 + n2),
                                i64(3), i64(0), n1)),
        union(e2).with_(T.slice(_conv(x, W.cat(w1, w2), W.cat(b1, b2), g_=i64(1), n_=n1 + n2),
                                i64(3), n1, n2))),
    # a smaller kernel centred in a larger one computes the same when the padding grows
    # by the same amount: (kh2 - kh) / 2 == ph2 - ph, and likewise for the width
    rule(eq(e1).to(_conv(x, w1, b1, g_=i64(1), n_=n1)),
         eq(e2).to(_conv(x, w2, b2, kh2, kw2, ph2, pw2, i64(1), n2)),
         kh2 >= kh, kw2 >= kw, (kh2 - kh) + (kw2 - kw) > i64(0),
         eq((kh2 - kh) % i64(2)).to(i64(0)), eq((kw2 - kw) % i64(2)).to(i64(0)),
         eq(ph2 - ph).to((kh2 - kh) / i64(2)), eq(pw2 - pw).to((kw2 - kw) / i64(2)),
         eq(sd).to(String("1,1,1,1")), eq(l1).to(lo(w1)), eq(h2).to(hi(w1)),
         name="enlarge-conv").then(
        *_order_of(W.pad(w1, ph2 - ph, pw2 - pw)),
        union(e1).with_(_conv(x, W.pad(w1, ph2 - ph, pw2 - pw), b1, kh2, kw2, ph2, pw2, i64(1),
                              n1))),
)


def _name(r) -> str:
    return r.decl.name


#: Every rule by name, single-pattern rules first.
BY_NAME = {_name(r): r for r in (*_SINGLE, *_MULTI)}
#: Names of the multi-pattern rules.
MULTI_NAMES = tuple(_name(r) for r in _MULTI)
SINGLE = ruleset(*_SINGLE, name="single")
MULTI = ruleset(*_MULTI, name="multi")
ALL = ruleset(*_SINGLE, *_MULTI, name="all")
