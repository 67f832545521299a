"""JAX functions → :class:`~graphopt.ir.Graph`, through their jaxprs.

:func:`from_jax` traces a function with ``jax.make_jaxpr`` on example arguments and
turns each equation into one node, mapping primitives to the IR's op types
(``dot_general`` → ``matmul``, ``conv_general_dilated`` → ``conv``, ``add``,
``mul``, ``tanh``, ``reduce_sum`` → ``sum``, ``broadcast_in_dim`` → ``broadcast`` ...;
see :data:`JAX_PRIMITIVES`). Call-like primitives whose body is a jaxpr with the same
inputs and outputs (``jit``/``pjit``, ``custom_jvp_call``, ``custom_vjp_call``,
``closed_call``, ``remat``) are inlined. Loops and branches (``scan``, ``while``,
``cond``) are one node each (``while`` or ``conditional``) whose FLOPs are those of
the body: times ``length`` for ``scan``, once for ``while`` (the trip count is not
known when tracing), the most expensive branch for ``cond``.

A training step is traced like any function: compute the gradients with
``jax.grad``/``jax.value_and_grad`` and apply the update inside the traced function;
give the positions of the parameter arguments in ``param_argnums`` so that they
become ``parameter`` nodes holding persistent bytes.

Needs the ``jax`` package (the ``jax`` extra); importing this module does not.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from graphopt.ir.formulas import UnknownOpWarning, op_cost
from graphopt.errors import FrontendError, GraphError
from graphopt.ir.graph import Graph, GraphBuilder
from graphopt.ir.ops import op_class

__all__ = ["JAX_PRIMITIVES", "from_jax"]

#: JAX primitive name → IR op type (others keep their primitive name).
JAX_PRIMITIVES: dict[str, str] = {
    "dot_general": "matmul", "conv_general_dilated": "conv",
    "add": "add", "add_any": "add", "sub": "sub", "mul": "mul", "div": "div", "neg": "neg",
    "exp": "exp", "exp2": "exp", "expm1": "exponential-minus-one", "log": "log",
    "log1p": "log-plus-one", "tanh": "tanh", "logistic": "sigmoid", "sin": "sin", "cos": "cos",
    "tan": "tan", "erf": "erf", "erf_inv": "erf", "sqrt": "sqrt", "rsqrt": "rsqrt", "cbrt": "cbrt",
    "pow": "pow", "integer_pow": "pow", "square": "mul", "abs": "abs", "sign": "sign",
    "floor": "floor", "ceil": "ceil", "round": "round-nearest-afz", "max": "maximum",
    "min": "minimum", "clamp": "clamp", "select_n": "where", "convert_element_type": "cast",
    "reduce_precision": "cast", "eq": "compare", "ne": "compare", "lt": "compare",
    "le": "compare", "gt": "compare", "ge": "compare", "and": "and", "or": "or", "not": "not",
    "xor": "xor", "is_finite": "is-finite", "rem": "rem", "atan2": "atan2",
    "reduce_sum": "sum", "reduce_max": "amax", "reduce_min": "amin", "reduce_prod": "prod",
    "reduce_and": "all", "reduce_or": "any", "argmax": "argmax", "argmin": "argmin",
    "cumsum": "sum", "cumprod": "prod", "cummax": "amax", "cummin": "amin",
    "cumlogsumexp": "sum", "reduce_window_sum": "avg_pool", "reduce_window_max": "max_pool",
    "reduce_window_min": "max_pool", "select_and_scatter_add": "max_pool_backward",
    "broadcast_in_dim": "broadcast", "reshape": "reshape", "squeeze": "squeeze",
    "expand_dims": "unsqueeze", "transpose": "transpose", "concatenate": "concat", "pad": "pad",
    "slice": "slice", "dynamic_slice": "dynamic-slice",
    "dynamic_update_slice": "dynamic-update-slice", "gather": "gather", "scatter": "scatter",
    "scatter-add": "scatter", "scatter_add": "scatter", "scatter-mul": "scatter",
    "rev": "reverse", "iota": "iota", "copy": "copy", "copy_p": "copy", "sort": "sort",
    "top_k": "sort", "split": "split", "random_bits": "rng-bit-generator",
    "threefry2x32": "rng-bit-generator", "random_seed": "rng", "random_wrap": "alias",
    "random_unwrap": "alias", "psum": "all_reduce", "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter", "all_to_all": "all-to-all", "ppermute": "collective-permute",
    "sharding_constraint": "alias", "device_put": "alias", "optimization_barrier": "opt-barrier",
    "stop_gradient": "alias",
}
_LOOPS = {"scan": "while", "while": "while", "cond": "conditional"}


def _require_jax():
    try:
        import jax
        from jax.extend import core as jcore
    except ImportError as err:
        raise ImportError("from_jax needs the 'jax' package: pip install jax "
                          "(or graphopt[jax])") from err
    return jax, jcore


def _aval_info(aval) -> tuple[tuple[int, ...], str, float]:
    """(shape, dtype name, bytes) of an abstract value; tokens and refs are scalars of 0 bytes."""
    shape = tuple(int(d) for d in getattr(aval, "shape", ()) or ())
    dtype = getattr(aval, "dtype", None)
    if dtype is None:
        return (), type(aval).__name__, 0.0
    name = getattr(dtype, "name", None) or str(dtype)
    try:
        itemsize = float(dtype.itemsize)
    except (AttributeError, TypeError):
        itemsize = 0.0
    return shape, str(name), math.prod(shape) * itemsize


def _pos(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape as the IR stores it: sizes of 0 become 1 (the bytes stay 0)."""
    return tuple(max(d, 1) for d in shape)


