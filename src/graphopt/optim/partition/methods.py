"""Baselines of multi-chip partitioning, each pricing repaired partitions by their
pipelined throughput (:mod:`graphopt.sim.pipeline`).

============  ===========================================================================
name          what it does
============  ===========================================================================
mcm-greedy    contiguous blocks of the topological order, balanced by compute and SRAM or by
              compute alone, or cut where the modelled interval is least: the best of the
              three (every search below starts there)
mcm-random    uniform random proposals (a chip per unit), each repaired by CP-SAT
mcm-sa        simulated annealing over single-unit moves, each repaired by CP-SAT
mcm-cpsat     CP-SAT alone, minimizing the modelled interval directly
============  ===========================================================================

Every method decides placement only (fusion off, as the pipeline cost prices ops), on
:func:`~graphopt.optim.partition.constraints.pipeline_units`, and spends its budget
through the evaluator: one evaluation is one repaired partition, simulated once by the
event simulator (its single-input latency, in ``stats``) and priced by the pipeline
cost. ``stats`` records the best interval and throughput, the fraction of proposals
valid before and after repair, and the history ``[evals, seconds, best interval]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from graphopt.errors import BudgetExhausted, UsageError
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, register
from graphopt.optim.partition.constraints import chip_memory, pipeline_units, valid_partitions
from graphopt.optim.partition.repair import RepairModel, solve_throughput
from graphopt.sim import Plan, Problem
from graphopt.sim.pipeline import pipeline_cost

__all__ = ["MCMCPSAT", "MCMGreedy", "MCMRandom", "MCMSA", "PartitionSearch", "balance_weights",
           "best_contiguous", "cut_contiguous", "greedy_contiguous"]


class PartitionSearch:
    """What every partitioning method shares: the units, the repair, the evaluator, the
    best partition seen and the counts of valid proposals.

    Parameters
    ----------
    problem : Problem
    budget : Budget
    repair_seconds : float
        CP-SAT seconds per repair.
    """

    def __init__(self, problem: Problem, budget: Budget, repair_seconds: float = 0.5):
        if problem.num_devices < 1:
            raise UsageError("partitioning needs a module of at least one chip")
        self.problem = problem
        self.unit = pipeline_units(problem)
        self.num_units = int(self.unit.max()) + 1
        self.ev = LocalEvaluator.from_budget(problem, budget)
        self.repair = RepairModel(problem, self.unit, time_limit=repair_seconds)
        self.best: np.ndarray | None = None
        self.best_interval = float("inf")
        self.best_latency: float | None = None
        self.proposals = self.valid_before = self.valid_after = 0
        self.history: list[list[float]] = []
        self._t0 = time.perf_counter()

    def price(self, proposals: np.ndarray, confidence: np.ndarray | None = None,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Repair proposals (a chip per unit, (B, U)), price what the budget admits.
        Returns the repaired partitions per unit, their intervals (inf where no valid
        partition came back) and validity; raises ``BudgetExhausted`` when none fits."""
        props = np.atleast_2d(proposals)
        if self.ev.remaining is not None:
            props = props[:max(self.ev.remaining, 0)]
        if not len(props) or self.ev.exhausted():
            raise BudgetExhausted("budget spent")
        rep = self.repair.repair(props, None if confidence is None else confidence[:len(props)],
                                 seed)
        place = rep.placement[:, self.unit]
        sim = self.ev.evaluate(place, None, np.zeros(place.shape))
        k = len(sim.step_time)
        place, ok = place[:k], rep.valid[:k]
        interval = np.where(ok, pipeline_cost(self.problem, place).interval, np.inf)
        self.proposals += k
        self.valid_before += int(valid_partitions(self.problem, props[:k, self.unit]).sum())
        self.valid_after += int(ok.sum())
        if k and interval.min() < self.best_interval:
            j = int(interval.argmin())
            self.best, self.best_interval = place[j].copy(), float(interval[j])
            self.best_latency = float(sim.step_time[j])
        self.history.append([self.ev.evals, time.perf_counter() - self._t0, self.best_interval])
        return rep.placement[:k], interval, ok

    def result(self, interrupted: bool = False, **extra) -> tuple[Plan, dict]:
        """The best partition as a plan (fusion off) and the stats of the module
        docstring."""
        n = self.problem.num_nodes
        found = self.best is not None
        plan = Plan(placement=self.best if found else np.zeros(n, np.int64), fusion=np.zeros(n))
        stats = {"evals": self.ev.evals, "seconds": time.perf_counter() - self._t0,
                 "valid": found, "interval": self.best_interval if found else None,
                 "throughput": 1.0 / self.best_interval if found else None,
                 "latency": self.best_latency, "units": self.num_units,
                 "valid_before_repair": fraction(self.valid_before, self.proposals),
                 "valid_after_repair": fraction(self.valid_after, self.proposals),
                 "history": self.history, "interrupted": interrupted, **extra}
        if found:
            stats["chip_memory"] = chip_memory(self.problem, self.best)[0].tolist()
        return plan, stats


