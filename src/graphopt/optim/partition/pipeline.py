"""Splitting a training step's layers into pipeline stages (the pipeline task).

Four methods choose the split points, each priced by the one pipeline model of
:mod:`graphopt.sim.pipeline` (:func:`~graphopt.sim.pipeline.split_cost`):

even     equal layer counts, the first stages one layer more where they do not divide
         (``torch.distributed.pipelining``'s habit)
params   stages of about equal parameter bytes (accelerate's habit for device maps)
exact    dynamic programming over every contiguous split: the least simulated step time
         among the splits whose stages fit their devices' memory, exact under the model;
         with interleaving, every split into ``K·V`` chunks priced (at most
         :data:`MAX_INTERLEAVED_SPLITS` of them)
mcm      the learned chiplet policy of multi-chip partitioning, zero-shot, its most likely
         chip per op repaired into contiguous stages (:func:`contiguous_split`;
         :mod:`graphopt.optim.learned.mcm.pipeline`): at best it ties ``exact``, and its
         gap to ``exact`` measures the policy; one chunk a stage (not interleaved)

With the interleaved schedule the layers are cut into ``K·V`` chunks (``V`` virtual
stages a rank, chunk ``c`` on rank ``c mod K``): even and params cut them as they would
``K·V`` stages, and a rank's time is its chunks' sum.

``schedule="auto"`` prices each split under GPipe and 1F1B and keeps the faster one
that fits; the two fill and drain alike, so 1F1B, which holds fewer microbatches'
activations, is kept on a tie (and GPipe alone is priced with fewer microbatches than
stages, which ``torch``'s ``Schedule1F1B`` refuses). Interleaved is priced only when asked
(see :func:`_schedules` why). Microbatches ``auto``
(:func:`plan_pipeline_auto`) picks the count whose exact split is fastest, and prices
every method at that count.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from graphopt.errors import GraphoptError, InfeasibleError, UsageError
from graphopt.optim.base import PIPELINE, get_optimizer, register, tasks_of
from graphopt.sim import Problem
from graphopt.sim.pipeline import (SCHEDULES, LayerCosts, SplitCost, boundary_time,
                                   check_schedule, in_flight, split_cost)

__all__ = ["DEFAULT_SPLIT_METHODS", "FIRST_CHOICE", "MAX_INTERLEAVED_SPLITS", "SPLIT_METHODS",
           "EvenSplit", "ExactSplit", "ParamsSplit", "PipelineResult", "contiguous_split",
           "exact_split", "even_split", "first_choice", "microbatch_candidates", "params_split",
           "plan_pipeline", "plan_pipeline_auto"]

#: The methods of the pipeline task, in the order they are reported (``mcm`` is the
#: multi-chip method :class:`graphopt.optim.learned.mcm.method.MCM`, which serves it too).
SPLIT_METHODS = ("even", "params", "exact", "mcm")
#: Those run when none are named: ``mcm`` loads torch and the policy, so it is asked for.
DEFAULT_SPLIT_METHODS = ("even", "params", "exact")

#: Splits into ``K·V`` chunks the exact method prices one by one at most (a few
#: seconds): C(L - 1, K·V - 1) of them, e.g. 1,716 for 14 layers on 4 ranks of 2.
MAX_INTERLEAVED_SPLITS = 5000


@dataclass(frozen=True)
class PipelineResult:
    """One method's split, priced."""

    method: str
    cost: SplitCost


def _check(num_layers: int, stages: int, microbatches: int) -> None:
    if stages < 1:
        raise UsageError(f"--stages {stages}: give at least 1")
    if stages > num_layers:
        raise UsageError(f"--stages {stages}: the model has only {num_layers} blocks to split")
    if microbatches < 1:
        raise UsageError(f"--microbatches {microbatches}: give at least 1")


def even_split(num_layers: int, stages: int) -> tuple[int, ...]:
    """Equal layer counts, the first stages one more where they do not divide.

    >>> even_split(8, 2), even_split(10, 4)
    ((0, 4, 8), (0, 3, 6, 8, 10))
    """
    _check(num_layers, stages, 1)
    sizes = [len(a) for a in np.array_split(np.arange(num_layers), stages)]
    return tuple(int(x) for x in np.concatenate([[0], np.cumsum(sizes)]))


