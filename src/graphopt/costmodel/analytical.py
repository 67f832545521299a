"""Hand-made analytical rankings of configurations: the baselines a learned model must beat.

Both estimate a configuration's runtime on one TPU v4 core (``load_cluster("tpu-v4:1")``)
as the roofline time of the program (:func:`graphopt.cost.op_costs`, summed over every
node; the same for every configuration) plus a term that depends on the configuration:

**Layout** (:func:`layout_proxy`). A layout configuration sets, for each configurable
node (convolutions, reshapes), the minor-to-major order of its output and input
tensors (often only the minor-most dimensions). XLA's default layout is row-major,
minor-to-major ``(r-1, r-2, ..., 0)``; a tensor given another order must be produced or
consumed in that order, which we charge as one transpose of that tensor (read + write
its bytes at the data-movement efficiency, plus a launch). Tensor 0 is the node's
output (its bytes from its shape and dtype); tensors 1, 2 are its operands, taken as
its producers in node order (the graph does not keep operand order). What this does
not model: that a convolution may run *faster* in a non-default layout, that XLA
fuses or elides some transposes, and layout propagation to non-configurable nodes.

**Tile** (:func:`tile_proxy`). A tile configuration gives the output tile bounds of a
fused kernel. The kernel runs ``prod(ceil(S_d / b_d))`` grid steps over its output
shape S, each paying a fixed overhead (0.35 µs, the per-grid-step overhead the Pallas
TPU documentation quotes), and computes on padded tiles: the roofline time is scaled
by ``prod(ceil(S_d / b_d) * b_d) / prod(S_d)``. The bounds are taken as element
counts; the dataset does not say their unit for the minor dimensions (TPU vector
tiles are 8 x 128), so the step count is a proxy, not a prediction. Kernel and input
bounds are ignored.

Lower estimated time = better, like the learned models' scores.
"""

from __future__ import annotations

import math

import numpy as np

from graphopt.cost import EFFICIENCY, op_costs
from graphopt.ir.formulas import dtype_bytes
from graphopt.costmodel.data import CostGraph, CostModelError
from graphopt.hardware import load_cluster

__all__ = ["GRID_STEP_SECONDS", "LAYOUT_CONFIG_WIDTH", "TILE_CONFIG_WIDTH", "layout_proxy", "tile_proxy"]

#: Fixed cost of one grid step of a TPU kernel (Pallas TPU docs: about 0.35 µs).
GRID_STEP_SECONDS = 0.35e-6


#: Config features per configurable node of a TpuGraphs layout file: 6 dims for each of
#: the output and two operands.
LAYOUT_CONFIG_WIDTH = 18
#: Config features of a TpuGraphs tile file (the proxy reads the output bounds, 6:12).
TILE_CONFIG_WIDTH = 24


def _check_width(g: CostGraph, width: int) -> None:
    # the proxies read features by position: another width would be read as other fields
    if g.config_feat.shape[-1] != width:
        raise CostModelError(f"{g.source or g.name}: config features are {g.config_feat.shape[-1]} "
                             f"wide; the {g.collection} proxy reads TpuGraphs' {width}")


def _tpu():
    return load_cluster("tpu-v4:1").devices[0]


def _numel_bytes(g, i: int) -> tuple[tuple[int, ...], float]:
    shape = tuple(int(d) for d in g.shape[i] if d > 0)
    return shape, math.prod(shape) * dtype_bytes(str(g.dtype[i]))


def layout_proxy(g: CostGraph) -> np.ndarray:
    """Estimated seconds ``(c,)`` of each layout configuration of ``g`` (see the module
    docstring). ``g`` must be unnormalized and keep its IR graph (not pruned).

    Raises
    ------
    CostModelError
        ``g`` is not a layout graph, has no IR graph, or its config features are not
        :data:`LAYOUT_CONFIG_WIDTH` wide (the file is named).
    """
    if g.collection != "layout" or g.graph is None:
        raise CostModelError(f"{g.name}: layout_proxy needs an unpruned layout graph with its IR graph")
    _check_width(g, LAYOUT_CONFIG_WIDTH)
    ir, dev = g.graph, _tpu()
    base = float(op_costs(ir, load_cluster("tpu-v4:1")).time.sum())
    eff = EFFICIENCY["data_movement"][1]
    src, dst = ir.src, ir.dst
    # (ranks, bytes) of tensor 0 (output) and 1, 2 (operands) of each configurable node
    tensors = []
    for v in g.config_nodes.tolist():
        shapes = [_numel_bytes(ir, v)] + [_numel_bytes(ir, int(u)) for u in np.sort(src[dst == v])[:2]]
        tensors.append(shapes)
    k = g.config_feat.shape[2] // 3  # dims per tensor (6)
    cost = np.full(g.num_configs, base)
    for c in range(g.num_configs):
        for j, shapes in enumerate(tensors):
            for t, (shape, nbytes) in enumerate(shapes):
                dims = [int(d) for d in g.config_feat[c, j, t * k:(t + 1) * k] if d >= 0]
                default = list(range(len(shape) - 1, -1, -1))[:len(dims)]
                if dims and dims != default:
                    cost[c] += dev.launch_overhead + 2.0 * nbytes / (dev.mem_bw * eff)
    return cost


def tile_proxy(g: CostGraph) -> np.ndarray:
    """Estimated seconds ``(c,)`` of each tile configuration of ``g`` (see the module
    docstring). ``g`` must be unnormalized and keep its IR graph.

    Raises
    ------
    CostModelError
        ``g`` is not a tile graph, has no IR graph, or its config features are not
        :data:`TILE_CONFIG_WIDTH` wide (the file is named).
    """
    if g.collection != "tile" or g.graph is None:
        raise CostModelError(f"{g.name}: tile_proxy needs a tile graph with its IR graph")
    _check_width(g, TILE_CONFIG_WIDTH)
    ir = g.graph
    base = float(op_costs(ir, load_cluster("tpu-v4:1")).time.sum())
    sinks = np.flatnonzero(ir.out_degree == 0)
    shape, _ = _numel_bytes(ir, int(sinks[-1]) if len(sinks) else ir.num_nodes - 1)
    cost = np.empty(g.num_configs)
    for c in range(g.num_configs):
        bounds = [int(b) for b in g.config_feat[c, 6:12] if b > 0]
        steps, padded, volume = 1.0, 1.0, 1.0
        for s, b in zip(shape, bounds):
            n = math.ceil(s / b)
            steps, padded, volume = steps * n, padded * n * b, volume * s
        cost[c] = steps * GRID_STEP_SECONDS + base * padded / max(volume, 1.0)
    return cost
