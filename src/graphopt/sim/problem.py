"""Problem: a graph, a cluster and op costs compiled to flat arrays, and the simulator's
public entry points :func:`simulate` and :func:`simulate_batch`."""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from functools import cached_property

import numba
import numpy as np

from graphopt.cost.roofline import op_costs
from graphopt.errors import PlanError
from graphopt.hardware import Cluster
from graphopt.ir import Graph
from graphopt.ir.graph import format_bytes  # noqa: F401  (re-exported: sim.format_bytes)
from graphopt.ir.ops import FUSIBLE_CONSUMER, FUSIBLE_PRODUCER, OP_CLASSES, class_ids
from graphopt.sim import engine
from graphopt.sim.plan import Plan

__all__ = ["BatchResult", "Problem", "SimResult", "Timeline", "format_bytes", "simulate",
           "simulate_batch"]

_OK, _OOM, _COLOC = engine.OK, engine.OOM, engine.COLOC

#: Classes of op XLA may duplicate into several consumers (cheap, elementwise-like ops;
#: ``instruction_fusion.cc``: producers that are not expensive).
DUPLICABLE = frozenset({"elementwise", "data_movement", "view"})
#: Ops of those classes XLA counts as expensive (``HloInstruction``'s ``IsExpensive``:
#: transcendental and division), never duplicated.
EXPENSIVE = frozenset({"div", "divide", "exp", "exponential", "log", "tanh", "tanh_", "pow",
                       "power", "sqrt", "rsqrt", "erf", "sin", "cos", "sine", "cosine", "tan",
                       "atan2", "log-plus-one", "exponential-minus-one", "sigmoid", "logistic",
                       "gelu", "silu", "rem", "remainder", "cbrt"})
#: Classes that may merge with siblings into a multi-output kernel (XLA's loop and
#: reduction input fusions, ``gpu/multi_output_fusion.cc``).
SIBLING = frozenset({"elementwise", "data_movement", "reduction", "norm", "softmax"})