def params_split(weights: np.ndarray, stages: int) -> tuple[int, ...]:
    """Stages of about equal parameter bytes: each cut where the running total comes
    nearest to its share, every stage keeping at least one layer.

    >>> params_split(np.array([4.0, 1, 1, 1, 1]), 2)
    (0, 1, 5)
    """
    w = np.asarray(weights, dtype=np.float64)
    nl = len(w)
    _check(nl, stages, 1)
    cum = np.concatenate([[0.0], np.cumsum(w)])
    bounds = [0]
    for s in range(1, stages):
        lo, hi = bounds[-1] + 1, nl - (stages - s)
        target = cum[-1] * s / stages
        j = lo + int(np.argmin(np.abs(cum[lo:hi + 1] - target)))
        bounds.append(j)
    bounds.append(nl)
    return tuple(bounds)


def contiguous_split(chips: np.ndarray, stages: int) -> tuple[int, ...]:
    """The contiguous split into ``stages`` non-empty stages that changes the fewest
    layers' stage from ``chips`` (a stage per layer; one outside ``0..stages - 1``
    matches none): the nondecreasing sequence of stages from 0 to ``stages - 1``, rising
    one at a time, nearest to ``chips`` in layers changed. Dynamic programming over
    layers and stages, ``O(L·K)``; on a tie the later stage for the earlier layer.

    >>> contiguous_split(np.array([0, 0, 1, 1]), 2), contiguous_split(np.array([0, 1, 0, 1, 1]), 2)
    ((0, 2, 4), (0, 1, 5))
    >>> contiguous_split(np.array([1, 0, 0, 0, 1]), 3)
    (0, 3, 4, 5)
    """
    chips = np.asarray(chips, dtype=np.int64)
    nl = len(chips)
    _check(nl, stages, 1)
    miss = (chips[:, None] != np.arange(stages)).astype(np.float64)
    # least[l, s]: fewest changes to layers 0..l with layer l on stage s
    least = np.full((nl, stages), np.inf)
    least[0, 0] = miss[0, 0]
    for i in range(1, nl):
        least[i, 0] = least[i - 1, 0] + miss[i, 0]
        least[i, 1:] = np.minimum(least[i - 1, 1:], least[i - 1, :-1]) + miss[i, 1:]
    bounds, s = [nl], stages - 1
    for i in range(nl - 1, 0, -1):  # layer i is on stage s: was layer i - 1 on s - 1?
        if s > 0 and least[i - 1, s - 1] < least[i - 1, s]:
            bounds.append(i)
            s -= 1
    return (0, *bounds[::-1])