def _sub_jaxpr(eqn, jcore) -> tuple[Any, list] | None:
    """The body of a call-like equation, if it has exactly one with matching arity."""
    found = []
    for v in eqn.params.values():
        if isinstance(v, jcore.ClosedJaxpr):
            found.append((v.jaxpr, list(v.consts)))
        elif isinstance(v, jcore.Jaxpr):
            found.append((v, []))
    if len(found) != 1:
        return None
    jaxpr, consts = found[0]
    if len(jaxpr.invars) != len(eqn.invars) or len(jaxpr.outvars) != len(eqn.outvars):
        return None
    return jaxpr, consts


def _bodies(eqn, jcore) -> list[Any]:
    out = []
    for v in eqn.params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(x, jcore.ClosedJaxpr):
                out.append(x.jaxpr)
            elif isinstance(x, jcore.Jaxpr):
                out.append(x)
    return out


def _eqn_cost(eqn, op: str) -> tuple[float, float, float]:
    """(flops, bytes_read, bytes_written) of one equation (no sub-jaxprs)."""
    ins = [_aval_info(a.aval) for a in eqn.invars]
    outs = [_aval_info(v.aval) for v in eqn.outvars]
    read, written = float(sum(i[2] for i in ins)), float(sum(o[2] for o in outs))
    if op_class(op) in ("view", "input") or not outs:
        return 0.0, 0.0, 0.0
    out_n = sum(math.prod(o[0]) for o in outs)
    prim = eqn.primitive.name
    if prim == "dot_general" and len(ins) >= 2:
        (lc, _rc), _ = eqn.params["dimension_numbers"]
        k = math.prod(ins[0][0][d] for d in lc)
        return float(2 * out_n * k), read, written
    if prim == "conv_general_dilated" and len(ins) >= 2:
        rhs = ins[1][0]
        dn = eqn.params.get("dimension_numbers")
        c_out = rhs[dn.rhs_spec[0]] if dn is not None and getattr(dn, "rhs_spec", None) else rhs[0]
        return 2.0 * math.prod(outs[0][0]) * math.prod(rhs) / max(c_out, 1), read, written
    if prim.startswith("reduce_window") and "window_dimensions" in eqn.params:
        return float(out_n * math.prod(eqn.params["window_dimensions"])), read, written
    flops, rd, wr = op_cost(op, [i[0] for i in ins], [o[0] for o in outs], outs[0][1],
                            in_dtypes=[i[1] for i in ins], warn=False)
    return (flops, rd, wr) if op_class(op) == "embedding" else (flops, read, written)


