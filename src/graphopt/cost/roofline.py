"""Per-op compute time on each device: the roofline of docs/design.md §2.

``time = dispatch + launch_overhead + max(flops / (peak * eff_flop), bytes / (mem_bw * eff_mem))``

Efficiencies are per op class: dense matrix products get close to the matrix units'
peak, everything else runs on the vector units and is usually bound by memory. Views
launch no kernel; inputs and state cost nothing. ``dispatch`` is the host's cost of
issuing any op, views included (an eager framework's per-op overhead; 0 in the
presets, measured by ``graphopt calibrate``). A measured :class:`Profile` replaces the
kernel's time (launch included) for the ops it covers; dispatch comes on top.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from graphopt.errors import ClusterError
from graphopt.hardware import Cluster
from graphopt.ir import Graph
from graphopt.ir.ops import OP_CLASSES, class_ids

__all__ = ["EFFICIENCY", "OpCosts", "op_costs"]

#: (fraction of peak FLOP/s, fraction of memory bandwidth) an op class achieves.
#: Matrix products reach most of the tensor-core peak on large shapes; elementwise and
#: data-movement kernels stream memory at ~80%; reductions, softmax and norms pay for
#: a second pass and cross-thread reductions; gathers are scattered reads.
EFFICIENCY: dict[str, tuple[float, float]] = {
    "other": (0.3, 0.5),
    "input": (1.0, 1.0),
    "view": (1.0, 1.0),
    "matmul": (0.7, 0.8),
    "conv": (0.55, 0.7),
    "elementwise": (0.5, 0.8),
    "reduction": (0.3, 0.6),
    "softmax": (0.3, 0.6),
    "norm": (0.3, 0.6),
    "embedding": (0.3, 0.4),
    "data_movement": (0.5, 0.7),
    "pool": (0.3, 0.6),
    "collective": (0.5, 0.5),
}
_MATRIX = frozenset({"matmul", "conv"})
_FREE = frozenset({"view", "input"})


@dataclass(frozen=True, eq=False)
class OpCosts:
    """Costs of every node on every device (all float64, shape (N, D) unless noted).

    ``time = launch + max(flop_time, mem_time)``. ``sec_per_byte`` (shape (C, D), one
    row per op class) prices the bytes a fused kernel saves on its internal edges.
    ``measured`` (bool, (N, D)) marks entries a profile replaced.
    """

    time: np.ndarray
    flop_time: np.ndarray
    mem_time: np.ndarray
    launch: np.ndarray
    sec_per_byte: np.ndarray
    class_id: np.ndarray
    measured: np.ndarray


_MAX_OP_SECONDS = 1e6


def op_costs(graph: Graph, cluster: Cluster, profile=None) -> OpCosts:
    """Roofline costs of ``graph``'s nodes on ``cluster``'s devices.

    Parameters
    ----------
    profile : Profile or list of Profile, optional
        Measured times; each applies to the devices of its ``device_kind`` (a warning
        says when that kind matches no device of ``cluster``).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> c = op_costs(layered_graph(4, 3, seed=0), load_cluster("dgx1-v100:2"))
    >>> c.time.shape
    (12, 2)
    """
    n, d = graph.num_nodes, cluster.num_devices
    cid = class_ids(graph.op)
    classes = np.array(OP_CLASSES)
    eff_f = np.array([EFFICIENCY[c][0] for c in OP_CLASSES])[cid]
    eff_m = np.array([EFFICIENCY[c][1] for c in OP_CLASSES])[cid]
    is_matrix = np.isin(classes[cid], list(_MATRIX))
    free = np.isin(classes[cid], list(_FREE))
    source = classes[cid] == "input"  # state and inputs: nothing is issued for them
    nbytes = graph.bytes_read + graph.bytes_written
    flop_time = np.zeros((n, d))
    mem_time = np.zeros((n, d))
    launch = np.zeros((n, d))
    spb = np.zeros((len(OP_CLASSES), d))
    dtypes = np.unique(graph.dtype) if n else np.array([], dtype=str)
    for j, dev in enumerate(cluster.devices):
        peak = np.full(n, dev.vector_flops)
        for dt in dtypes:
            m = is_matrix & (graph.dtype == dt)
            peak[m] = dev.matrix_flops(str(dt))
        flop_time[:, j] = graph.flops / (peak * eff_f)
        mem_time[:, j] = nbytes / (dev.mem_bw * eff_m)
        launch[:, j] = np.where(free, 0.0, dev.launch_overhead) + np.where(source, 0.0,
                                                                           dev.dispatch_overhead)
        spb[:, j] = 1.0 / (dev.mem_bw * np.array([EFFICIENCY[c][1] for c in OP_CLASSES]))
    flop_time[free] = 0.0
    mem_time[free] = 0.0
    measured = np.zeros((n, d), dtype=bool)
    for p in ([] if profile is None else profile if isinstance(profile, list) else [profile]):
        kinds = sorted({dev.kind for dev in cluster.devices})
        if p.device_kind not in kinds:
            warnings.warn(f"a profile measured on {p.device_kind!r} matches no device of "
                          f"{cluster.name!r} (kinds: {', '.join(kinds)}), so it is not used; "
                          "apply it to a kind with Profile.for_kind (CLI: --profile FILE@KIND)",
                          stacklevel=2)
            continue
        secs = p.lookup(graph)  # (N,) seconds, NaN where not measured
        hit = ~np.isnan(secs)
        for j, dev in enumerate(cluster.devices):
            if dev.kind != p.device_kind:
                continue
            # a measured time holds the kernel's launch; the host's dispatch comes on top
            measured[hit, j] = True
            launch[hit, j] = np.where(source[hit], 0.0, dev.dispatch_overhead)
            flop_time[hit, j] = secs[hit]
            mem_time[hit, j] = 0.0
    time = launch + np.maximum(flop_time, mem_time)
    # Rates of 1e-308 TFLOP/s pass a cluster's checks (> 0) and make times of 1e300 s or
    # inf, which no search can rank; no op of a real device takes 11 days.
    if not (time < _MAX_OP_SECONDS).all():
        i, j = np.argwhere(~(time < _MAX_OP_SECONDS))[0]
        raise ClusterError(f"cluster {cluster.name!r}: node {graph.names[i]!r} would take "
                           f"{time[i, j]:.3g} s on {cluster.devices[j].name!r}; check that "
                           "device's peak_tflops, vector_tflops and mem_gbps")
    return OpCosts(time, flop_time, mem_time, launch, spb, cid, measured)
