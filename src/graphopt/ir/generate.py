"""Graphs generated from a seed: random layered DAGs and a small MLP training step.

The layered graphs give the simulator benchmark and pre-training corpora graphs of any
size with a realistic op mix; :func:`mlp_training_graph` is a complete training step
small enough to check by hand (the built-in example of ``graphopt demo``).
"""

from __future__ import annotations

import numpy as np

from graphopt.ir.formulas import dtype_bytes, op_cost
from graphopt.ir.graph import Graph, GraphBuilder

__all__ = ["layered_graph", "mlp_training_graph"]

_MIX = (("mm", 0.2), ("add", 0.2), ("relu", 0.12), ("mul", 0.12), ("sum", 0.08),
        ("layer_norm", 0.08), ("softmax", 0.05), ("transpose", 0.08), ("gelu", 0.07))


def layered_graph(num_layers: int, width: int, seed: int = 0, *, batch: int = 32,
                  hidden: tuple[int, int] = (256, 2048), fanin: int = 2,
                  skip: float = 0.2, dtype: str = "float32") -> Graph:
    """A random layered DAG of ``num_layers * width`` ops with a transformer-like op mix.

    Each op reads ``1..fanin`` outputs of the previous layer (and, with probability
    ``skip``, one from two layers back). Tensors are ``(batch, h)`` with ``h`` drawn
    log-uniformly from ``hidden``; matrix products own their weight as persistent bytes.

    >>> g = layered_graph(10, 4, seed=1)
    >>> g.num_nodes
    40
    """
    rng = np.random.default_rng(seed)
    ops, p = zip(*_MIX)
    p = np.array(p) / sum(p)
    b = GraphBuilder(f"layered-{num_layers}x{width}-s{seed}", meta={"generator": "layered_graph",
                                                                     "seed": int(seed)})
    esz = dtype_bytes(dtype)
    prev: list[int] = []
    prev2: list[int] = []
    dims: list[int] = []
    for layer in range(num_layers):
        cur = []
        for w in range(width):
            h = int(np.exp(rng.uniform(np.log(hidden[0]), np.log(hidden[1]))) // 64 * 64) or 64
            if not prev:
                i = b.add_node(f"l{layer}.n{w}", "input", shape=(batch, h), dtype=dtype,
                               out_bytes=batch * h * esz, module=f"layer{layer}")
                cur.append(i)
                dims.append(h)
                continue
            k = int(rng.integers(1, min(fanin, len(prev)) + 1))
            srcs = list(rng.choice(prev, size=k, replace=False))
            if prev2 and rng.random() < skip:
                srcs.append(int(rng.choice(prev2)))
            op = str(rng.choice(ops, p=p))
            srcs = sorted({int(s) for s in srcs})
            in_shapes = [(batch, dims[s]) for s in srcs]
            persist = 0.0
            if op == "mm":
                kdim = dims[srcs[0]]
                in_shapes = [(batch, kdim), (kdim, h)]
                persist = float(kdim * h * esz)
            elif op in ("add", "mul"):
                h = dims[srcs[0]]
                in_shapes = [(batch, h)] * len(srcs)
            elif op == "sum":
                in_shapes = [(batch, dims[s]) for s in srcs]
            else:
                h = dims[srcs[0]]
            flops, rd, wr = op_cost(op, in_shapes, [(batch, h)], dtype)
            i = b.add_node(f"l{layer}.n{w}", op, shape=(batch, h), dtype=dtype, flops=flops,
                           bytes_read=rd, bytes_written=wr, out_bytes=wr, persistent_bytes=persist,
                           temp_bytes=wr if op in ("softmax", "layer_norm") else 0.0,
                           module=f"layer{layer}", inputs=srcs)
            cur.append(i)
            dims.append(h)
        prev2, prev = prev, cur
    return b.build()


def mlp_training_graph(layers: int = 4, hidden: int = 1024, batch: int = 64,
                       dtype: str = "float32") -> Graph:
    """One SGD training step of a ``layers``-deep ReLU MLP: forward, loss, backward, update.

    Each layer's weight, its gradient and its update share a colocation group, as
    TensorFlow colocated variables with their update ops.

    >>> g = mlp_training_graph(layers=2, hidden=8, batch=4)
    >>> int(g.persistent_bytes.sum()) == 2 * (8 * 8 + 8) * 4
    True
    """
    esz = dtype_bytes(dtype)
    b = GraphBuilder(f"mlp-{layers}x{hidden}-b{batch}", meta={"generator": "mlp_training_graph"})
    act = (batch, hidden)

    def node(name, op, ins, out, inputs, module, **kw):
        flops, rd, wr = op_cost(op, ins, [out], dtype)
        return b.add_node(name, op, shape=out, dtype=dtype, flops=flops, bytes_read=rd,
                          bytes_written=wr, inputs=inputs, module=module, **kw)

    x = b.add_node("x", "input", shape=act, dtype=dtype, out_bytes=batch * hidden * esz)
    params, h, pre = [], x, []
    for i in range(layers):
        m = f"layers.{i}"
        w = b.add_node(f"{m}.weight", "parameter", shape=(hidden, hidden), dtype=dtype,
                       out_bytes=0.0, persistent_bytes=hidden * hidden * esz, module=m, coloc=m)
        bias = b.add_node(f"{m}.bias", "parameter", shape=(hidden,), dtype=dtype, out_bytes=0.0,
                          persistent_bytes=hidden * esz, module=m, coloc=m)
        wb, bb = hidden * hidden * esz, hidden * esz  # parameters send their whole value
        z = node(f"{m}.addmm", "addmm", [(hidden,), act, (hidden, hidden)], act,
                 [(bias, bb), h, (w, wb)], m)
        a = node(f"{m}.relu", "relu", [act], act, [z], m)
        params.append((w, bias, h, z, wb, bb))
        pre.append(z)
        h = a
    loss = node("loss", "mean", [act], (1,), [h], "loss")
    g = node("loss.backward", "mul", [act], act, [loss, h], "loss")
    for i in reversed(range(layers)):
        m = f"layers.{i}"
        w, bias, inp, z, wb, bb = params[i]
        gz = node(f"{m}.relu_backward", "threshold_backward", [act, act], act, [g, z], m)
        gw = node(f"{m}.weight.grad", "mm", [(hidden, batch), act], (hidden, hidden), [gz, inp], m,
                  coloc=m)
        gb = node(f"{m}.bias.grad", "sum", [act], (hidden,), [gz], m, coloc=m)
        # Updates write the parameter in place: no new tensor.
        node(f"{m}.weight.sgd", "sgd_update", [(hidden, hidden)] * 2, (hidden, hidden),
             [(w, wb), gw], m, coloc=m, out_bytes=0.0)
        node(f"{m}.bias.sgd", "sgd_update", [(hidden,)] * 2, (hidden,), [(bias, bb), gb], m,
             coloc=m, out_bytes=0.0)
        if i:
            g = node(f"{m}.input.grad", "mm", [act, (hidden, hidden)], act, [gz, (w, wb)], m)
    return b.build()