def _jaxpr_flops(jaxpr, jcore) -> float:
    """FLOPs of a whole jaxpr, sub-jaxprs included (used for loop and branch nodes)."""
    total = 0.0
    for eqn in jaxpr.eqns:
        prim = eqn.primitive.name
        if prim in _LOOPS:
            total += _loop_flops(eqn, jcore)
        elif (sub := _sub_jaxpr(eqn, jcore)) is not None:
            total += _jaxpr_flops(sub[0], jcore)
        else:
            total += _eqn_cost(eqn, JAX_PRIMITIVES.get(prim, prim))[0]
    return total


def _loop_flops(eqn, jcore) -> float:
    prim = eqn.primitive.name
    if prim == "cond":
        return max((_jaxpr_flops(b, jcore) for b in _bodies(eqn, jcore)), default=0.0)
    body = sum(_jaxpr_flops(b, jcore) for b in _bodies(eqn, jcore))
    return body * int(eqn.params.get("length", 1)) if prim == "scan" else body


def _arg_names(fn: Callable, n: int) -> list[str]:
    """Names of the first ``n`` positional parameters of ``fn`` (``arg<i>`` past them)."""
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else f"arg{i}" for i in range(n)]


def _key_name(path) -> str:
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return ".".join(parts)


def from_jax(fn: Callable, *example_args: Any, name: str | None = None,
             param_argnums: Sequence[int] = ()) -> Graph:
    """Trace ``fn(*example_args)`` with ``jax.make_jaxpr`` and build its graph.

    Parameters
    ----------
    fn : callable
        A JAX-traceable function; pytrees of arrays as arguments.
    *example_args
        Arguments to trace with (arrays or ``jax.ShapeDtypeStruct``); only their
        shapes and dtypes matter.
    name : str, optional
        Graph name; default ``fn.__name__``.
    param_argnums : sequence of int
        Positions of arguments holding parameters (weights, optimizer state): their
        leaves become ``parameter`` nodes with persistent bytes; other arguments become
        ``input`` nodes.

    Returns
    -------
    Graph
        Nodes named ``<primitive>.<k>`` (inputs by argument name and pytree path, e.g.
        ``params.w1``); ``module`` holds JAX's name stack (``transpose(jvp(...))`` marks
        the backward pass); ``graph.meta["unmapped_ops"]`` lists primitives without an
        IR mapping, costed at one FLOP per output element.

    Raises
    ------
    ImportError
        ``jax`` is not installed.
    ValueError
        ``param_argnums`` holds a position outside the arguments.
    FrontendError
        ``fn`` fails to trace on the example arguments (the message carries JAX's).
    GraphError
        The traced graph breaks an IR invariant (should not happen).

    Examples
    --------
    >>> import pytest; jnp = pytest.importorskip("jax.numpy")  # the example needs jax
    >>> g = from_jax(lambda x, w: jnp.tanh(x @ w), jnp.ones((2, 8)), jnp.ones((8, 4)),
    ...              param_argnums=[1])
    >>> g.op.tolist(), float(g.flops.sum())
    (['input', 'parameter', 'matmul', 'tanh'], 176.0)
    """
    jax, jcore = _require_jax()
    bad = [i for i in param_argnums if not -len(example_args) <= int(i) < len(example_args)]
    if bad:
        raise ValueError(f"param_argnums {list(param_argnums)}: position {bad[0]} is outside the "
                         f"{len(example_args)} example arguments")
    params = {int(i) % len(example_args) for i in param_argnums} if example_args else set()
    gname = name or str(getattr(fn, "__name__", "jax_fn"))
    try:
        closed = jax.make_jaxpr(fn)(*example_args)
    except Exception as err:  # the user's function fails to trace
        raise FrontendError(f"cannot trace {gname!r} with jax.make_jaxpr: "
                            f"{type(err).__name__}: {err}") from err
    jaxpr = closed.jaxpr
    if gname == "<lambda>":
        gname = "jax_lambda"
    b = GraphBuilder(gname, meta={"format": "jaxpr", "jax_version": jax.__version__})
    unique = b.unique_name

    env: dict[Any, tuple[int, float]] = {}
    argn = _arg_names(fn, len(example_args))
    leaves: list[tuple[str, bool]] = []
    for a, arg in enumerate(example_args):
        flat = jax.tree_util.tree_flatten_with_path(arg)[0]
        for path, _ in flat:
            key = _key_name(path)
            leaves.append((f"{argn[a]}.{key}" if key else argn[a], a in params))
    if len(leaves) != len(jaxpr.invars):  # a pytree jax flattens differently: plain names
        leaves = [(f"in{i}", False) for i in range(len(jaxpr.invars))]
    for v, (vname, is_param) in zip(jaxpr.invars, leaves):
        shape, dt, nb = _aval_info(v.aval)
        i = b.add_node(unique(vname), "parameter" if is_param else "input", shape=_pos(shape),
                       dtype=dt,
                       out_bytes=0.0 if is_param else nb, persistent_bytes=nb if is_param else 0.0)
        env[v] = (i, nb)
    counter = [0]
    unmapped: set[str] = set()

    def constants(cvars, values, module: str) -> None:
        for v, _ in zip(cvars, values):
            shape, dt, nb = _aval_info(v.aval)
            counter[0] += 1
            env[v] = (b.add_node(unique(f"const.{counter[0]}"), "constant", shape=_pos(shape),
                                 dtype=dt,
                                 out_bytes=0.0, persistent_bytes=nb, module=module), nb)

    def value(atom) -> tuple[int, float] | None:
        if isinstance(atom, jcore.Literal):
            return None
        if atom not in env:
            raise GraphError(f"graph {gname!r}: jaxpr variable {atom} used before definition")
        return env[atom]

    def walk(jx, scope: str) -> None:
        for eqn in jx.eqns:
            prim = eqn.primitive.name
            stack = str(eqn.source_info.name_stack)
            module = "/".join(s for s in (scope, stack) if s)
            sub = _sub_jaxpr(eqn, jcore) if prim not in _LOOPS else None
            if sub is not None:
                body, consts = sub
                inner = str(eqn.params.get("name", ""))  # jit's function name; "" for others
                constants(body.constvars, consts, module)
                for iv, outer in zip(body.invars, eqn.invars):
                    val = value(outer)
                    if val is not None:
                        env[iv] = val
                    else:  # a literal passed into the body: nothing to connect
                        env[iv] = _literal_node(iv)
                walk(body, "/".join(s for s in (scope, inner) if s))
                for ov, res in zip(eqn.outvars, body.outvars):
                    if isinstance(ov, jcore.DropVar):
                        continue
                    val = value(res)
                    env[ov] = val if val is not None else _literal_node(ov)
                continue
            if prim in _LOOPS:
                op = _LOOPS[prim]
                flops = _loop_flops(eqn, jcore)
                _, read, written = _eqn_cost(eqn, "copy")
            else:
                op = JAX_PRIMITIVES.get(prim, prim)
                if prim not in JAX_PRIMITIVES:
                    unmapped.add(prim)
                flops, read, written = _eqn_cost(eqn, op)
            outs = [_aval_info(v.aval) for v in eqn.outvars]
            shape, dt = (outs[0][0], outs[0][1]) if outs else ((), "float32")
            nbytes = float(sum(o[2] for o in outs))
            out_b = 0.0 if op_class(op) == "view" else nbytes
            counter[0] += 1
            i = b.add_node(unique(f"{prim}.{counter[0]}"), op, shape=_pos(shape), dtype=dt,
                           flops=flops, bytes_read=read, bytes_written=written, out_bytes=out_b,
                           module=module)
            for a in eqn.invars:
                val = value(a)
                if val is not None and val[0] != i:
                    b.add_edge(val[0], i, val[1])
            for v, o in zip(eqn.outvars, outs):
                if not isinstance(v, jcore.DropVar):
                    env[v] = (i, o[2])

    def _literal_node(var) -> tuple[int, float]:
        shape, dt, nb = _aval_info(var.aval)
        counter[0] += 1
        return b.add_node(unique(f"literal.{counter[0]}"), "constant", shape=_pos(shape), dtype=dt,
                          out_bytes=0.0, persistent_bytes=nb), nb

    constants(jaxpr.constvars, closed.consts, "")
    walk(jaxpr, "")
    if unmapped:
        b.meta["unmapped_ops"] = sorted(unmapped)
        warnings.warn(f"jax primitives without an IR mapping, costed at one FLOP per output "
                      f"element: {', '.join(sorted(unmapped))}", UnknownOpWarning, stacklevel=2)
    return b.build()
