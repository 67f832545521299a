"""The pipelined throughput of a partition: each device a stage of a pipeline over a
stream of inputs (multi-chip modules, Xie et al. 2022).

A partition places every op of one input's graph on a device (a chip). Inputs stream
through: while chip 1 works on input *i*, chip 0 already works on input *i + 1*. In the
steady state one input leaves every ``interval`` seconds, the time the busiest resource
needs per input:

- a chip's **compute**: the sum of its ops' times (docs/design.md §2, fusion off, as
  :class:`~graphopt.sim.Problem` prices each op on each device);
- a directed **link**'s occupancy: every output an op sends to another chip crosses the
  link once per destination chip, carrying the largest of its edges to that chip, for
  ``latency + bytes / bandwidth`` (docs/design.md §3: one transfer at a time per link).

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

**Training pipelines** (:func:`split_cost`, the pipeline task): a training step's layers
cut into contiguous stages, ``M`` microbatches streamed through them under a schedule
(GPipe, 1F1B, or interleaved 1F1B, where each of the ``K`` ranks runs ``V`` of ``K·V``
chunks). A stage's time per microbatch is its ops' compute plus the transfers
it sends and receives (:func:`training_stage_time`: the same per-input cost as above,
without the overlap); a step is the fill and drain through every stage, ``M - 1`` more
microbatches on the slowest, and its optimizer update, and no less than the stages'
whole work over the cores they share (:func:`training_step_time`); a stage's memory is its weights,
gradients and optimizer state plus the activations of the microbatches it holds at once
(:func:`in_flight`), its largest backward buffer, and on the last stage the outputs of
every microbatch, which ``torch.distributed.pipelining`` keeps to return them.

What the inference model does not model: the fill and drain of the pipeline (the latency of one input,
which :func:`graphopt.sim.simulate` gives), memory (see
:mod:`graphopt.optim.partition` for the SRAM constraint), and contention between
transfers that share a physical hop of a multi-hop route (the cluster's link between
two chips is one directed link, as everywhere in the simulator).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graphopt._files import atomic_write, read_json
from graphopt.errors import PlanError

from graphopt.ir import Graph
from graphopt.ir.ops import op_class
from graphopt.sim.plan import Plan
from graphopt.sim.problem import Problem, simulate

__all__ = ["PIPELINE_FORMAT", "PIPELINE_VERSION", "SCHEDULES", "LayerCosts", "PipelineCost",
           "PipelinePlan", "SplitCost", "boundary_time", "check_schedule", "in_flight",
           "layer_costs", "op_layers", "pipeline_cost", "simulated_interval", "split_cost",
           "stationary", "stationary_bytes", "stream_graph", "training_stage_time",
           "training_step_time"]


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


# -- training pipelines: microbatches, a schedule, memory per stage ------------------------

#: Pipeline schedules the training model prices (``torch.distributed.pipelining``'s
#: ``ScheduleGPipe``, ``Schedule1F1B`` and ``ScheduleInterleaved1F1B``).
SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check_counts(schedule: str, stages: int, microbatches: int, virtual: int) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"--schedule {schedule!r}: give one of {', '.join(SCHEDULES)}")
    if stages < 1 or microbatches < 1:
        raise ValueError(f"stages and microbatches must be >= 1, got {stages} and {microbatches}")
    if (schedule == "interleaved") != (virtual > 1):
        raise ValueError(f"--virtual-stages {virtual}: interleaved runs 2 or more chunks a "
                         f"rank, {schedule} one")


def check_schedule(schedule: str, stages: int, microbatches: int, virtual: int = 1) -> None:
    """Refuse a schedule that cannot run ``microbatches`` through ``stages`` ranks of
    ``virtual`` chunks each, as ``torch.distributed.pipelining`` would (or as the model
    cannot price).

    1F1B needs ``M >= K``. Interleaved needs ``V >= 2`` chunks a rank, ``K >= 2`` ranks,
    ``M >= K`` (with fewer, torch's schedule waits on empty slots the model does not
    price) and ``M`` a multiple of its rounds ``max(1, M // K)`` (torch's own rule);
    the others run one chunk a rank.

    Raises
    ------
    ValueError
        One line naming the option to change.
    """
    _check_counts(schedule, stages, microbatches, virtual)
    if schedule != "gpipe" and microbatches < stages:
        raise ValueError(f"--schedule {schedule} needs at least as many microbatches as stages "
                         f"({microbatches} < {stages}): give --microbatches {stages} or gpipe")
    if schedule == "interleaved":
        rounds = max(1, microbatches // stages)
        if stages < 2 or microbatches % rounds:
            raise ValueError(f"--schedule interleaved needs 2 or more stages and microbatches a "
                             f"multiple of microbatches // stages (torch's rounds), got "
                             f"--microbatches {microbatches} on {stages} stages")


def in_flight(schedule: str, stages: int, microbatches: int, virtual: int = 1) -> np.ndarray:
    """Chunk activations each rank holds at once (int64 (K,)): microbatches of its one
    stage, or with interleaving, (chunk, microbatch) pairs of its ``V`` chunks.

    GPipe runs every forward before any backward: each stage keeps all ``M``. 1F1B starts
    a backward as soon as the last stage can: stage ``s`` (from 0) keeps at most
    ``K - s`` (Narayanan et al. 2019, PipeDream-Flush). Interleaved 1F1B, as torch's
    ``ScheduleInterleaved1F1B`` orders it: rank ``r`` runs ``w_r = (V - 1) · m + 2 (K -
    1 - r)`` chunk forwards (``m = M / max(1, M // K)`` microbatches a round, at most
    ``M · V``) before its first backward, then one forward more before it: it holds
    ``w_r + 1``. With ``M`` a multiple of ``K`` (``m = K``) rank 0 holds ``V·K + K - 1``
    chunks, ``(1 + (K - 1) / (K·V)) · K`` microbatches' worth of its layers (Narayanan
    et al. 2021), or all ``M·V`` where that is fewer.

    >>> in_flight("1f1b", 4, 8).tolist(), in_flight("gpipe", 4, 8).tolist()
    ([4, 3, 2, 1], [8, 8, 8, 8])
    >>> in_flight("interleaved", 4, 8, virtual=2).tolist()
    [11, 9, 7, 5]

    Raises
    ------
    ValueError
        An unknown schedule, fewer than one stage or microbatch, or a chunk count the
        schedule does not run.
    """
    _check_counts(schedule, stages, microbatches, virtual)
    ranks = np.arange(stages, dtype=np.int64)
    if schedule == "gpipe":
        return np.full(stages, microbatches, dtype=np.int64)
    if schedule == "1f1b":
        return np.minimum(microbatches, stages - ranks)
    per_round = microbatches // max(1, microbatches // stages)
    warmup = (virtual - 1) * per_round + 2 * (stages - 1 - ranks)
    return np.minimum(warmup + 1, microbatches * virtual)


def training_stage_time(cost: PipelineCost) -> np.ndarray:
    """Seconds each stage is busy per microbatch of a training pipeline (float64 (B, D)):
    its compute (forward and backward) plus every transfer it sends or receives.

    In the pipelined inference of :func:`pipeline_cost` a chip computes while its links
    send; a training stage of ``torch.distributed.pipelining`` on CPU processes does not
    (gloo's sends and receives run on the stage's own thread between its computations),
    so transfers add to the stage instead of overlapping it.
    """
    return cost.compute + cost.link.sum(axis=2) + cost.link.sum(axis=1)


def training_step_time(stage_time: np.ndarray, update: np.ndarray, microbatches: int,
                       cores: int | None = None, virtual: int = 1) -> np.ndarray:
    """Seconds of one training step of ``M`` microbatches through ``K`` stages
    (float64, the leading shape of ``stage_time``).

    The first microbatch fills the pipeline through every stage and the last drains it
    (``sum_s t_s``); in between the slowest stage runs the other ``M - 1`` microbatches
    back to back, then applies its optimizer update: ``step = sum_s t_s + max_s((M - 1)
    · t_s + u_s)``. With equal stages this is the bubble formula ``(M + K - 1) · t``;
    with unequal ones it does not charge every slot of the fill and drain at the
    slowest stage's pace (GPT-2's head on the last of two stages: the first stage's few
    blocks delay it once, not ``K - 1`` times). Both schedules fill and drain alike.

    **Interleaved 1F1B** (``virtual = V > 1``): rank ``r`` runs ``V`` chunks, ``t_r``
    their sum. A microbatch is ``V`` chunk-jobs on every rank, so the step is the
    flow shop of ``M·V`` chunk-sized jobs: the fill and drain in chunk slots
    (``sum_r t_r / V``), and the slowest rank's other ``M·V - 1`` jobs: ``step = sum_r
    t_r / V + max_r((M - 1/V) · t_r + u_r)``. With equal chunks ``τ = t / V``:
    ``(M·V + K - 1) · τ``, the bubble ``(K - 1) · t / V``, a ``V``-th of GPipe's and
    1F1B's (Narayanan et al. 2021, §2.2). What it costs is in ``t_r``: a microbatch
    crosses ``K·V - 1`` cuts instead of ``K - 1``, each charged to both of its ranks,
    and the runtime's per-action overhead is paid per chunk.

    Against an event-by-event run of torch's order of operations
    (``tests/sim/test_pipeline_training.py``), with forward and backward apart: exact
    for equal chunks at any ``M >= K``. Approximate for unequal chunks: chunk ``v`` of
    every rank runs in a group of microbatches, and a rank whose chunks differ waits
    on its neighbours' groups; on random chunk times it is within 5% on average, from
    about 20% under to 13% over, and under by 12% (median) where the ranks' totals are
    equal but their chunks are not. Fewer microbatches than ranks leave slots empty
    that it does not price (refused, :func:`check_schedule`).

    ``cores``: the stages are processes sharing that many cores (CPU processes on one
    host), so a step also takes at least their whole work over the cores,
    ``sum_s (M · t_s + u_s) / cores``; None gives each stage its own.

    Parameters
    ----------
    stage_time : float64 (..., K)
        Seconds per microbatch on each stage (:func:`training_stage_time`).
    update : float64 (..., K)
        Seconds of each stage's optimizer update, once per step.
    microbatches : int
    cores : int, optional
    virtual : int
        Chunks per rank ``V`` (``stage_time`` then per rank, its chunks' sum).

    >>> float(training_step_time(np.array([1.0, 2.0]), np.array([0.0, 0.5]), 3))
    7.5
    >>> float(training_step_time(np.array([1.0, 2.0]), np.array([0.0, 0.5]), 3, cores=1))
    9.5
    >>> float(training_step_time(np.array([2.0, 2.0]), np.zeros(2), 4, virtual=2))
    9.0
    """
    t = np.asarray(stage_time, dtype=np.float64)
    u = np.asarray(update, dtype=np.float64)
    step = t.sum(axis=-1) / virtual + ((microbatches - 1 / virtual) * t + u).max(axis=-1)
    if cores is not None:
        step = np.maximum(step, (microbatches * t + u).sum(axis=-1) / cores)
    return step


@dataclass(frozen=True)
class LayerCosts:
    """What each layer of a training step costs per microbatch, for splitting it into
    contiguous stages.

    Attributes
    ----------
    time : float64 (L, D)
        Seconds of the layer's forward and backward ops on each device.
    update : float64 (L, D)
        Seconds of its optimizer update ops on each device (once per step).
    weights, grads, state, activations : float64 (L,)
        Bytes of its parameters and buffers, of their gradients, of its optimizer state,
        and of the forward outputs it keeps for the backward per microbatch.
    boundary : float64 (L - 1,)
        Bytes crossing the cut after layer ``l`` per microbatch, both ways (activations
        forward, their gradients back): a tensor is charged at every cut between its
        producer and its farthest consumer, as a pipeline passes it stage to stage.
    layer : int64 (N,)
        The layer of every op of the graph.
    workspace : float64 (L,)
        The largest output of one of the layer's backward ops: a gradient made whole
        before it is added to the one accumulated over microbatches (an embedding's
        dense gradient is the size of its table). A stage holds its largest at once.
    output : float
        Bytes of the model's output per microbatch: the last stage keeps every
        microbatch's (``torch.distributed.pipelining`` returns them from ``step``).
    forward : bool (N,), optional
        Which ops are the forward pass (the graph the chiplet policy of the ``mcm``
        split reads); None: every op.
    """

    time: np.ndarray
    update: np.ndarray
    weights: np.ndarray
    grads: np.ndarray
    state: np.ndarray
    activations: np.ndarray
    boundary: np.ndarray
    layer: np.ndarray
    workspace: np.ndarray | None = None
    output: float = 0.0
    forward: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.workspace is None:
            object.__setattr__(self, "workspace", np.zeros(len(self.weights)))

    @property
    def num_layers(self) -> int:
        """Layers ``L``."""
        return len(self.weights)


_UPDATE_OPS = ("sgd_update", "adam_update")


def op_layers(graph: Graph, blocks: tuple[str, ...] | list[str] | None = None) -> np.ndarray:
    """Layer of every op (int64 (N,)): the index of the block whose module path holds the
    op (``blocks``: qualified module names, e.g. ``"model.layers.3"``; default: a graph
    traced from ``nn.Sequential(*layers)``, where the leading integer of the path is the
    layer). An op of no block (the embeddings before the first, the head and the loss
    after the last) takes the last layer of its inputs, or, with none, the first layer of
    its users (a target goes where the loss is). ``O(N·B + E)``.

    Raises
    ------
    ValueError
        No op lies in a block, a block holds no op, or the blocks do not run in their
        order (a pipeline's stages must).
    """
    n = graph.num_nodes
    layer = np.full(n, -1, dtype=np.int64)
    if blocks is None:
        for i, m in enumerate(graph.module):
            head = str(m).split(".", 1)[0]
            if head.isdigit():
                layer[i] = int(head)
        if n and (layer < 0).all():
            raise ValueError(f"graph {graph.name!r}: no op's module path begins with a layer "
                             "index (trace nn.Sequential(*layers))")
    else:
        mods = np.array([str(m) for m in graph.module])
        first = []
        for k, b in enumerate(blocks):
            inside = np.flatnonzero((mods == b) | np.char.startswith(mods, b + "."))
            if not len(inside):
                raise ValueError(f"graph {graph.name!r}: block {b!r} runs no op")
            layer[inside] = k
            first.append(int(inside[0]))
        late = [k for k in range(1, len(first)) if first[k] < first[k - 1]]
        if late:
            raise ValueError(f"graph {graph.name!r}: block {blocks[late[0]]!r} runs before "
                             f"{blocks[late[0] - 1]!r}; a pipeline splits blocks that run in order")
    ptr, idx = graph.pred[0], graph.pred[1]
    for v in range(n):  # topological order: inputs first
        if layer[v] < 0:
            layer[v] = max(layer[idx[ptr[v]:ptr[v + 1]]].max(initial=-1), -1)
    sptr, sidx = graph.succ[0], graph.succ[1]
    for v in range(n - 1, -1, -1):  # users first
        if layer[v] < 0:
            users = layer[sidx[sptr[v]:sptr[v + 1]]]
            users = users[users >= 0]
            layer[v] = int(users.min()) if len(users) else 0
    return layer


def layer_costs(problem: Problem, forward: np.ndarray, layer: np.ndarray | None = None) -> LayerCosts:
    """:class:`LayerCosts` of a training step's graph traced at the microbatch size.

    Parameters
    ----------
    problem : Problem
        The graph on the cluster of the stages (its op times and links).
    forward : bool (N,)
        Which ops are the forward pass (:func:`graphopt.exec.export.forward_ops`).
    layer : int (N,), optional
        Layer of every op; default :func:`op_layers`.

    Notes
    -----
    ``O(N·D + E)``.
    """
    g = problem.graph
    layer = op_layers(g) if layer is None else np.asarray(layer, dtype=np.int64)
    forward = np.asarray(forward, dtype=bool)
    nl = int(layer.max(initial=-1)) + 1
    upd = np.isin(g.op, _UPDATE_OPS)
    t = problem.costs.time

    def per_layer(weights: np.ndarray) -> np.ndarray:
        return np.bincount(layer, weights=weights, minlength=nl).astype(np.float64)

    time = np.stack([per_layer(np.where(upd, 0.0, t[:, d])) for d in range(t.shape[1])], 1)
    update = np.stack([per_layer(np.where(upd, t[:, d], 0.0)) for d in range(t.shape[1])], 1)
    params = g.op == "parameter"
    weights = per_layer(np.where(np.isin(g.op, ("parameter", "buffer")), g.persistent_bytes, 0.0))
    grads = per_layer(np.where(params, g.persistent_bytes, 0.0))
    state = per_layer(np.where(g.op == "optimizer_state", g.persistent_bytes, 0.0))
    still = stationary(g)
    classes = np.array([op_class(str(o)) for o in g.op])
    kept = forward & ~still & (g.op != "input") & (classes != "view")
    activations = per_layer(np.where(kept, g.out_bytes, 0.0))
    # a moving tensor crosses every cut between its producer and its farthest user each way
    moving = ~still[g.src] & (layer[g.src] != layer[g.dst])
    src, dst, nbytes = g.src[moving], g.dst[moving], g.edge_bytes[moving]
    diff = np.zeros(nl + 1)
    for later in (True, False):
        sel = (layer[dst] > layer[src]) if later else (layer[dst] < layer[src])
        far = np.full(g.num_nodes, -1 if later else nl, dtype=np.int64)
        size = np.zeros(g.num_nodes)
        (np.maximum if later else np.minimum).at(far, src[sel], layer[dst[sel]])
        np.maximum.at(size, src[sel], nbytes[sel])
        who = np.flatnonzero(size > 0)
        lo, hi = (layer[who], far[who]) if later else (far[who], layer[who])
        np.add.at(diff, lo, size[who])
        np.add.at(diff, hi, -size[who])
    boundary = np.cumsum(diff)[: max(nl - 1, 0)]
    backward = ~forward & ~still & ~upd & (classes != "view")
    workspace = np.zeros(nl)
    np.maximum.at(workspace, layer[backward], g.out_bytes[backward])
    # the output: what the last layer's own ops hand to the ops outside every module (the loss)
    mods = np.array([str(m) for m in g.module])
    last = (layer == nl - 1) & (mods != "")
    out_edge = last[g.src] & (mods[g.dst] == "") & forward[g.dst]
    output = float(g.edge_bytes[out_edge].max(initial=0.0))
    return LayerCosts(time, update, weights, grads, state, activations, boundary, layer,
                      workspace, output, forward)


@dataclass(frozen=True)
class SplitCost:
    """A contiguous split of layers into stages, priced as a training pipeline.

    Attributes
    ----------
    bounds : tuple of int
        ``K·V + 1`` increasing layer indices from 0 to ``L``: chunk ``c`` runs layers
        ``bounds[c]`` to ``bounds[c + 1] - 1`` on rank ``c mod K`` (``V = 1``: chunk
        ``s`` is stage ``s``).
    schedule : str
    microbatches : int
    step_time : float
        Seconds of one training step (:func:`training_step_time`).
    stage_time : float64 (K,)
        Seconds per microbatch on each rank (its chunks together), transfers and runtime
        overhead included.
    update : float64 (K,)
        Seconds of each rank's optimizer update, once per step.
    memory : float64 (K,)
        Peak bytes of each rank, reached in a backward: weights, gradients, optimizer
        state, the activations of its other in-flight chunks (:func:`in_flight`; with
        ``V > 1`` each counted as ``1/V`` of the rank's layers', its chunks' mean), and
        the most over its chunks and their layers ``l`` of the chunk's activations up to
        ``l`` plus ``l``'s backward workspace (a backward frees a layer's activations as
        it passes it: an embedding's dense gradient, made whole in the stage's last
        backward op, meets only the embedding's own); on the last chunk's rank every
        microbatch's output.
    fits : bool
        Every rank's memory within its device's.
    virtual : int
        Chunks per rank ``V``.
    """

    bounds: tuple[int, ...]
    schedule: str
    microbatches: int
    step_time: float
    stage_time: np.ndarray
    update: np.ndarray
    memory: np.ndarray
    fits: bool
    virtual: int = 1

    @property
    def busy(self) -> np.ndarray:
        """Seconds each stage works in a step (float64 (K,)): every microbatch and its
        update, without the time it waits."""
        return self.microbatches * self.stage_time + self.update

    def throughput(self, batch: int) -> float:
        """Examples per second for a step of ``batch`` examples."""
        return batch / self.step_time if self.step_time > 0 else float("inf")


def boundary_time(problem: Problem, costs: LayerCosts, src: int, dst: int) -> np.ndarray:
    """Seconds of the transfers at each cut (float64 (L - 1,)) between a chunk on device
    ``src`` and the next on ``dst``: latency each way plus the bytes over the link's
    bandwidth."""
    lat = problem.latency[src, dst] + problem.latency[dst, src]
    return lat + costs.boundary * problem.sec_per_byte[src, dst]


def split_cost(problem: Problem, costs: LayerCosts, bounds, microbatches: int,
               schedule: str, overhead: float = 0.0, cores: int | None = None,
               virtual: int = 1) -> SplitCost:
    """Price the contiguous split ``bounds`` into ``K·V`` chunks (chunk ``c`` on device
    ``c mod K``, ``V = virtual`` chunks a rank) under ``schedule`` with ``microbatches``
    microbatches.

    ``overhead`` is seconds the pipeline's runtime adds to every chunk per microbatch
    (its schedule's bookkeeping, a send's and a receive's fixed costs): 0 by default,
    measured on this machine by :func:`graphopt.exec.pipeline.runtime_overhead`. It is
    the same on every stage, so it moves every split's step time alike and never the
    choice among them. ``cores``: the stages share that many cores
    (:func:`training_step_time`).

    The stage times are those :func:`training_stage_time` gives for the placement of
    every op on its layer's stage wherever tensors flow between neighbouring layers only
    (``tests/sim/test_pipeline.py`` holds the two together); a tensor that skips stages
    is charged here on every cut it crosses, as a pipeline forwards it.

    Raises
    ------
    ValueError
        ``bounds`` not ``K·V + 1`` increasing indices from 0 to the number of layers,
        more ranks than devices, or a bad schedule, chunk or microbatch count.
    """
    b = [int(x) for x in bounds]
    chunks, nl = len(b) - 1, costs.num_layers
    if chunks < 1 or b[0] != 0 or b[-1] != nl or any(x >= y for x, y in zip(b, b[1:])):
        raise ValueError(f"bounds must rise strictly from 0 to {nl} layers, got {b}")
    if virtual < 1 or chunks % virtual:
        raise ValueError(f"{chunks} chunks do not make {virtual} a rank")
    k = chunks // virtual
    if k > problem.num_devices:
        raise ValueError(f"{k} stages but the cluster has {problem.num_devices} devices")
    keep = in_flight(schedule, k, microbatches, virtual)
    stage = np.zeros(k)
    update = np.zeros(k)
    fixed = np.zeros(k)
    act = np.zeros(k)
    backward = np.zeros(k)
    for c in range(chunks):
        lo, hi, s = b[c], b[c + 1], c % k
        stage[s] += costs.time[lo:hi, s].sum() + overhead
        if c > 0:
            stage[s] += boundary_time(problem, costs, (c - 1) % k, s)[lo - 1]
        if c < chunks - 1:
            stage[s] += boundary_time(problem, costs, s, (c + 1) % k)[hi - 1]
        update[s] += costs.update[lo:hi, s].sum()
        fixed[s] += costs.weights[lo:hi].sum() + costs.grads[lo:hi].sum() + costs.state[lo:hi].sum()
        a = costs.activations[lo:hi]
        act[s] += a.sum()
        # the peak comes in a backward: the other in-flight chunks' activations, this
        # one's up to the layer whose gradient is being made whole (later layers' freed)
        backward[s] = max(backward[s], (np.cumsum(a) + costs.workspace[lo:hi]).max())
    memory = fixed + (keep - 1) * act / virtual + backward
    memory[(chunks - 1) % k] += microbatches * costs.output
    step = float(training_step_time(stage, update, microbatches, cores, virtual))
    fits = bool((memory <= problem.capacity[:k]).all())
    return SplitCost(tuple(b), schedule, int(microbatches), step, stage, update, memory, fits,
                     virtual)


#: The ``format`` field of a pipeline plan file.
PIPELINE_FORMAT = "graphopt-pipeline"

#: Its ``version``: 2 added ``virtual`` (chunks per rank; version 1 files have one), 3
#: ``blocks`` (the blocks' module names; earlier files split ``nn.Sequential`` layers).
PIPELINE_VERSION = 3


@dataclass(frozen=True)
class PipelinePlan:
    """A pipeline plan: which layers each stage runs, the schedule and the microbatches,
    as ``graphopt optimize --task pipeline`` writes it and ``graphopt run --pipeline``
    reads it.

    Attributes
    ----------
    model : str
        The model source (``pipe:NAME...``, ``hf:...``, ``py:...``).
    bounds : tuple of int
        Chunk ``c`` runs blocks ``bounds[c]`` to ``bounds[c + 1] - 1`` on rank ``c mod
        K``; ``K·V + 1`` of them.
    schedule : str
        One of :data:`SCHEDULES`.
    microbatches : int
    method : str
        What chose the split (``even``, ``params``, ``exact``, ``mcm``).
    simulated : dict
        The simulator's figures: ``step_time`` (s), ``throughput`` (examples/s),
        ``stage_time`` (s per microbatch per rank), ``memory`` (bytes per rank).
    virtual : int
        Chunks per rank ``V``: 1, or 2 and more with the interleaved schedule.
    blocks : tuple of str
        The module name of every block (``model.layers.0``, ...); empty: the layers of an
        ``nn.Sequential``, named by their index.
    """

    model: str
    bounds: tuple[int, ...]
    schedule: str
    microbatches: int
    method: str = ""
    simulated: dict = field(default_factory=dict)
    virtual: int = 1
    blocks: tuple[str, ...] = ()

    @property
    def stages(self) -> int:
        """Ranks ``K`` (processes or devices)."""
        return (len(self.bounds) - 1) // self.virtual

    def split_spec(self) -> dict[str, str]:
        """``{module name: "beginning"}`` where each chunk after the first begins, as
        ``torch.distributed.pipelining.pipeline`` takes split points."""
        return {(self.blocks[b] if self.blocks else str(b)): "beginning"
                for b in self.bounds[1:-1]}

    def to_dict(self) -> dict:
        return {"format": PIPELINE_FORMAT, "version": PIPELINE_VERSION, "model": self.model,
                "bounds": list(self.bounds), "stages": self.stages, "virtual": self.virtual,
                "schedule": self.schedule, "microbatches": self.microbatches,
                "method": self.method, "split_spec": self.split_spec(),
                "blocks": list(self.blocks), "simulated": self.simulated}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the plan as JSON, atomically."""
        text = json.dumps(self.to_dict(), indent=1)
        atomic_write(path, lambda f: f.write(text.encode()))
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> PipelinePlan:
        """Read a plan :meth:`save` wrote.

        Raises
        ------
        PlanError
            One line naming the file: not JSON, not a pipeline plan, an unknown version,
            or a field out of range (bounds not rising from 0 or not ``V`` chunks a rank,
            an unknown schedule, microbatches the schedule cannot run).
        """
        import math

        d = read_json(path, PlanError)
        if not isinstance(d, dict) or d.get("format") != PIPELINE_FORMAT:
            raise PlanError(f"{path}: not a pipeline plan (graphopt optimize --task pipeline "
                            "--out DIR writes DIR/METHOD/pipeline.json)")
        version = d.get("version", 1)
        if type(version) is not int or not 1 <= version <= PIPELINE_VERSION:
            raise PlanError(f"{path}: pipeline plan version {d.get('version')!r}; this graphopt "
                            f"reads 1 to {PIPELINE_VERSION}")
        b, m, sched = d.get("bounds"), d.get("microbatches"), d.get("schedule")
        v = d.get("virtual", 1)
        ok_b = (isinstance(b, list) and len(b) >= 2 and all(type(x) is int for x in b)
                and b[0] == 0 and all(x < y for x, y in zip(b, b[1:])))
        if not ok_b:
            raise PlanError(f"{path}: bounds must be a list of rising layer indices from 0, "
                            f"got {b!r}")
        if type(v) is not int or v < 1 or (len(b) - 1) % v:
            raise PlanError(f"{path}: virtual must be a count of chunks a rank that divides "
                            f"the {len(b) - 1} chunks of bounds, got {v!r}")
        if type(m) is not int:
            raise PlanError(f"{path}: microbatches must be an integer >= 1, got {m!r}")
        try:
            check_schedule(sched, (len(b) - 1) // v, m, v)
        except ValueError as err:
            raise PlanError(f"{path}: {err}") from None
        if not isinstance(d.get("model"), str):
            raise PlanError(f"{path}: model must be the model's source, got {d.get('model')!r}")
        blocks = d.get("blocks", [])
        if not (isinstance(blocks, list) and all(isinstance(x, str) and len(x) <= 1000 for x in blocks)
                and len(blocks) in (0, b[-1])):
            raise PlanError(f"{path}: blocks must be the {b[-1]} blocks' module names, or none")
        sim = d.get("simulated", {})
        if not isinstance(sim, dict):
            raise PlanError(f"{path}: simulated must be an object of the planner's figures, "
                            f"got {str(sim)[:60]!r}")

        def number(x) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        # the figures 'graphopt run --pipeline' prices the plan with (issue 49: a string
        # overhead was a ValueError traceback, a negative or infinite one priced silently)
        checks = {"overhead": (lambda x: number(x) and 0 <= x <= 3600, "seconds, 0 to 3600"),
                  "cores": (lambda x: x is None or (type(x) is int and 1 <= x <= 1 << 16),
                            "a core count 1..65,536 or null"),
                  "profiled": (lambda x: type(x) is bool, "true or false"),
                  "step_time": (lambda x: number(x) and x > 0, "seconds > 0")}
        for key, (ok, expected) in checks.items():
            if key in sim and not ok(sim[key]):
                raise PlanError(f"{path}: simulated.{key} must be {expected}, got "
                                f"{str(sim[key])[:60]!r}")
        return cls(d["model"], tuple(b), sched, m, str(d.get("method", "")), sim, v, tuple(blocks))
