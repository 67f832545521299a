"""Scheduling defaults: priorities that order the ready ops on each device.

A plan's ``priority`` tells the simulator which ready kernel a device starts first
(higher first). These functions compute one for a given placement:

- :func:`fifo`: ``None``, the simulator's default (first ready, first run — the
  TensorFlow executor's order).
- :func:`critical_path`: the upward rank, the longest path from the op to a sink,
  with communication on edges that cross devices (classic list scheduling; HEFT's
  order).
- XLA's memory-minimizing schedulers (``xla/service/hlo_memory_scheduler.cc``):
  :func:`list_memory` (greedy list scheduling by bytes freed minus bytes defined),
  :func:`dfs_memory` (DFS post-order, heavy fan-out and big subgraphs first),
  :func:`postorder` (plain DFS post-order), and :func:`best_memory_schedule`, which
  keeps whichever gives the lowest simulated peak memory, as XLA's default scheduler
  keeps whichever its heap simulator prefers.

The XLA schedulers order the whole graph as one sequence; with several devices each
device runs its own ops in that sequence's order. Like XLA they ignore parameters
and constants (class ``input``), whose memory no order can change.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from graphopt.ir.ops import OP_CLASSES
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.heuristics._common import order_to_priority, result_stats, upward_rank
from graphopt.sim import Plan, Problem, SimResult

__all__ = ["fifo", "critical_path", "list_memory", "dfs_memory", "postorder",
           "best_memory_schedule", "MEMORY_SCHEDULERS", "CriticalPath", "XLAMemory"]

_INPUT = OP_CLASSES.index("input")


def fifo(problem: Problem, placement: np.ndarray | None = None) -> None:
    """No priorities: the simulator runs ops first ready, first run.

    >>> fifo(None) is None
    True
    """
    return None


def critical_path(problem: Problem, placement: np.ndarray | None = None) -> np.ndarray:
    """Upward rank under a placement, as priority: the longest path from each op to a
    sink (:func:`~graphopt.optim.heuristics._common.upward_rank`), counting op times on
    their devices and :meth:`Problem.transfer_time` on edges between devices (no
    placement: everything on device 0). O(N + E).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> prio = critical_path(prob)
    >>> bool(prio[0] >= prio[-1]), prio.shape == (prob.num_nodes,)
    (True, True)
    """
    n = problem.num_nodes
    place = np.zeros(n, dtype=np.int64) if placement is None else np.asarray(placement, np.int64)
    edge = problem.transfer_time(problem.succ_bytes, np.repeat(place, np.diff(problem.succ_ptr)),
                                 place[problem.succ_idx])
    return upward_rank(problem, problem.costs.time[np.arange(n), place], edge)


def _buffer_sizes(problem: Problem) -> np.ndarray:
    """Bytes of each op's output as XLA's schedulers count them (0 for parameters)."""
    return np.where(problem.costs.class_id == _INPUT, 0.0, problem.out_bytes)


def list_memory(problem: Problem, placement: np.ndarray | None = None) -> np.ndarray:
    """XLA's list scheduler: repeatedly run the ready op that frees the most bytes.

    An op's priority is the bytes of the inputs it is the last user of minus the bytes
    it defines, then its number of users; ops with a scalar output go first (they would
    live in registers). Ties go to the op that became ready last. The outputs of sinks
    are live to the end and never count as freed. ``placement`` is accepted for a
    uniform signature and not used.

    Complexity: O((N + E) log N) with a lazily updated heap.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import simulate
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> simulate(prob, Plan(priority=list_memory(prob))).valid
    True
    """
    g = problem.graph
    n = g.num_nodes
    size = _buffer_sizes(problem)
    pred_ptr, pred_idx = problem.pred_ptr, problem.pred_idx
    succ_ptr, succ_idx = problem.succ_ptr, problem.succ_idx
    uses_left = np.array(g.out_degree) + (g.out_degree == 0)  # sinks: one use at the end
    scalar = (np.where(g.shape >= 0, g.shape, 1).prod(axis=1) == 1)
    indeg = np.array(g.in_degree)
    version = np.zeros(n, dtype=np.int64)
    seq = 0
    heap: list[tuple[float, int, int, int, int]] = []

    def push(v: int) -> None:
        nonlocal seq
        seq += 1
        if scalar[v]:
            key = (-np.inf, -n)
        else:
            lo, hi = pred_ptr[v], pred_ptr[v + 1]
            freed = size[pred_idx[lo:hi]][uses_left[pred_idx[lo:hi]] == 1].sum()
            key = (-(freed - size[v]), -int(g.out_degree[v]))
        heapq.heappush(heap, (*key, -seq, v, int(version[v])))

    for r in np.flatnonzero(indeg == 0):
        push(int(r))
    order = []
    while heap:
        *_, v, ver = heapq.heappop(heap)
        if ver != version[v]:
            continue
        version[v] = -1  # scheduled: any entry left for it is stale
        order.append(v)
        for j in range(pred_ptr[v], pred_ptr[v + 1]):
            p = pred_idx[j]
            uses_left[p] -= 1
            if uses_left[p] == 1:  # its last user, if ready, now frees it
                for k in range(succ_ptr[p], succ_ptr[p + 1]):
                    u = succ_idx[k]
                    if indeg[u] == 0 and version[u] >= 0:
                        version[u] += 1
                        push(int(u))
        for k in range(succ_ptr[v], succ_ptr[v + 1]):
            u = succ_idx[k]
            indeg[u] -= 1
            if indeg[u] == 0:
                push(int(u))
    return order_to_priority(np.array(order, dtype=np.int64))


def _dfs_post_order(problem: Problem, roots: np.ndarray, rank: np.ndarray | None) -> np.ndarray:
    """Post-order of a DFS over inputs from ``roots`` in turn; a node's inputs are visited
    in increasing ``rank`` (None: in edge order). Iterative, O(N + E log E)."""
    ptr, idx = problem.pred_ptr, problem.pred_idx
    seen = np.zeros(problem.num_nodes, dtype=bool)
    order: list[int] = []

    def inputs(v: int) -> list[int]:
        p = idx[ptr[v]:ptr[v + 1]]
        return list(p if rank is None else p[np.argsort(rank[p], kind="stable")])

    for r in roots:
        if seen[r]:
            continue
        seen[r] = True
        stack = [(int(r), inputs(int(r)))]
        while stack:
            v, todo = stack[-1]
            while todo and seen[todo[0]]:
                todo.pop(0)
            if todo:
                u = int(todo.pop(0))
                seen[u] = True
                stack.append((u, inputs(u)))
            else:
                stack.pop()
                order.append(v)
    return np.array(order, dtype=np.int64)


def dfs_memory(problem: Problem, placement: np.ndarray | None = None) -> np.ndarray:
    """XLA's DFS scheduler: DFS post-order visiting first the inputs with more *extra
    users* (users beyond the first, summed over the subgraph feeding them), then the
    bigger ones (output bytes summed over that subgraph, capped as XLA caps them), then
    by name. ``placement`` is not used. O((N + E) log E).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import simulate
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> simulate(prob, Plan(priority=dfs_memory(prob))).valid
    True
    """
    g = problem.graph
    n = g.num_nodes
    size = _buffer_sizes(problem)
    ignored = problem.costs.class_id == _INPUT
    extra = np.zeros(n)
    total = np.zeros(n)
    cumulative = 0.0
    for v in range(n):  # index order is topological: inputs first
        if ignored[v]:
            continue
        p = problem.pred_idx[problem.pred_ptr[v]:problem.pred_ptr[v + 1]]
        cumulative += size[v]
        extra[v] = min(max(g.out_degree[v] - 1, 0) + extra[p].sum(), n)
        total[v] = min(size[v] + total[p].sum(), cumulative)
    name_rank = np.argsort(np.argsort(g.names, kind="stable"), kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((name_rank, -total, -extra))] = np.arange(n)
    roots = np.flatnonzero(g.out_degree == 0)
    return order_to_priority(_dfs_post_order(problem, roots[np.argsort(rank[roots])], rank))


def postorder(problem: Problem, placement: np.ndarray | None = None) -> np.ndarray:
    """XLA's post-order scheduler: a plain DFS post-order from the sinks, inputs in edge
    order. ``placement`` is not used. O(N + E).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import simulate
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> simulate(prob, Plan(priority=postorder(prob))).valid
    True
    """
    roots = np.flatnonzero(problem.graph.out_degree == 0)
    return order_to_priority(_dfs_post_order(problem, roots, None))


#: The schedulers :func:`best_memory_schedule` tries, in XLA's order.
MEMORY_SCHEDULERS = {"list": list_memory, "dfs": dfs_memory, "postorder": postorder}


def best_memory_schedule(problem: Problem, plan: Plan | None = None) -> tuple[np.ndarray, str]:
    """The XLA memory schedule with the lowest simulated peak memory for ``plan``.

    Each of :data:`MEMORY_SCHEDULERS` orders the graph; each order is simulated with
    ``plan``'s placement and fusion; the one whose fullest device (peak over capacity)
    is least full wins, ties broken by step time. Three simulations.

    Returns
    -------
    (priority, name)

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> prio, name = best_memory_schedule(prob)
    >>> name in MEMORY_SCHEDULERS
    True
    """
    prio, name, _ = _best_memory_schedule(LocalEvaluator(problem), plan or Plan())
    return prio, name


def _best_memory_schedule(ev: LocalEvaluator, plan: Plan) -> tuple[np.ndarray, str, SimResult]:
    """:func:`best_memory_schedule` simulating through ``ev``, fewer than three times when
    its budget runs out first (at least once); also returns the winner's result."""
    best: tuple[tuple[float, float], np.ndarray, str, SimResult] | None = None
    for name, scheduler in MEMORY_SCHEDULERS.items():
        if best is not None and ev.exhausted():
            break
        prio = scheduler(ev.problem, plan.placement)
        res = ev.simulate(plan.replace(priority=prio))
        key = (float((res.peak_memory / ev.problem.capacity).max()), res.step_time)
        if best is None or key < best[0]:
            best = (key, prio, name, res)
    assert best is not None
    return best[1], best[2], best[3]