def exact_split(problem: Problem, costs: LayerCosts, stages: int, microbatches: int,
                schedule: str, capacity: np.ndarray | None = None, overhead: float = 0.0,
                cores: int | None = None, virtual: int = 1) -> tuple[int, ...] | None:
    """The contiguous split of least simulated step time whose stages fit, by dynamic
    programming; None when no split fits.

    The step (:func:`~graphopt.sim.pipeline.training_step_time`) is ``S + V``, the sum
    ``S`` of the stage times plus the largest ``V`` of the stages' ``(M - 1) · t + u``
    (and no less than the work over ``cores``, which grows with ``S`` too). So for each
    candidate cap ``V`` (every stage's value, in increasing order) a dynamic program
    gives the least ``S`` over the splits whose stages stay under the cap and fit:
    ``least[s][j] = min_i least[s-1][i] + t(s, i, j)`` over the stages ``s`` running
    layers ``i..j-1``; the caps stop once ``V`` alone plus the least ``S`` under no cap
    cannot beat the best step found. A stage's time depends on its layers and its index
    only (its device, its cuts, its in-flight microbatches). ``O(K·L²)`` per cap, few
    caps in practice (``S`` moves little between splits). ``capacity`` (bytes per
    stage) replaces the devices' memory; ``overhead``, ``cores`` and ``virtual`` are
    :func:`~graphopt.sim.pipeline.split_cost`'s.

    With ``virtual`` chunks a rank the ranks' times sum chunks far apart, which no
    dynamic program over contiguous stages holds: every split into ``K·V`` chunks is
    priced by :func:`~graphopt.sim.pipeline.split_cost`, at most
    :data:`MAX_INTERLEAVED_SPLITS` of them.

    Raises
    ------
    GraphoptError
        More stages than layers or devices, or more interleaved splits than
        :data:`MAX_INTERLEAVED_SPLITS`.
    """
    nl = costs.num_layers
    _check(nl, stages * virtual, microbatches)
    if stages > problem.num_devices:
        raise UsageError(f"--stages {stages}: the cluster has {problem.num_devices} devices")
    if virtual > 1:
        return _exact_interleaved(problem, costs, stages, microbatches, schedule, capacity,
                                  overhead, cores, virtual)
    k, m = stages, microbatches
    keep = in_flight(schedule, k, m)
    zero = np.zeros(1)
    fixed = np.concatenate([zero, np.cumsum(costs.weights + costs.grads + costs.state)])
    act = np.concatenate([zero, np.cumsum(costs.activations)])
    # t[s, i, j], v[s, i, j]: stage s running layers i..j-1 (inf where it cannot or does not fit)
    t = np.full((k, nl + 1, nl + 1), np.inf)
    v = np.full((k, nl + 1, nl + 1), np.inf)
    upd_all = np.zeros((k, nl + 1, nl + 1))
    for s in range(k):
        time = np.concatenate([zero, np.cumsum(costs.time[:, s])])
        upd = np.concatenate([zero, np.cumsum(costs.update[:, s])])
        left = boundary_time(problem, costs, s - 1, s) if s > 0 else None
        right = boundary_time(problem, costs, s, s + 1) if s < k - 1 else None
        cap = (problem.capacity if capacity is None else capacity)[s]
        for j in range(s + 1, nl - (k - 1 - s) + 1):
            i = np.arange(s, j)  # the stage runs layers i..j-1
            ts = time[j] - time[i] + overhead
            if left is not None:
                ts = ts + left[i - 1]
            if right is not None:
                ts = ts + right[j - 1]
            # max over l in i..j-1 of the activations of layers i..l plus l's workspace
            peak = act[s + 1:j + 1] + costs.workspace[s:j]
            back = np.maximum.accumulate(peak[::-1])[::-1][i - s] - act[i]
            mem = (fixed[j] - fixed[i] + (keep[s] - 1) * (act[j] - act[i]) + back
                   + (m * costs.output if s == k - 1 else 0.0))
            ok = mem <= cap
            t[s, i[ok], j] = ts[ok]
            upd_all[s, i, j] = upd[j] - upd[i]
            v[s, i[ok], j] = (m - 1) * ts[ok] + upd_all[s, i[ok], j]

    def least_sum(limit: float) -> tuple[float, list[int] | None]:
        """The least sum of stage times (and its bounds) with every stage's value under limit."""
        allowed = np.where(v <= limit, t, np.inf)
        best = np.full(nl + 1, np.inf)
        best[0] = 0.0
        args = np.zeros((k, nl + 1), dtype=np.int64)
        for s in range(k):
            total = best[:, None] + allowed[s]  # (i, j)
            args[s] = np.argmin(total, axis=0)
            best = total[args[s], np.arange(nl + 1)]
        if not np.isfinite(best[nl]):
            return np.inf, None
        bounds = [nl]
        for s in range(k - 1, -1, -1):
            bounds.append(int(args[s, bounds[-1]]))
        return float(best[nl]), bounds[::-1]

    def step(total: float, limit: float, bounds: list[int]) -> tuple[float, float]:
        """The step, then the pipeline's own term: where the cores bound the step, splits
        tie on it, and the one whose stages would pipeline best is kept."""
        if cores is None:
            return total + limit, total + limit
        stage_t = [t[s, a, b] for s, (a, b) in enumerate(zip(bounds, bounds[1:]))]
        stage_u = [upd_all[s, a, b] for s, (a, b) in enumerate(zip(bounds, bounds[1:]))]
        return max(total + limit, (m * sum(stage_t) + sum(stage_u)) / cores), total + limit

    floor, _ = least_sum(np.inf)
    if not np.isfinite(floor):
        return None
    best, best_bounds = (np.inf, np.inf), None
    for limit in np.unique(v[np.isfinite(v)]):
        if floor + limit >= best[0]:  # a split under this cap or higher can neither win nor tie better
            break
        total, bounds = least_sum(float(limit))
        if bounds is None:
            continue
        # the largest value on this split may be below the cap: price it exactly
        real = max(v[s, a, b] for s, (a, b) in enumerate(zip(bounds, bounds[1:])))
        cost = step(total, float(real), bounds)
        if cost < best:
            best, best_bounds = cost, bounds
    return tuple(best_bounds) if best_bounds is not None else None


def _exact_interleaved(problem, costs, stages, microbatches, schedule, capacity, overhead,
                       cores, virtual) -> tuple[int, ...] | None:
    nl, chunks = costs.num_layers, stages * virtual
    count = math.comb(nl - 1, chunks - 1)
    if count > MAX_INTERLEAVED_SPLITS:
        raise UsageError(f"--virtual-stages {virtual}: the exact split prices every one of "
                         f"{count:,} splits of {nl} blocks into {chunks} chunks, more than "
                         f"{MAX_INTERLEAVED_SPLITS:,}; give fewer, or --methods even,params")
    cap = problem.capacity[:stages] if capacity is None else np.asarray(capacity)[:stages]
    best, best_bounds = np.inf, None
    for cuts in itertools.combinations(range(1, nl), chunks - 1):
        bounds = (0, *cuts, nl)
        c = split_cost(problem, costs, bounds, microbatches, schedule, overhead, cores, virtual)
        if (c.memory <= cap).all() and c.step_time < best:
            best, best_bounds = c.step_time, bounds
    return best_bounds