class Problem:
    """A graph on a cluster with op costs, compiled once and simulated many times.

    Parameters
    ----------
    graph : Graph
    cluster : Cluster
    profile : Profile or list of Profile, optional
        Measured op times that replace the roofline formula where they apply.
    max_fusion_size : int
        Largest number of ops the fusion pass puts in one kernel.
    max_fusion_operands : int
        Largest number of operands plus outputs of a fused kernel (XLA's GPU
        ``FusionFitsInBudget`` caps them at 96: a kernel's parameter space and register
        pressure).
    fusion_efficient_ops, fusion_slowdown_per_op : int, float
        A fused kernel of more than ``fusion_efficient_ops`` ops runs ``1 +
        fusion_slowdown_per_op * (ops - fusion_efficient_ops)`` times slower than the
        sum of its parts (register pressure lowers occupancy); see docs/simulator.md.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> r = simulate(prob, Plan())
    >>> r.valid and r.step_time >= prob.lower_bound
    True
    """

    def __init__(self, graph: Graph, cluster: Cluster, profile=None, max_fusion_size: int = 64,
                 max_fusion_operands: int = 96, fusion_efficient_ops: int = 16,
                 fusion_slowdown_per_op: float = 0.02):
        self.graph = graph.validate()
        self.cluster = cluster
        self.max_fusion_size = int(max_fusion_size)
        self.max_fusion_operands = int(max_fusion_operands)
        self.fusion_efficient_ops = int(fusion_efficient_ops)
        self.fusion_slowdown_per_op = float(fusion_slowdown_per_op)
        self.profile = profile  # kept for graphopt.exec.api.save_program_timing
        self.costs = op_costs(graph, cluster, profile)
        n, g = graph.num_nodes, graph
        self.num_nodes, self.num_devices = n, cluster.num_devices
        # Writable copies throughout: numba types read-only arrays apart from the engine's
        # own work arrays, and both must flow through the same variables there.
        self.pred_ptr, self.pred_idx = np.array(g.pred[0]), np.array(g.pred[1])
        self.succ_ptr, self.succ_idx, eids = np.array(g.succ[0]), np.array(g.succ[1]), g.succ[2]
        self.succ_bytes = g.edge_bytes[eids]
        self.bandwidth = np.array(cluster.bandwidth)
        self.latency = np.array(cluster.latency)
        with np.errstate(divide="ignore"):
            self.sec_per_byte = 1.0 / self.bandwidth  # the diagonal's bandwidth is inf: 0
        self.capacity = cluster.memory
        # Devices of one host slow each other: the kernel time a device's running kernel
        # takes grows by slope * (busy devices of its host - 1). All slopes 0 (every preset)
        # skip that code in the engine, which then gives bit for bit what it gave before.
        hosts = [d.host or f"\0{j}" for j, d in enumerate(cluster.devices)]
        self.host = np.unique(hosts, return_inverse=True)[1].astype(np.int64)
        size = np.bincount(self.host)[self.host]
        slowdown = np.array([d.shared_slowdown for d in cluster.devices])
        self.slope = np.where(size > 1, (slowdown - 1.0) / np.maximum(size - 1, 1), 0.0)
        self.shared = bool((self.slope > 0).any())
        self.host_work = _host_work(cluster)
        self.overlap_latency = bool(cluster.overlap_latency)
        self.persistent = np.array(g.persistent_bytes)
        self.coloc = np.array(g.coloc)
        self.out_bytes = np.array(g.out_bytes)
        self.temp_bytes = np.array(g.temp_bytes)
        self.alias = aliases(g)
        self.step_buffers = np.zeros(0)  # empty: the simulator's own transfer rule
        self._fusion_candidates()

    def _fusion_candidates(self) -> None:
        """What the fusion pass may do at each node (docs/simulator.md, "Fusion").

        ``cand_consumer[u]``: u's only consumer when the classes allow fusing u into it
        (else -1). ``fusion_flags[u]``: 1, u is cheap and has several consumers, all
        able to take it: it may be duplicated into them; 2, u has several consumers:
        they may merge as siblings; 4, u may be such a sibling; ``sibling_ptr``,
        ``sibling_idx``, ``sibling_bytes``: a CSR of the consumers of each node with flag 2
        that have flag 4, with the bytes of the edge. ``level``: longest path
        from a source, in edges. ``fusion_choice``: the nodes whose fusion priority
        changes anything. ``fusible``: every node fusion could put in a kernel with
        another (the lower bound counts their FLOP time only).
        """
        g, n = self.graph, self.num_nodes
        cls = np.array(OP_CLASSES)[self.costs.class_id]
        prod = np.isin(cls, list(FUSIBLE_PRODUCER))
        cons = np.isin(cls, list(FUSIBLE_CONSUMER))
        single = g.out_degree == 1
        only = np.full(n, -1, dtype=np.int64)
        only[single] = self.succ_idx[self.succ_ptr[:-1][single]]
        ok = single & prod
        ok[single] &= cons[only[single]]
        self.cand_consumer = np.where(ok, only, -1)
        self.single_edge_bytes = np.zeros(n)
        self.single_edge_bytes[single] = self.succ_bytes[self.succ_ptr[:-1][single]]
        many = g.out_degree >= 2
        src = np.repeat(np.arange(n), np.diff(self.succ_ptr))
        # every consumer of u can take it: count the consumers that cannot
        refuse = np.bincount(src[~cons[self.succ_idx]], minlength=n)
        cheap = np.isin(cls, list(DUPLICABLE)) & ~np.isin(g.op, list(EXPENSIVE))
        dup = many & cheap & (refuse == 0)
        sib_member = np.isin(cls, list(SIBLING))
        nsib = np.bincount(src[sib_member[self.succ_idx]], minlength=n)
        sib = many & (nsib >= 2)
        self.fusion_flags = (dup * 1 + sib * 2 + sib_member * 4).astype(np.int64)
        # the consumers that may merge as siblings, per node whose consumers may: what the
        # fusion pass walks there, in edge order, without the others
        keep = sib[src] & sib_member[self.succ_idx]
        self.sibling_ptr = np.concatenate([[0], np.cumsum(np.bincount(src[keep], minlength=n))])
        self.sibling_idx = self.succ_idx[keep]
        self.sibling_bytes = self.succ_bytes[keep]
        self.level = engine.levels(self.pred_ptr, self.pred_idx)
        self.fusion_choice = (self.cand_consumer >= 0) | dup | sib
        fusible = self.cand_consumer >= 0
        fusible[self.cand_consumer[fusible]] = True
        fusible |= dup
        fusible[self.succ_idx[dup[src]]] = True
        fusible[self.sibling_idx] = True
        self.fusible = fusible
        # a duplicated op turns its in-edges x out-edges into edges between kernels
        deg = g.in_degree.astype(np.int64) * g.out_degree.astype(np.int64)
        self.edge_capacity = int(len(self.succ_idx) + deg[dup].sum())

    def with_memory_fraction(self, fraction: float) -> Problem:
        """This problem with every device's memory set to what the compiler's defaults
        (one device, first ready first run, XLA's fusion) need for their persistent bytes
        (weights, optimizer state) plus ``fraction`` of the rest of their peak: below 1
        that plan no longer fits, and the order, the placement or the fusion must make
        room. Costs are shared, not recomputed.

        Raises
        ------
        PlanError
            ``fraction`` is not a positive finite number.

        Examples
        --------
        >>> from graphopt.hardware import load_cluster
        >>> from graphopt.ir.generate import mlp_training_graph
        >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
        >>> tight = prob.with_memory_fraction(0.9)
        >>> simulate(tight, Plan()).valid, simulate(prob, Plan()).valid
        (False, True)
        """
        if not (np.isfinite(fraction) and fraction > 0):
            raise PlanError(f"memory fraction {fraction}: expected a number > 0, e.g. 0.8")
        keep = float(self.persistent.sum())
        cap = keep + float(fraction) * (float(simulate(self, Plan()).peak_memory[0]) - keep)
        tight = copy.copy(self)
        tight.cluster = self.cluster.with_memory(max(cap, 1.0))
        tight.capacity = tight.cluster.memory
        return tight

    def with_wake_cost(self, cost: tuple[tuple[float, float], ...]) -> Problem:
        """This problem with every device's ``wake_cost`` set to ``cost``
        (:meth:`Cluster.with_wake_cost`; ``()``: waiting costs nothing). Costs are shared,
        not recomputed: they do not depend on it."""
        other = copy.copy(self)
        other.cluster = self.cluster.with_wake_cost(cost)
        other.host_work = _host_work(other.cluster)
        return other

    def with_op_times(self, time: np.ndarray) -> Problem:
        """This problem with ``time`` (N x D) as what each op takes alone on each device (a
        kernel of one op); the parts a fused kernel sums are unchanged. The engine reads
        costs from copies kept per problem (:attr:`_costs`), so changing
        ``problem.costs.time`` in place is not seen: this is the way to change them.

        Raises
        ------
        PlanError
            ``time`` is not N x D finite seconds >= 0.
        """
        time = np.array(time, dtype=np.float64)
        if time.shape != self.costs.time.shape or not (np.isfinite(time) & (time >= 0)).all():
            raise PlanError(f"op times: expected {self.costs.time.shape} finite seconds >= 0, "
                            f"got shape {time.shape}")
        other = copy.copy(self)
        other.costs = replace(self.costs, time=time)
        for cached in ("_costs", "lower_bound"):  # copied from self, computed from its times
            other.__dict__.pop(cached, None)
        return other

    def with_step_buffers(self, send_copies: np.ndarray | None = None) -> Problem:
        """This problem priced for a runtime that holds every transfer's tensors for the
        whole step: a received tensor from the step's start (its receive is posted
        then, into its buffer) and a sent one from its kernel's start to the step's end
        (its send completes only when the step waits for it), with ``send_copies[i]``
        bytes (N,; default none) that sending node ``i``'s output copies on its device,
        per destination (a runtime that packs a strided tensor, or several, into one
        message). That is how :mod:`graphopt.exec`'s CPU workers run (docs/execution.md,
        "Peak memory, measured"); the simulator's own rule frees a transfer's tensors when
        the transfer and the last reader are done. Only the peak memory changes."""
        copies = np.zeros(self.num_nodes) if send_copies is None else \
            np.asarray(send_copies, dtype=np.float64)
        if copies.shape != (self.num_nodes,) or not (np.isfinite(copies) & (copies >= 0)).all():
            raise PlanError(f"send_copies: expected {self.num_nodes} finite bytes >= 0, got "
                            f"shape {copies.shape}")
        other = copy.copy(self)
        other.step_buffers = copies
        return other

    def __repr__(self) -> str:
        return (f"Problem(graph={self.graph.name!r}, nodes={self.num_nodes}, "
                f"cluster={self.cluster.name!r})")

    def transfer_time(self, nbytes, src=None, dst=None) -> np.ndarray:
        """Seconds to send ``nbytes`` from device ``src`` to device ``dst``: ``latency +
        bytes / bandwidth`` over the directed link (docs/design.md §3), 0 where ``src == dst``
        (a cluster's diagonal has no latency and infinite bandwidth). Without ``src`` and
        ``dst``: over the mean link, latency and seconds per byte averaged over ordered
        pairs of distinct devices, the one uniform network that HEFT's ``c̄`` and Baechi's
        ``a·bytes + b`` assume (0 on one device).

        ``nbytes``, ``src`` and ``dst`` broadcast against each other. Queueing on a busy
        link is not modelled here; the simulator does that. The numba engine writes the
        same formula inline, since it cannot call a Python method.

        >>> from graphopt.hardware import load_cluster
        >>> from graphopt.ir.generate import mlp_training_graph
        >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
        >>> t = prob.transfer_time(np.array([0.0, 2.5e9]), 0, np.array([[0], [1]]))
        >>> (t * 1e6).round(3).tolist()      # µs: 5 µs latency, 25 GB/s
        [[0.0, 0.0], [5.0, 100005.0]]
        >>> bool(prob.transfer_time(2.5e9) == t[1, 1])
        True
        """
        if src is None and dst is None:
            return self._mean_link[0] + np.asarray(nbytes, dtype=np.float64) * self._mean_link[1]
        return self.latency[src, dst] + np.asarray(nbytes, dtype=np.float64) * self.sec_per_byte[src, dst]

    @cached_property
    def _mean_link(self) -> tuple[float, float]:
        """(latency, seconds per byte) averaged over ordered pairs of distinct devices."""
        if self.num_devices == 1:
            return 0.0, 0.0
        off = ~np.eye(self.num_devices, dtype=bool)
        return float(self.latency[off].mean()), float(self.sec_per_byte[off].mean())

    @cached_property
    def lower_bound(self) -> float:
        """``max(critical path, total work / D)`` with each op on its fastest device and no
        communication (docs/design.md §7). An op that fusion could absorb counts only its FLOP
        time, since a fused kernel saves launches and memory traffic: so the bound holds
        for every plan, fused or not."""
        c = self.costs
        t = np.where(self.fusible, c.flop_time.min(axis=1), c.time.min(axis=1))
        cp = engine.critical_path(self.pred_ptr, self.pred_idx, t)
        return float(max(cp, t.sum() / self.num_devices))

    @cached_property
    def _zeros(self) -> np.ndarray:
        """N zeros the engine reads where a plan has no priority or fusion (never written)."""
        return np.zeros(self.num_nodes)

    @cached_property
    def _zeros_i(self) -> np.ndarray:
        """N zeros, as a placement on device 0 (never written)."""
        return np.zeros(self.num_nodes, np.int64)

    @cached_property
    def _costs(self) -> tuple:
        """The op costs the engine reads (time, FLOP time, memory time, launch), N x D and
        then D x N: it reads them by device where a plan keeps runs of ops on one device
        (several ops to a cache line), else by op."""
        c = self.costs
        by_op = tuple(np.ascontiguousarray(a) for a in (c.time, c.flop_time, c.mem_time, c.launch))
        return by_op + tuple(np.ascontiguousarray(a.T) for a in by_op)

    def arrays(self) -> tuple:
        """The arrays ``engine.evaluate`` and ``engine.evaluate_batch`` take after the
        plan's own, in order."""
        c = self.costs
        return (self.pred_ptr, self.pred_idx, self.succ_ptr, self.succ_idx, self.succ_bytes,
                self._costs, c.sec_per_byte, c.class_id,
                self.out_bytes, self.temp_bytes, self.persistent, self.coloc, self.capacity,
                self.bandwidth, self.latency, self.cand_consumer, self.single_edge_bytes,
                self.fusion_flags, self.level, self.sibling_ptr, self.sibling_idx,
                self.sibling_bytes, self.max_fusion_size, self.max_fusion_operands,
                self.fusion_efficient_ops, self.fusion_slowdown_per_op, self.shared, self.host,
                self.slope, self.host_work, self.overlap_latency, self.alias, self.step_buffers,
                self.edge_capacity)


