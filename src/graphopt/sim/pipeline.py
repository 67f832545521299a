"""The pipelined throughput of a partition: each device a stage of a pipeline over a
stream of inputs (multi-chip modules, Xie et al. 2022).

A partition places every op of one input's graph on a device (a chip). Inputs stream
through: while chip 1 works on input *i*, chip 0 already works on input *i + 1*. In the
steady state one input leaves every ``interval`` seconds, the time the busiest resource
needs per input:

- a chip's **compute**: the sum of its ops' times (DESIGN.md §2, fusion off, as
  :class:`~graphopt.sim.Problem` prices each op on each device);
- a directed **link**'s occupancy: every output an op sends to another chip crosses the
  link once per destination chip, carrying the largest of its edges to that chip, for
  ``latency + bytes / bandwidth`` (DESIGN.md §3: one transfer at a time per link).

**Weights are stationary** (:func:`stationary`): a weight is loaded once into the SRAM
of every chip that reads it and never crosses a link per input, as an MCM compiler
lays weights out before the stream starts (a weight read on two chips, like BERT's tied
embedding, is held twice).

``stage[d] = max(compute[d], occupancy of d's busiest outgoing link)`` — chips compute
while their links send — and ``interval = max(stage)``; ``throughput = 1 / interval``
inputs per second. This is exactly the event simulator's steady state on a stream of
independent copies of the graph with the same placement (every resource of the
pipeline is busy at its bottleneck's rate once the pipeline is full):
:func:`simulated_interval` measures it that way, and ``tests/sim/test_pipeline.py``
holds the two together.

What it does not model: the fill and drain of the pipeline (the latency of one input,
which :func:`graphopt.sim.simulate` gives), memory (see
:mod:`graphopt.optim.partition` for the SRAM constraint), and contention between
transfers that share a physical hop of a multi-hop route (the cluster's link between
two chips is one directed link, as everywhere in the simulator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphopt.ir import Graph
from graphopt.sim.plan import Plan
from graphopt.sim.problem import Problem, simulate

__all__ = ["PipelineCost", "pipeline_cost", "simulated_interval", "stationary", "stationary_bytes",
           "stream_graph"]


def stationary(graph: Graph) -> np.ndarray:
    """Which ops are stationary weights (bool (N,)): an op without inputs that holds
    persistent bytes, and an op without FLOPs whose every input is stationary (a
    transpose or reshape of a weight, as tied embeddings read theirs). ``O(N + E)``.

    >>> from graphopt.ir import GraphBuilder
    >>> b = GraphBuilder("tied")
    >>> w = b.add_node("w", "parameter", out_bytes=8, persistent_bytes=8)
    >>> t = b.add_node("t", "transpose", inputs=[w], out_bytes=8)
    >>> x = b.add_node("x", "matmul", inputs=[t], flops=16, out_bytes=8)
    >>> stationary(b.build()).tolist()
    [True, True, False]
    """
    n = graph.num_nodes
    out = (graph.in_degree == 0) & (graph.persistent_bytes > 0)
    ptr, idx = graph.pred[0], graph.pred[1]
    for i in np.flatnonzero((graph.in_degree > 0) & (graph.flops == 0)):
        out[i] = bool(out[idx[ptr[i]:ptr[i + 1]]].all())
    return out if n else np.zeros(0, dtype=bool)


def stationary_bytes(graph: Graph) -> np.ndarray:
    """SRAM bytes a stationary op takes on each chip that reads it, 0 for every other op
    (float64 (N,)): a weight's persistent bytes; for a view of weights, the largest of
    its output and the weights it views (a view may own no bytes of its own)."""
    still = stationary(graph)
    out = np.where(still, np.maximum(graph.persistent_bytes, graph.out_bytes), 0.0)
    ptr, idx = graph.pred[0], graph.pred[1]
    for i in np.flatnonzero(still & (graph.in_degree > 0)):
        out[i] = max(out[i], out[idx[ptr[i]:ptr[i + 1]]].max())
    return out


@dataclass
class PipelineCost:
    """The pipelined cost of B partitions.

    Attributes
    ----------
    interval : float64 (B,)
        Seconds between two inputs leaving the pipeline in the steady state.
    throughput : float64 (B,)
        Inputs per second, ``1 / interval``.
    compute : float64 (B, D)
        Seconds of compute per input on each chip.
    link : float64 (B, D, D)
        Seconds each directed link ``a → b`` is busy per input.
    stage : float64 (B, D)
        ``max(compute, busiest outgoing link)`` per chip.
    """

    interval: np.ndarray
    throughput: np.ndarray
    compute: np.ndarray
    link: np.ndarray
    stage: np.ndarray

    @property
    def bottleneck(self) -> np.ndarray:
        """The chip whose stage sets the interval, per partition (int64 (B,))."""
        return self.stage.argmax(axis=1)


def pipeline_cost(problem: Problem, placements: np.ndarray) -> PipelineCost:
    """The steady-state pipelined cost of each row of ``placements`` (module docstring).

    Parameters
    ----------
    problem : Problem
    placements : int array (B, N) or (N,)
        Chip of every op, one partition per row.

    Returns
    -------
    PipelineCost

    Notes
    -----
    ``O(B·(N·D + E))`` time and ``O(B·N·D)`` memory, in numpy.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(4, 2), load_cluster("mcm-ring4"))
    >>> one = pipeline_cost(prob, np.zeros(prob.num_nodes, int))
    >>> bool(np.isclose(one.interval[0], prob.costs.time[:, 0].sum()))
    True
    """
    place = np.atleast_2d(np.asarray(placements, dtype=np.int64))
    b, n = place.shape
    d = problem.num_devices
    if n != problem.num_nodes:
        raise ValueError(f"placements have {n} columns; the graph has {problem.num_nodes} ops")
    rows = np.repeat(np.arange(b), n)
    op_time = problem.costs.time[np.tile(np.arange(n), b), place.ravel()]
    compute = np.bincount(rows * d + place.ravel(), op_time, b * d).reshape(b, d)

    g = problem.graph
    moving = ~stationary(g)[g.src]
    src, dst, nbytes = g.src[moving], g.dst[moving], g.edge_bytes[moving]
    ps, pd = place[:, src], place[:, dst]  # (B, E)
    cross = ps != pd
    # once per producer and destination chip, its largest edge there (the engine's rule)
    sent = np.zeros((b, n, d))
    bi, ei = np.nonzero(cross)
    np.maximum.at(sent, (bi, src[ei], pd[bi, ei]), nbytes[ei])
    bb, u, to = np.nonzero(sent)
    frm = place[bb, u]
    busy = problem.latency[frm, to] + sent[bb, u, to] * problem.sec_per_byte[frm, to]
    link = np.bincount((bb * d + frm) * d + to, busy, b * d * d).reshape(b, d, d)
    stage = np.maximum(compute, link.max(axis=2))
    interval = stage.max(axis=1)
    with np.errstate(divide="ignore"):
        throughput = 1.0 / interval
    return PipelineCost(interval, throughput, compute, link, stage)


def stream_graph(graph: Graph, copies: int) -> Graph:
    """``copies`` independent copies of ``graph`` in one graph, copy after copy (node
    ``i`` of copy ``k`` at index ``k·N + i``): a stream of inputs for the event simulator.
    Edges out of :func:`stationary` weights are left out: a weight already sits on every
    chip that reads it.

    >>> from graphopt.ir.generate import layered_graph
    >>> g = layered_graph(3, 2)
    >>> s = stream_graph(g, 3)
    >>> s.num_nodes == 3 * g.num_nodes
    True
    """
    n = graph.num_nodes
    keep = ~stationary(graph)[graph.src]
    src, dst, nbytes = graph.src[keep], graph.dst[keep], graph.edge_bytes[keep]
    per_node = ("op", "dtype", "shape", "flops", "bytes_read", "bytes_written", "out_bytes",
                "persistent_bytes", "temp_bytes", "module")
    fields = {k: np.concatenate([getattr(graph, k)] * copies) for k in per_node}
    names = np.concatenate([np.char.add(f"s{k}/", graph.names.astype(str)) for k in range(copies)])
    coloc = np.concatenate([np.where(graph.coloc >= 0, graph.coloc + k * (graph.coloc.max() + 1),
                                     -1) for k in range(copies)])
    return Graph(name=f"{graph.name}x{copies}", names=names, coloc=coloc,
                 src=np.concatenate([src + k * n for k in range(copies)]),
                 dst=np.concatenate([dst + k * n for k in range(copies)]),
                 edge_bytes=np.concatenate([nbytes] * copies),
                 meta=dict(graph.meta), **fields)


def simulated_interval(problem: Problem, placement: np.ndarray,
                       copies: tuple[int, int] = (4, 12)) -> float:
    """The steady-state interval of ``placement`` as the event simulator measures it:
    the step time of ``copies[1]`` inputs streamed through the partition, less that of
    ``copies[0]``, per extra input (fill and drain cancel). Fusion off, earlier inputs
    before later ones, memory unbounded (every copy's weights would count again).

    Raises
    ------
    ValueError
        ``copies`` not two increasing counts.
    """
    lo, hi = copies
    if not 1 <= lo < hi:
        raise ValueError(f"copies must be two increasing counts >= 1, got {copies}")
    placement = np.asarray(placement, dtype=np.int64)
    cluster = problem.cluster.with_memory(float(2**60))
    times = []
    for k in (lo, hi):
        stream = Problem(stream_graph(problem.graph, k), cluster)
        # earlier inputs first: with every input ready at once, first-ready-first-run
        # would work breadth-first across inputs and hold each one behind the others
        plan = Plan(placement=np.tile(placement, k), fusion=np.zeros(stream.num_nodes),
                    priority=np.repeat(np.arange(k, 0, -1.0), problem.num_nodes))
        times.append(simulate(stream, plan).step_time)
    return (times[1] - times[0]) / (hi - lo)
