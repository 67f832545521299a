"""Pieces every heuristic shares: colocation units, ranks, memory footprints, and
checking a plan's memory with the simulator.

Nothing here is a method of its own; the registered methods live in the sibling modules.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphopt.evaluate.local import LocalEvaluator
from graphopt.ir import Graph
from graphopt.sim import Plan, Problem, SimResult

__all__ = ["units", "coplace", "unify_groups", "upward_rank", "footprint", "fit_memory",
           "repair_memory", "result_stats", "order_to_priority"]


def units(coloc: np.ndarray) -> tuple[np.ndarray, int]:
    """Placement units: each colocation group is one unit, every other node its own.
    Every placer and search that keeps groups whole places units.

    ``coloc`` holds a group id per node (-1: none), as ``Graph.coloc`` or
    :func:`coplace`. Returns ``(unit, count)``: the unit id of every node (int64,
    (N,)), numbered by the unit's first member in topological order, and the number of
    units.

    >>> from graphopt.ir.generate import mlp_training_graph
    >>> u, k = units(mlp_training_graph(layers=2, hidden=8, batch=4).coloc)
    >>> k < len(u), bool((np.diff(np.unique(u)) == 1).all())
    (True, True)
    """
    n = len(coloc)
    key = np.where(coloc >= 0, coloc, coloc.max(initial=-1) + 1 + np.arange(n))
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inv.ravel()], len(first)


def coplace(problem: Problem) -> np.ndarray:
    """Colocation groups grown by co-placement: an op whose output only one op consumes
    joins that op's group (Baechi's co-placement grouper; the grouping rule of
    Mirhoseini et al. 2017), so chains stay on one device, where the compiler can still
    fuse them and no tensor crosses a link.

    Unlike the plain rule, which can chain a whole graph into one group through a
    shared consumer (every branch of a final sum has that sum as its only consumer), a
    group stops growing at ``1/D`` of the total compute (mean op time over devices):
    edges are taken in topological order of the producer and merge only within that
    bound. The graph's own colocation groups always merge.

    Returns group ids (int64, (N,); -1 for an op left alone); every colocation group of
    the graph lies inside one of them. O((N + E)·α(N)) with union-find.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> g = mlp_training_graph(layers=2, hidden=8, batch=4)
    >>> c = coplace(Problem(g, load_cluster("dgx1-v100:2")))
    >>> bool(c[g.index["loss"]] == c[g.index["loss.backward"]] >= 0)   # its only consumer
    True
    """
    g = problem.graph
    n = g.num_nodes
    work = problem.costs.time.mean(axis=1)
    # a hair over 1/D: sums of the same times in another order differ in the last bits
    cap = work.sum() / problem.num_devices * (1 + 1e-9)
    parent = np.arange(n)
    weight = work.copy()

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: int, b: int) -> None:
        a, b = find(a), find(b)
        if a != b:
            parent[b] = a
            weight[a] += weight[b]

    grouped = np.flatnonzero(g.coloc >= 0)
    _, first, inv = np.unique(g.coloc[grouped], return_index=True, return_inverse=True)
    for v, rep in zip(grouped, grouped[first][inv.ravel()]):
        union(int(rep), int(v))
    ptr, succ, _ = g.succ
    for u in np.flatnonzero(g.out_degree == 1):
        a, b = find(int(u)), find(int(succ[ptr[u]]))
        if a != b and weight[a] + weight[b] <= cap:
            union(b, a)
    root = np.array([find(i) for i in range(n)], dtype=np.int64)
    return np.where((np.bincount(root, minlength=n)[root] > 1) | (g.coloc >= 0), root, -1)


def unify_groups(graph: Graph, place: np.ndarray, num_devices: int) -> np.ndarray:
    """``place`` with every colocation group moved to the device most of its members
    were given (ties: the lower device). O(N)."""
    place = np.array(place, dtype=np.int64)
    grouped = np.flatnonzero(graph.coloc >= 0)
    if len(grouped):
        g = graph.coloc[grouped]
        votes = np.zeros((g.max() + 1, num_devices), dtype=np.int64)
        np.add.at(votes, (g, place[grouped]), 1)
        place[grouped] = votes.argmax(axis=1)[g]
    return place


def upward_rank(problem: Problem, node_time: np.ndarray, edge_time: np.ndarray | None = None
                ) -> np.ndarray:
    """Longest path from each node to a sink, counting its own time (HEFT's ``rank_u``),
    for given node and edge times: the one implementation behind HEFT's rank (mean
    times), the critical-path priority of a placement
    (:func:`~graphopt.optim.heuristics.schedulers.critical_path`) and Baechi's levels.

    Parameters
    ----------
    node_time : float array (N,)
    edge_time : float array (E,), optional
        Time of each edge in the order of ``problem.succ_idx`` (default: no communication).

    Notes
    -----
    O(N + E). A node ranks at least as high as each of its successors, so sorting by
    ``(-rank, index)`` is a topological order.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(3, 1), load_cluster("dgx1-v100:1"))
    >>> upward_rank(prob, np.ones(3)).tolist()
    [3.0, 2.0, 1.0]
    """
    ptr, succ = problem.succ_ptr, problem.succ_idx
    et = np.zeros(len(succ)) if edge_time is None else edge_time
    rank = np.array(node_time, dtype=np.float64)
    for v in range(problem.num_nodes - 1, -1, -1):
        a, b = ptr[v], ptr[v + 1]
        if b > a:
            rank[v] += (et[a:b] + rank[succ[a:b]]).max()
    return rank


def footprint(problem: Problem) -> np.ndarray:
    """Bytes a node holds if nothing were ever freed: persistent + output + scratch.
    The conservative per-op memory of Baechi's m-TOPO."""
    return problem.persistent + problem.out_bytes + problem.temp_bytes