def aliases(g: Graph) -> np.ndarray:
    """The input each node's output is a view of, or -1: a node of the ``view`` class
    that writes no bytes of its own (the PyTorch frontend's ATen views: ``view``,
    ``permute_view``, ``getitem``, ...; frontends where a reshape copies give it bytes),
    and is no state; its input carrying the most bytes. The simulator keeps that input's
    memory until the view's readers are done (docs/simulator.md, "Memory")."""
    ptr, idx, eid = g.pred
    out = np.full(g.num_nodes, -1, np.int64)
    views = ((class_ids(g.op) == OP_CLASSES.index("view")) & (g.out_bytes == 0)
             & (g.persistent_bytes == 0) & (ptr[1:] > ptr[:-1]))
    for i in np.flatnonzero(views):
        lo, hi = ptr[i], ptr[i + 1]
        out[i] = idx[lo + int(np.argmax(g.edge_bytes[eid[lo:hi]]))]
    return out


def _host_work(cluster: Cluster) -> np.ndarray:
    """The engine's ``hostw``: host seconds each device spends beyond its kernels, on each
    transfer it sends or receives, per byte (row 0) and per message (row 1); and on a
    kernel that starts after the device sat idle (``Device.wake_cost``: K extras in rows
    2 to K + 1, their idle times in rows K + 2 to 2K + 1; a shorter list repeats its last
    pair, none is 0 after any idle)."""
    k = max((len(d.wake_cost) for d in cluster.devices), default=0)
    pairs = np.array([[*d.wake_cost, *[d.wake_cost[-1]] * (k - len(d.wake_cost))]
                      if d.wake_cost else [(1.0, 0.0)] * k for d in cluster.devices]
                     ).reshape(len(cluster.devices), k, 2)
    return np.vstack([[1.0 / d.transfer_cpu_bw for d in cluster.devices],
                      [d.transfer_cpu_overhead for d in cluster.devices],
                      pairs[:, :, 1].T, pairs[:, :, 0].T])