def _schedules(schedule: str, stages: int, microbatches: int, virtual: int,
               num_layers: int) -> tuple[tuple[str, int], ...]:
    """The (schedule, chunks a rank) pairs to price: ``auto``'s 1F1B and GPipe where the
    counts allow, 1F1B first (kept on a tie with GPipe: it holds fewer activations).

    ``auto`` leaves interleaved out: priced as the model prices it, it was taken on 16
    of the benchmark's 60 plans and measured no faster than 1F1B's (ViT's exact split
    0.85x the even split; the step error 14.2% against 10.8% without it; docs/execution.md)."""
    if schedule == "auto":  # torch's Schedule1F1B refuses fewer microbatches than stages
        return (("1f1b", 1), ("gpipe", 1)) if microbatches >= stages else (("gpipe", 1),)
    if schedule not in SCHEDULES:
        raise UsageError(f"--schedule {schedule!r}: give one of {', '.join(SCHEDULES)} or auto")
    if schedule == "interleaved" and virtual < 2:
        raise UsageError(f"--virtual-stages {virtual}: give 2 or more chunks a rank")
    v = virtual if schedule == "interleaved" else 1
    try:
        check_schedule(schedule, stages, microbatches, v)
    except ValueError as err:
        raise GraphoptError(str(err)) from None
    if stages * v > num_layers:
        raise UsageError(f"--virtual-stages {v}: {stages} stages of {v} chunks need "
                         f"{stages * v} blocks; the model has {num_layers}")
    return ((schedule, v),)


@register("even")
class EvenSplit:
    """Even split: as many blocks on every stage as can be, the first stages one more
    where they do not divide (what a user writes first; ``torch.distributed.pipelining``'s habit)."""

    tasks = frozenset({PIPELINE})
    #: whether it cuts ``K·V`` chunks for the interleaved schedule
    chunked = True

    def split(self, problem: Problem, costs: LayerCosts, stages: int, microbatches: int,
              schedule: str, virtual: int = 1, overhead: float = 0.0,
              cores: int | None = None) -> tuple[int, ...]:
        """``stages · virtual + 1`` rising block indices from 0 to the number of blocks."""
        return even_split(costs.num_layers, stages * virtual)


@register("params")
class ParamsSplit(EvenSplit):
    """Parameter-balanced split: stages of about equal parameter bytes (accelerate's habit
    for device maps)."""

    def split(self, problem, costs, stages, microbatches, schedule, virtual=1, overhead=0.0,
              cores=None) -> tuple[int, ...]:
        return params_split(costs.weights, stages * virtual)


@register("exact")
class ExactSplit(EvenSplit):
    """Exact split: dynamic programming over every contiguous split, the least simulated
    step time among those whose stages fit their devices' memory (the fastest when none
    fits)."""

    def split(self, problem, costs, stages, microbatches, schedule, virtual=1, overhead=0.0,
              cores=None) -> tuple[int, ...]:
        bounds = exact_split(problem, costs, stages, microbatches, schedule,
                             overhead=overhead, cores=cores, virtual=virtual)
        if bounds is None:  # nothing fits: the fastest split, memory ignored
            bounds = exact_split(problem, costs, stages, microbatches, schedule,
                                 capacity=np.full(stages, np.inf), overhead=overhead,
                                 cores=cores, virtual=virtual)
        return bounds


