"""JAX frontend: jaxprs of small functions and a training step, checked against hand counts."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from graphopt.ir.formulas import UnknownOpWarning  # noqa: E402
from graphopt.frontends.jax import from_jax  # noqa: E402

B, D, H, K = 2, 8, 16, 4  # batch, input, hidden, output sizes


def _flops(g, op):
    return float(g.flops[g.op == op].sum())


def test_forward_mlp_hand_counts():
    def mlp(x, w1, w2):
        return jnp.tanh(x @ w1) @ w2

    g = from_jax(mlp, jnp.ones((B, D)), jnp.ones((D, H)), jnp.ones((H, K)), param_argnums=[1, 2])
    assert g.name == "mlp"
    assert g.op.tolist() == ["input", "parameter", "parameter", "matmul", "tanh", "matmul"]
    assert g.names.tolist()[:3] == ["x", "w1", "w2"]
    assert _flops(g, "matmul") == 2 * B * D * H + 2 * B * H * K
    assert _flops(g, "tanh") == 6 * B * H  # the cost formulas count tanh as 6 FLOPs
    assert g.persistent_bytes.sum() == (D * H + H * K) * 4
    assert [g.shape_of(i) for i in range(3, 6)] == [(B, H), (B, H), (B, K)]
    edges = {(str(g.names[s]), str(g.names[d])): b for s, d, b in zip(g.src, g.dst, g.edge_bytes)}
    assert edges[("w1", "dot_general.1")] == D * H * 4


def test_custom_jvp_and_jit_are_inlined():
    g = from_jax(lambda x: jax.nn.relu(x) * 2.0, jnp.ones((3,)))
    assert g.op.tolist() == ["input", "maximum", "mul"]
    assert g.module[1] == "relu"


def test_training_step_value_and_grad_sgd():
    def loss(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    def step(p, x, y):
        value, grads = jax.value_and_grad(loss)(p, x, y)
        return value, jax.tree.map(lambda w, gw: w - 0.1 * gw, p, grads)

    p = {"w1": jnp.ones((D, H)), "b1": jnp.zeros(H), "w2": jnp.ones((H, K))}
    g = from_jax(step, p, jnp.ones((B, D)), jnp.ones((B, K)), param_argnums=[0])
    g.validate()
    assert sorted(str(n) for n in g.names[g.op == "parameter"]) == ["p.b1", "p.w1", "p.w2"]
    assert g.persistent_bytes.sum() == (D * H + H + H * K) * 4
    # Forward x@w1, h@w2; backward dW2, dh, dW1 (no gradient for the input x).
    assert int((g.op == "matmul").sum()) == 5
    assert _flops(g, "matmul") == 2 * (2 * B * D * H + 3 * B * H * K)
    backward = [str(m) for m in g.module[g.op == "matmul"]]
    assert sum("transpose" in m for m in backward) == 3
    # The SGD update: one scale and one subtraction per parameter tensor.
    assert int((g.op == "sub").sum()) >= 3 and g.num_nodes == 36


def test_conv_flops():
    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    g = from_jax(f, jnp.ones((1, 8, 8, 3)), jnp.ones((3, 3, 3, 5)))
    assert g.op.tolist() == ["input", "input", "conv"]
    assert g.flops[2] == 2 * (8 * 8 * 5) * (3 * 3 * 3)
    assert g.shape_of(2) == (1, 8, 8, 5)


def test_loops_and_branches_are_one_node():
    g = from_jax(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0, x), jnp.ones(5))
    assert g.op.tolist() == ["input", "while"]
    assert g.flops[1] == 3 * (5 + 1)  # 3 trips of (multiply 5 elements, increment the counter)

    def branch(x):
        return jax.lax.cond(x.sum() > 0, lambda v: v * 2.0, lambda v: jnp.exp(v), x)

    g = from_jax(branch, jnp.ones(3))
    assert g.op.tolist()[-1] == "conditional"
    assert g.flops[-1] == 4 * 3  # the dearer branch: exp


def test_unmapped_primitive_warns():
    with pytest.warns(UnknownOpWarning, match="cholesky"):
        g = from_jax(jnp.linalg.cholesky, jnp.eye(4))
    assert "cholesky" in g.meta["unmapped_ops"]


def test_bad_param_argnums():
    with pytest.raises(ValueError, match="position 3 is outside the 1 example arguments"):
        from_jax(jnp.sin, jnp.ones(2), param_argnums=[3])


def test_zero_size_arrays():
    g = from_jax(lambda x: x * 2.0, jnp.ones((0, 3)))
    g.validate()
    assert g.shape_of(1) == (1, 3) and g.flops[1] == 0 and g.out_bytes[1] == 0


def test_untraceable_function():
    from graphopt.errors import FrontendError

    def bad(x):
        return x @ jnp.ones((5, 2))  # (3,) @ (5, 2): shapes do not match

    with pytest.raises(FrontendError, match="cannot trace 'bad' with jax.make_jaxpr"):
        from_jax(bad, jnp.ones(3))