@dataclass
class Timeline:
    """Every kernel and transfer of a simulated plan, with start and end in seconds.

    Kernels are named by their root node; ``group[i]`` is the root of node i's kernel.
    A duplicated op (``duplicated[i]``) has no kernel of its own: a copy of it runs in the
    kernel of each of its consumers, and ``group[i]`` names its first consumer's.
    """

    kernel: np.ndarray
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    group: np.ndarray
    transfer_kernel: np.ndarray
    transfer_src: np.ndarray
    transfer_dst: np.ndarray
    transfer_start: np.ndarray
    transfer_end: np.ndarray
    transfer_bytes: np.ndarray
    duplicated: np.ndarray


@dataclass
class SimResult:
    """What a plan costs.

    ``peak_memory`` and ``busy`` are per device (bytes, seconds); ``reason`` is ``""``
    when ``valid``, else e.g. ``"OOM on gpu:1 (17.2 GiB > 16.0 GiB)"``.
    """

    step_time: float
    valid: bool
    reason: str
    peak_memory: np.ndarray
    busy: np.ndarray
    bytes_moved: float
    num_kernels: int
    lower_bound: float
    timeline: Timeline | None = None

    def to_dict(self) -> dict:
        return {"step_time": self.step_time, "valid": self.valid, "reason": self.reason,
                "peak_memory": self.peak_memory.tolist(), "busy": self.busy.tolist(),
                "bytes_moved": self.bytes_moved, "num_kernels": self.num_kernels,
                "lower_bound": self.lower_bound,
                "bound_ratio": self.step_time / self.lower_bound if self.lower_bound > 0 else None}