def fraction(count: int, total: int) -> float | None:
    """``count / total``, None when there is no total (a rate of valid proposals)."""
    return count / total if total else None


def _check_task(task: frozenset[str], name: str) -> None:
    if "placement" not in task:
        raise UsageError(f"{name} partitions a graph onto chips: its task must include "
                         f"placement, not {sorted(task)}")


def balance_weights(problem: Problem, unit: np.ndarray, memory: bool = True) -> np.ndarray:
    """Each unit's share of the total compute, plus (``memory``) its share of the total
    SRAM need (its activations and the weights it alone reads): what
    :func:`greedy_contiguous` balances."""
    from graphopt.optim.partition.constraints import memory_need

    n = int(unit.max()) + 1
    t = np.bincount(unit, problem.costs.time.max(axis=1), n)
    w = t / max(t.sum(), 1e-30)
    if memory:
        m = np.bincount(unit, memory_need(problem) + problem.persistent * (problem.graph.in_degree
                                                                            == 0), n)
        w = w + m / max(m.sum(), 1e-30)
    return w


def greedy_contiguous(problem: Problem, unit: np.ndarray, memory: bool = True) -> np.ndarray:
    """Contiguous blocks of the units' topological order, one per chip, cut where the
    running share of compute plus SRAM (``memory``; else of compute alone) passes
    ``k / D`` (each unit weighted by :func:`balance_weights`): a chip per unit.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(8, 2), load_cluster("mcm-ring4"))
    >>> u = pipeline_units(prob)
    >>> chips = greedy_contiguous(prob, u)
    >>> bool((np.diff(chips) >= 0).all()), int(chips.max())
    (True, 3)
    """
    w = balance_weights(problem, unit, memory)
    mid = np.cumsum(w) - w / 2  # each unit's middle along the running share
    return np.minimum((mid / w.sum() * problem.num_devices).astype(np.int64),
                      problem.num_devices - 1)


def cut_contiguous(problem: Problem, unit: np.ndarray) -> np.ndarray:
    """Contiguous blocks of the units' topological order, one per chip used, cut where the
    modelled interval is least: dynamic programming over the cut points. A block on chip
    ``k`` costs what :func:`~graphopt.optim.partition.repair.solve_throughput` charges a
    chip, the larger of its compute and the tensors crossing the cut after it (each
    ``latency + bytes / bandwidth`` of the link to chip ``k + 1``); a block over the
    chip's SRAM (its ops' needs and every weight they read, once) is excluded. The
    optimum of that model among the contiguous partitions of this order (CP-SAT searches
    every order), in ``O(D·U²)``; a chip per unit, the chips used ``0..k``.

    Unlike :func:`greedy_contiguous` it knows what crosses each cut: on BERT-base on 16
    chips the greedy cuts fall where the attention's inputs cross (a 63 µs link) and
    leave the embeddings a chip of their own, where these cuts fall between layers.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(8, 2), load_cluster("mcm-ring4"))
    >>> u = pipeline_units(prob)
    >>> cut, greedy = cut_contiguous(prob, u), greedy_contiguous(prob, u)
    >>> bool((np.diff(cut) >= 0).all()), bool(valid_partitions(prob, cut[u][None])[0])
    (True, True)
    """
    from graphopt.optim.partition.constraints import memory_need
    from graphopt.optim.partition.repair import crossing_tensors
    from graphopt.sim.pipeline import stationary, stationary_bytes

    n, d = int(unit.max()) + 1, problem.num_devices
    ct = np.concatenate([[0.0], np.cumsum(np.bincount(unit, problem.costs.time.max(axis=1), n))])
    compute = ct[None, :] - ct[:, None]  # [j, i]: units j..i-1 on one chip
    # tensors crossing the cut before unit i: made in a unit < i, read in one >= i
    max_bytes, consumers = crossing_tensors(problem, unit)
    count, size = np.zeros(n + 2), np.zeros(n + 2)
    for op, dests in consumers.items():
        lo, hi = int(unit[op]) + 1, max(dests) + 1
        count[lo] += 1
        count[hi] -= 1
        size[lo] += max_bytes[op]
        size[hi] -= max_bytes[op]
    count, size = np.cumsum(count)[:n + 1], np.cumsum(size)[:n + 1]
    # SRAM of a block: its ops' needs, plus each weight once if any op of the block reads it
    nc = np.concatenate([[0.0], np.cumsum(np.bincount(unit, memory_need(problem), n))])
    mem = nc[None, :] - nc[:, None]
    g = problem.graph
    still = stationary(g)
    w = still[g.src] & ~still[g.dst]
    weights, where = np.unique(g.src[w], return_inverse=True)
    if len(weights):
        reads = np.full((len(weights), n), n)
        reads[where, unit[g.dst[w]]] = unit[g.dst[w]]
        # the first unit >= j that reads each weight: the block j..i-1 holds it when i > that
        first = np.minimum.accumulate(reads[:, ::-1], axis=1)[:, ::-1]
        nbytes = stationary_bytes(g)[weights]
        for j in range(n):
            mem[j] += np.cumsum(np.bincount(first[:, j] + 1, nbytes, n + 2)[:n + 1])
    empty = np.arange(n + 1)[:, None] >= np.arange(n + 1)[None, :]  # j >= i
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice, ends = [], []
    for k in range(d):
        link = (count * problem.latency[k, k + 1] + size * problem.sec_per_byte[k, k + 1]
                if k < d - 1 else np.zeros(n + 1))
        link[n] = 0.0  # nothing crosses after the last unit
        cand = np.maximum(np.maximum(best[:, None], compute), link[None, :])
        cand[empty | (mem > problem.capacity[k])] = np.inf
        choice.append(cand.argmin(axis=0))
        best = cand.min(axis=0)
        ends.append(best[n])
    if not np.isfinite(min(ends)):
        return greedy_contiguous(problem, unit)  # no block fits: leave SRAM to the repair
    chips = np.empty(n, np.int64)
    i = n
    for k in range(int(np.argmin(ends)), -1, -1):  # the fewest chips at the least interval
        j = int(choice[k][i])
        chips[j:i] = k
        i = j
    return chips