def plan_pipeline(problem: Problem, costs: LayerCosts, stages: int, microbatches: int,
                  schedule: str = "auto", methods=DEFAULT_SPLIT_METHODS,
                  overhead: float = 0.0, cores: int | None = None,
                  virtual: int = 2) -> list[PipelineResult]:
    """Each method's split of ``costs``' layers into ``stages`` stages, priced with
    ``microbatches`` microbatches under ``schedule`` (``auto``: the best one, per split)
    and the runtime's ``overhead`` per chunk and microbatch, the stages sharing
    ``cores`` cores (None: each its own; :func:`~graphopt.sim.pipeline.split_cost`);
    ``virtual`` chunks a rank where the schedule is interleaved.

    A method whose split does not fit memory is still reported (``cost.fits`` False);
    ``exact`` with no split that fits falls back to the fastest split, unfitting.

    Raises
    ------
    GraphoptError
        More stages than layers or devices (or, for ``mcm``, than the policy's 16 chips),
        fewer than one microbatch, an unknown schedule or method, counts the schedule
        cannot run, ``mcm`` interleaved; one line naming the option.
    """
    nl = costs.num_layers
    _check(nl, stages, microbatches)
    if stages > problem.num_devices:
        raise UsageError(f"--stages {stages}: the cluster {problem.cluster.name} has "
                         f"{problem.num_devices} devices; give one with as many as stages")
    scheds = _schedules(schedule, stages, microbatches, virtual, nl)
    for m in methods:
        if PIPELINE not in tasks_of(m):
            raise UsageError(f"--methods: {m!r} is no pipeline method; give "
                             f"{', '.join(SPLIT_METHODS)}")
    splitters = [get_optimizer(m) for m in methods]

    def better(a: SplitCost, b: SplitCost | None) -> bool:
        return b is None or (a.fits, -a.step_time) > (b.fits, -b.step_time)

    out = []
    for method, splitter in zip(methods, splitters):
        scheds_of = [(sched, v) for sched, v in scheds if splitter.chunked or v == 1]
        if not scheds_of:
            raise UsageError(f"--methods {method}: it places one chunk a stage; give "
                             "--schedule 1f1b, gpipe or auto")
        best: SplitCost | None = None
        for sched, v in scheds_of:
            bounds = splitter.split(problem, costs, stages, microbatches, sched, v, overhead,
                                    cores)
            cost = split_cost(problem, costs, bounds, microbatches, sched, overhead, cores, v)
            if better(cost, best):
                best = cost
        out.append(PipelineResult(method, best))
    return out


#: The row of what a user writes first: even blocks, 1F1B, as many microbatches as stages.
FIRST_CHOICE = "even-first"


def first_choice(problem_for, stages: int, batch: int, overhead: float = 0.0,
                 cores: int | None = None) -> list[PipelineResult]:
    """:data:`FIRST_CHOICE`, priced as the methods are: none where fewer than 2 stages or
    the stages do not divide the ``batch``.

    Parameters
    ----------
    problem_for : callable
        ``problem_for(M) -> (Problem, LayerCosts)`` of one microbatch of ``M``.
    """
    if stages < 2 or batch % stages:
        return []
    prob, costs = problem_for(stages)
    even = even_split(costs.num_layers, stages)
    return [PipelineResult(FIRST_CHOICE, split_cost(prob, costs, even, stages, "1f1b", overhead,
                                                    cores))]


def microbatch_candidates(batch: int, stages: int, limit: int = 6) -> list[int]:
    """Microbatch counts ``auto`` tries: the powers of two that divide ``batch``, from the
    smallest at least ``stages`` (fewer leave a stage idle most of the step) down to 1
    where none is, at most ``limit`` of them.

    >>> microbatch_candidates(64, 2), microbatch_candidates(6, 4)
    ([2, 4, 8, 16, 32, 64], [2])
    """
    twos = [m for m in (2**i for i in range(31)) if m <= batch and batch % m == 0]
    enough = [m for m in twos if m >= stages]
    return enough[:limit] if enough else twos[-1:]


def plan_pipeline_auto(problem_for, candidates, stages: int, schedule: str = "auto",
                       methods=DEFAULT_SPLIT_METHODS, overhead: float = 0.0,
                       cores: int | None = None, virtual: int = 2) -> list[PipelineResult]:
    """:func:`plan_pipeline` with the microbatch count chosen too: the count among
    ``candidates`` whose ``exact`` split is fastest (and fits), then every method's split
    at that count, so that the methods differ in their split alone.

    Parameters
    ----------
    problem_for : callable
        ``problem_for(M) -> (Problem, LayerCosts)`` of one microbatch of ``M``.
    candidates : iterable of int
        Microbatch counts to try (:func:`microbatch_candidates`).
    """
    best, why = None, ""
    for m in candidates:
        if schedule != "auto":
            try:
                check_schedule(schedule, stages, m, virtual if schedule == "interleaved" else 1)
            except ValueError as err:
                why = f" ({err})"
                continue
        prob, costs = problem_for(m)
        cost = plan_pipeline(prob, costs, stages, m, schedule, ("exact",), overhead, cores,
                             virtual)[0].cost
        if best is None or (cost.fits, -cost.step_time) > (best[0].fits, -best[0].step_time):
            best = (cost, prob, costs, m)
    if best is None:
        raise InfeasibleError(f"--microbatches auto: no count among {list(candidates)} suits "
                              f"--schedule {schedule} on {stages} stages{why}")
    _, prob, costs, m = best
    return plan_pipeline(prob, costs, stages, m, schedule, methods, overhead, cores, virtual)