@dataclass
class BatchResult:
    """Results of :func:`simulate_batch`: ``step_time`` (B,), ``valid`` (B,),
    ``peak_memory`` (B, D), ``reason_code`` (B,: 0 valid, 1 out of memory, 2 split
    colocation group) and ``reason_arg`` (B,: the device or group at fault)."""

    step_time: np.ndarray
    valid: np.ndarray
    peak_memory: np.ndarray
    reason_code: np.ndarray
    reason_arg: np.ndarray


def _plan_arrays(problem: Problem, plan: Plan):
    plan.check(problem.num_nodes, problem.num_devices)
    # the engine reads these and writes none of them: one array of zeros per problem
    # serves every plan without a priority or fusion
    zeros = problem._zeros
    place = problem._zeros_i if plan.placement is None else np.array(plan.placement, np.int64)
    fifo = plan.priority is None
    prio = zeros if fifo else np.array(plan.priority, dtype=np.float64)
    mode = 1 if plan.fusion is None else 2
    fprio = zeros if plan.fusion is None else np.array(plan.fusion, np.float64)
    if mode == 2 and not (fprio > 0).any():
        mode = 0
    return place, prio, fifo, fprio, mode


def _reason(problem: Problem, code: int, arg: int, peak: np.ndarray) -> str:
    if code == _OOM:
        dev = problem.cluster.devices[arg]
        return f"OOM on {dev.name} ({format_bytes(peak[arg])} > {format_bytes(dev.memory)})"
    if code == _COLOC:
        members = np.flatnonzero(problem.coloc == arg)
        names = ", ".join(str(problem.graph.names[i]) for i in members[:3])
        return f"colocation group {arg} ({names}{', ...' if len(members) > 3 else ''}) is split"
    return ""