def best_contiguous(s: PartitionSearch, seed: int = 0) -> np.ndarray:
    """Price the contiguous partitions of the units' order: the greedy ones balanced by
    compute and SRAM and by compute alone (:func:`greedy_contiguous`), and the one cut
    where the modelled interval is least (:func:`cut_contiguous`), each repaired where it
    breaks a constraint, one evaluation each (fewer when they agree), and return the
    fastest, a chip per unit: the best heuristic, where every search starts.

    SRAM in the balance keeps a chip that holds large weights (BERT's embeddings) light
    in compute; balancing compute alone was up to 12% faster on BERT-base on 4 and 8
    chips, and slower elsewhere; the cuts by the modelled interval also avoid the cuts
    that large tensors cross.
    """
    props: list[np.ndarray] = []
    for p in (greedy_contiguous(s.problem, s.unit), greedy_contiguous(s.problem, s.unit, False),
              cut_contiguous(s.problem, s.unit)):
        if not any((p == q).all() for q in props):
            props.append(p)
    parts, interval, _ = s.price(np.stack(props), seed=seed)
    return parts[int(np.argmin(interval))]


@register("mcm-greedy")
@dataclass
class MCMGreedy:
    """Contiguous partitions (:func:`best_contiguous`), repaired if they break a
    constraint (SRAM): the best of three; three evaluations (fewer when they agree).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 3), load_cluster("mcm-ring4"))
    >>> plan, stats = MCMGreedy().optimize(prob, frozenset({"placement"}), Budget(4), 0)
    >>> stats["evals"], stats["valid"]
    (3, True)
    """

    repair_seconds: float = field(default=2.0, metadata={"gt": 0,
        "help": "CP-SAT seconds to repair the partition when it breaks a constraint."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        _check_task(task, self.name)
        s = PartitionSearch(problem, budget, self.repair_seconds)
        best_contiguous(s, seed)
        return s.result()


@register("mcm-random")
@dataclass
class MCMRandom:
    """Random search + repair: uniform random chips per unit, each proposal repaired by
    CP-SAT to the nearest valid partition (all units weighted alike).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 3), load_cluster("mcm-ring4"))
    >>> plan, stats = MCMRandom(batch_size=4).optimize(prob, frozenset({"placement"}),
    ...                                                 Budget(8), seed=0)
    >>> stats["evals"], stats["valid_after_repair"]
    (8, 1.0)
    """

    batch_size: int = field(default=16, metadata={"min": 1, "limit": 10_000,
                                                   "help": "Proposals per batch."})
    repair_seconds: float = field(default=0.5, metadata={"gt": 0,
        "help": "CP-SAT seconds per repair."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        _check_task(task, self.name)
        rng = np.random.default_rng(seed)
        s = PartitionSearch(problem, budget, self.repair_seconds)
        interrupted = False
        try:
            while True:
                s.price(rng.integers(0, problem.num_devices, (self.batch_size, s.num_units)),
                        seed=seed)
        except BudgetExhausted:
            pass
        except KeyboardInterrupt:
            interrupted = True
        return s.result(interrupted)


@register("mcm-sa")
@dataclass
class MCMSA:
    """Simulated annealing + repair: chains start from the best greedy contiguous
    partition (:func:`best_contiguous`), or (``start="random"``, the MCM paper's
    baseline) from uniform random proposals, repaired, each chain from a valid one;
    a move puts one unit on another chip, and the
    repair (that unit weighted ``move_weight`` times the others) moves whatever must
    follow it. Accepted as in
    ``sa``: always if faster, else with probability ``exp(−α·Δ/T)``, Δ relative, T
    falling geometrically over the budget.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 3), load_cluster("mcm-ring4"))
    >>> plan, stats = MCMSA(chains=4).optimize(prob, frozenset({"placement"}), Budget(9), 0)
    >>> stats["evals"]
    9
    """

    chains: int = field(default=8, metadata={"min": 1, "limit": 10_000,
                                              "help": "Markov chains side by side."})
    alpha: float = field(default=1.2, metadata={"gt": 0, "help": "FlexFlow's α."})
    initial_temperature: float = field(default=0.05, metadata={"gt": 0,
        "help": "Temperature at the start (relative Δ)."})
    final_temperature: float = field(default=0.002, metadata={"gt": 0,
        "help": "Temperature at the end of the budget."})
    move_weight: float = field(default=20.0, metadata={"gt": 0,
        "help": "Repair weight of the moved unit against 1 for every other unit."})
    repair_seconds: float = field(default=0.5, metadata={"gt": 0,
        "help": "CP-SAT seconds per repair."})
    start: str = field(default="best", metadata={"choices": ("best", "random"),
        "help": "Where the chains start: the best contiguous partition, or repaired uniform "
                "random proposals (the MCM paper's baseline, no heuristic)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        _check_task(task, self.name)
        rng = np.random.default_rng(seed)
        s = PartitionSearch(problem, budget, self.repair_seconds)
        d, interrupted = problem.num_devices, False
        try:
            if self.start == "best":
                chains = np.repeat(best_contiguous(s, seed)[None], self.chains, axis=0)
                current = np.full(self.chains, s.best_interval)
            else:
                chains, current = self._random_starts(s, rng, seed)
            while True:
                prop = chains.copy()
                rows = np.arange(self.chains)
                moved = rng.integers(0, s.num_units, self.chains)
                prop[rows, moved] = np.clip(prop[rows, moved] + rng.choice([-1, 1], self.chains),
                                            0, d - 1)
                conf = np.ones(prop.shape)
                conf[rows, moved] = self.move_weight
                new, scores, _ = s.price(prop, conf, seed)
                k = len(scores)
                temperature = self.initial_temperature * (
                    self.final_temperature / self.initial_temperature) ** s.ev.fraction_spent()
                delta = (scores - current[:k]) / current[:k]
                accept = np.flatnonzero(rng.random(k) < np.exp(
                    -self.alpha * np.maximum(np.nan_to_num(delta, nan=np.inf), 0) / temperature))
                chains[accept], current[accept] = new[accept], scores[accept]
        except BudgetExhausted:
            pass
        except KeyboardInterrupt:
            interrupted = True
        return s.result(interrupted)

    def _random_starts(self, s: PartitionSearch, rng: np.random.Generator,
                       seed: int) -> tuple[np.ndarray, np.ndarray]:
        """One repaired uniform proposal per chain, drawn again until one is valid; a
        chain whose repair found none starts where a valid one does."""
        while True:
            parts, scores, ok = s.price(rng.integers(0, s.problem.num_devices,
                                                     (self.chains, s.num_units)), seed=seed)
            if ok.any():
                take = np.where(ok, np.arange(len(ok)), np.flatnonzero(ok)[0])
                take = np.resize(take, self.chains)  # the budget may have cut the batch
                return parts[take].copy(), scores[take].copy()


@register("mcm-cpsat")
@dataclass
class MCMCPSAT:
    """CP-SAT alone: the partition of least modelled interval
    (:func:`~graphopt.optim.partition.repair.solve_throughput`), started from the best
    contiguous partition (:func:`best_contiguous`); up to four evaluations (the starts
    and the solution).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(4, 2), load_cluster("mcm-ring4"))
    >>> plan, stats = MCMCPSAT(time_limit=5).optimize(prob, frozenset({"placement"}),
    ...                                                Budget(4), seed=0)
    >>> stats["status"]
    'OPTIMAL'
    """

    time_limit: float = field(default=60.0, metadata={"gt": 0,
        "help": "Solver seconds (the budget's seconds, when smaller, win)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        _check_task(task, self.name)
        s = PartitionSearch(problem, budget)
        start = best_contiguous(s, seed)
        limit = self.time_limit if budget.seconds is None else min(self.time_limit,
                                                                    budget.seconds)
        part, solver = solve_throughput(problem, s.unit, limit, seed=seed, hint=start)
        if part is not None:
            try:
                s.price(part[None], seed=seed)
            except BudgetExhausted:
                pass
        return s.result(**solver)