def order_to_priority(order: np.ndarray) -> np.ndarray:
    """Priorities that make the simulator prefer earlier entries of ``order``."""
    n = len(order)
    prio = np.empty(n)
    prio[np.asarray(order, dtype=np.int64)] = n - np.arange(n, dtype=np.float64)
    return prio


def result_stats(res: SimResult, ev: LocalEvaluator) -> dict:
    """The stats every simulating heuristic reports: ``res`` (its plan's result) and the
    simulations evaluator ``ev`` counted."""
    out: dict = {"evals": ev.evals, "valid": bool(res.valid), "step_time": res.step_time}
    if not res.valid:
        out["reason"] = res.reason
    return out


def fit_memory(ev: LocalEvaluator, build: Callable[[np.ndarray], tuple[Plan, np.ndarray]],
               max_rounds: int = 8, max_repairs: int = 50, grow: float = 1.4,
               shrink: float = 0.9) -> tuple[Plan, SimResult]:
    """Run a memory-aware heuristic until the simulator agrees that its plan fits.

    ``build(limit)`` places the graph of ``ev.problem`` keeping each device under
    ``limit`` (bytes, (D,)) by the heuristic's own memory estimate, and returns the plan and that estimate of
    each device's peak. Estimates miss what only the simulator knows (the order ops
    really run in; that an output is sent, and held by the receiver, as soon as its
    producer ends) or are deliberately pessimistic (m-TOPO never frees anything), so
    each plan is simulated, and while it is out of memory the limits
    ``alpha * scale[d] * capacity[d]`` are recalibrated:

    - if the heuristic had to exceed some limit (its estimate says the graph does not
      fit), the estimate is pessimistic: ``alpha`` grows, by ``grow`` until a larger
      ``alpha`` is known to fail the other way, then by bisection (geometric mean);
    - if it kept within its limits, the estimate is optimistic: ``alpha`` shrinks by
      bisection if a smaller ``alpha`` is known to be too small, else each device over
      capacity gets ``scale[d] *= min(shrink, capacity / peak)``.

    After ``max_rounds`` rounds, the least overflowing plan goes to
    :func:`repair_memory`, which may use the simulations the rounds left of
    ``max_rounds + max_repairs``. Every simulation goes through ``ev``, whose budget
    ends both phases early.

    Returns
    -------
    (plan, result)
        The first valid plan, or else the one that overflowed least.

    Raises
    ------
    BudgetExhausted
        ``ev``'s budget allows not even the first simulation.
    """
    cap = ev.problem.capacity
    alpha, lo, hi = 1.0, 0.0, np.inf  # lo: too small (pressed); hi: too big (optimistic)
    scale = np.ones(len(cap))
    best: tuple[float, Plan, SimResult] | None = None
    first = ev.evals
    for _ in range(max_rounds):
        limit = alpha * scale * cap
        plan, estimate = build(limit.copy())
        res = ev.simulate(plan)
        if res.valid:
            return plan, res
        over = float((res.peak_memory / cap).max())
        if best is None or over < best[0]:
            best = (over, plan, res)
        hot = res.peak_memory > cap
        if not hot.any() or ev.exhausted():  # invalid for another reason, or no budget left
            break
        if (estimate > limit * (1 + 1e-9)).any():
            lo = alpha
            hi = hi if hi > lo else np.inf
            alpha = np.sqrt(lo * hi) if np.isfinite(hi) else alpha * grow
        elif lo > 0:
            hi = alpha
            alpha = np.sqrt(lo * hi)
        else:
            scale[hot] *= np.minimum(shrink, cap[hot] / res.peak_memory[hot])
    assert best is not None
    return repair_memory(ev, best[1], max_rounds + max_repairs - (ev.evals - first), best[2])