def simulate(problem: Problem, plan: Plan | None = None, timeline: bool = False) -> SimResult:
    """Simulate ``plan`` on ``problem`` (docs/design.md "Simulator semantics").

    Pure and deterministic, and safe to call from several threads at once: each thread
    simulates in work arrays of its own, and the result shares no array with them. With
    ``timeline=True`` the result holds every kernel and transfer with its start and end.

    Raises
    ------
    PlanError
        The plan's arrays do not match the graph or name a device the cluster lacks.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> one = simulate(prob, Plan(placement=np.zeros(prob.num_nodes, int)))
    >>> one.bytes_moved
    0.0
    """
    plan = plan or Plan()
    place, prio, fifo, fprio, mode = _plan_arrays(problem, plan)
    res, group, state, nk, code, arg = engine.evaluate(place, prio, fifo, fprio, mode,
                                                       *problem.arrays())
    (step, peak, busy, moved, start, end, ntr, tk, tdst, ts, te, tb) = res
    tl = None
    if timeline:
        ks = np.flatnonzero(group == np.arange(problem.num_nodes))
        tl = Timeline(kernel=ks, device=place[ks], start=start[ks], end=end[ks],
                      group=group.astype(np.int64),  # the engine's is int32
                      transfer_kernel=tk.copy(), transfer_src=place[tk], transfer_dst=tdst.copy(),
                      transfer_start=ts.copy(), transfer_end=te.copy(), transfer_bytes=tb.copy(),
                      duplicated=(state & 1).astype(bool))
    return SimResult(step_time=float(step), valid=code == _OK,
                     reason=_reason(problem, code, arg, peak), peak_memory=peak, busy=busy,
                     bytes_moved=float(moved), num_kernels=int(nk),
                     lower_bound=problem.lower_bound, timeline=tl)


def simulate_batch(problem: Problem, placements: np.ndarray, priorities: np.ndarray | None = None,
                   fusion: np.ndarray | None = None) -> BatchResult:
    """Simulate B plans at once, in parallel across cores (numba ``prange``).

    Parameters
    ----------
    placements : int array (B, N)
    priorities : float array (B, N), optional
        Default: first ready, first run.
    fusion : float array (B, N), optional
        Default: the compiler's greedy fusion for every plan.

    Returns
    -------
    BatchResult
        Equal, plan by plan, to :func:`simulate` on ``Plan(placements[b], ...)``.
    """
    n, d = problem.num_nodes, problem.num_devices
    raw = np.asarray(placements)
    places = np.ascontiguousarray(raw, dtype=np.int64)
    if raw.dtype.kind == "f" and not (raw == places).all():
        raise PlanError("placements must be whole device indices; got fractional values")
    if places.ndim != 2 or places.shape[1] != n:
        raise PlanError(f"placements must have shape (B, {n}), got {places.shape}")
    b = places.shape[0]
    if b and n and (places.min() < 0 or places.max() >= d):
        row, col = np.argwhere((places < 0) | (places >= d))[0]
        raise PlanError(f"plan {row} places node {col} on device {places[row, col]}; the cluster "
                        f"has devices 0..{d - 1}")

    def rows(a, name):
        a = np.ascontiguousarray(a, dtype=np.float64)
        if a.shape != (b, n):
            raise PlanError(f"{name} must have shape ({b}, {n}), got {a.shape}")
        if not np.isfinite(a).all():
            raise PlanError(f"{name} contains a non-finite value")
        return a

    fifo = priorities is None
    prios = np.zeros((b, n)) if fifo else rows(priorities, "priorities")
    mode = 1 if fusion is None else 2
    fprios = np.zeros((b, n)) if fusion is None else rows(fusion, "fusion")
    with numba.parallel_chunksize(1):
        step, peak, code, arg = engine.evaluate_batch(places, prios, fifo, fprios, mode,
                                                        *problem.arrays(), numba.get_num_threads())
    return BatchResult(step_time=step, valid=code == _OK, peak_memory=peak, reason_code=code,
                       reason_arg=arg)