@register("critical-path")
@dataclass
class CriticalPath:
    """Critical-path list scheduling: the ready op with the longest path to a sink first.

    Decides scheduling only: placement and fusion are ``init``'s (or the compiler's
    defaults). See :func:`critical_path`. One simulation, for the stats.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> plan, stats = CriticalPath().optimize(prob, frozenset({"scheduling"}), Budget(), 0)
    >>> plan.placement is None, stats["valid"]
    (True, True)
    """

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        ev = LocalEvaluator.from_budget(problem, budget)
        prio = critical_path(problem, None if init is None else init.placement)
        plan = compose(frozenset({"scheduling"}), init, Plan(priority=prio))
        return plan, result_stats(ev.simulate(plan), ev)


@register("xla-memory")
@dataclass
class XLAMemory:
    """XLA's default memory scheduler: the best of list, DFS and post-order by peak memory.

    Decides scheduling only: placement and fusion are ``init``'s (or the compiler's
    defaults). See :func:`best_memory_schedule`; ``stats["scheduler"]`` names the
    winner. Three simulations, one per scheduler (fewer on a smaller budget); the
    winner's is its result.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> plan, stats = XLAMemory().optimize(prob, frozenset({"scheduling"}), Budget(), 0)
    >>> stats["scheduler"] in MEMORY_SCHEDULERS
    True
    """

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        ev = LocalEvaluator.from_budget(problem, budget)
        prio, name, res = _best_memory_schedule(ev, init or Plan())
        plan = compose(frozenset({"scheduling"}), init, Plan(priority=prio))
        return plan, {**result_stats(res, ev), "scheduler": name}