def repair_memory(ev: LocalEvaluator, plan: Plan, max_rounds: int = 50,
                  result: SimResult | None = None) -> tuple[Plan, SimResult]:
    """Move the smallest placement units off devices over capacity until the plan fits.

    While the simulated plan is out of memory, each device over capacity hands its
    units (colocation groups, lone ops) to the device with the most free memory,
    smallest footprint first (:func:`footprint`), until the footprints moved cover its
    excess; then the plan is simulated again, through ``ev``. A unit may move again in
    a later round, which lets the repair explore; at most ``max_rounds`` simulations,
    counting the first unless its ``result`` is given, and none once ``ev``'s budget is
    spent.

    Returns
    -------
    (plan, result)
        The first valid plan, or the last one tried. ``plan.meta["moved_units"]``
        counts the moves.
    """
    problem = ev.problem
    unit, k = units(problem.graph.coloc)
    unit_mem = np.bincount(unit, weights=footprint(problem), minlength=k)
    cap, nd = problem.capacity, problem.num_devices
    base = plan.placement if plan.placement is not None else np.zeros(problem.num_nodes, np.int64)
    part = np.zeros(k, dtype=np.int64)
    part[unit] = base
    moved = 0
    res = ev.simulate(plan) if result is None else result
    evals = int(result is None)
    while not res.valid and evals < max_rounds and nd > 1 and not ev.exhausted():
        over = np.flatnonzero(res.peak_memory > cap)
        if len(over) == 0:  # invalid for another reason
            break
        free = cap - res.peak_memory
        for d in over:
            excess = res.peak_memory[d] - cap[d]
            mine = np.flatnonzero(part == d)
            for u in mine[np.argsort(unit_mem[mine], kind="stable")]:
                if excess <= 0:
                    break
                target = int(np.argmax(np.where(np.arange(nd) == d, -np.inf, free)))
                part[u] = target
                free[target] -= unit_mem[u]
                excess -= unit_mem[u]
                moved += 1
        plan = plan.replace(placement=part[unit], meta={**plan.meta, "moved_units": moved})
        res = ev.simulate(plan)
        evals += 1
    return plan, res
