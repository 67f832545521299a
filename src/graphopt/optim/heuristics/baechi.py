"""Baechi's memory-constrained placement algorithms: m-TOPO, m-ETF and m-SCT.

Jeon, Cai, Shetty, Srivastava, Chandramowlishwaran, Ramesh, Gupta and Fang, "Baechi:
Fast device placement of machine learning graphs", ACM SoCC 2020. The three
algorithms adapt classic scheduling results to devices with limited memory:

- **m-TOPO** walks the ops in topological order and fills one device after another up
  to a balanced share of the memory.
- **m-ETF** (earliest task first; Hwang, Chow, Anger and Lee, SIAM J. Comput. 18(2),
  1989) repeatedly starts the ready op that can start earliest on any device with room
  for it.
- **m-SCT** (small communication times; Hanen and Munier, "An approximation algorithm
  for scheduling dependent tasks on m processors with small communication delays",
  1995) is m-ETF that keeps a device waiting for the *favourite child* of the op it
  just ran, unless some other op is already ready everywhere. Favourite children come
  from the LP relaxation of the scheduling problem.

All three first grow the colocation groups with Baechi's co-placement rule (an op
whose output only one op consumes goes with that op; see
:func:`~graphopt.optim.heuristics._common.coplace`, and ``coplace=False`` to turn it
off), respect the groups (a group goes where its first member goes, with all its
persistent bytes), and respect each device's memory, first by their own estimate,
then checked with the simulator (:func:`~graphopt.optim.heuristics._common.fit_memory`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.heuristics._common import coplace, fit_memory, result_stats, units, upward_rank
from graphopt.optim.heuristics._listsched import ListScheduler
from graphopt.sim import Plan, Problem

__all__ = ["MTopo", "METF", "MSCT", "etf_schedule", "favourite_children"]


@register("m-topo")
@dataclass
class MTopo:
    """Baechi's m-TOPO: fill devices in topological order up to a balanced memory share.

    Units (co-placed groups, lone ops) are taken in topological order of their first
    member and charged their footprint as if nothing were ever freed (persistent +
    outputs + the largest scratch). Device 0 takes units until the next would pass
    ``min(limit, total / D + largest unit)`` (Baechi's uniform variant), then device 1,
    and so on; units left when the last device is full go to the device with the most
    room (``stats["overflow"]`` counts them). The limit starts at each device's capacity
    and is calibrated against the simulator
    (:func:`~graphopt.optim.heuristics._common.fit_memory`): this estimate is
    pessimistic, so under tight memory the limit grows past the capacity.

    Complexity: O(N) per round; at most ``max_rounds`` rounds, then at most 50
    simulations of memory repair.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> plan, stats = MTopo().optimize(prob, frozenset({"placement"}), Budget(), 0)
    >>> stats["valid"], sorted(set(plan.placement.tolist()))
    (True, [0, 1])
    """

    max_rounds: int = field(default=8, metadata={"min": 1,
        "help": "Place-and-simulate rounds to fit memory."})
    coplace: bool = field(default=True, metadata={
        "help": "An op whose only consumer is B goes with B (Baechi's grouper)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        ev = LocalEvaluator.from_budget(problem, budget)
        unit, k = units(coplace(problem) if self.coplace else problem.graph.coloc)
        mem = (np.bincount(unit, weights=problem.persistent + problem.out_bytes, minlength=k)
               + _group_max(unit, problem.temp_bytes, k))
        share = mem.sum() / problem.num_devices + mem.max(initial=0.0)

        def build(limit: np.ndarray) -> tuple[Plan, np.ndarray]:
            cap = np.minimum(limit, share)
            used = np.zeros(problem.num_devices)
            where = np.empty(k, dtype=np.int64)
            d, overflow = 0, 0
            for u in range(k):
                while d < len(cap) and used[d] + mem[u] > cap[d]:
                    d += 1
                if d < len(cap):
                    where[u] = d
                else:  # every device is full: the roomiest takes it
                    where[u] = int(np.argmax(limit - used))
                    overflow += 1
                used[where[u]] += mem[u]
            plan = Plan(placement=where[unit], meta={"overflow": overflow})
            return compose(task | {"placement"}, init, plan), used

        plan, res = fit_memory(ev, build, self.max_rounds)
        return plan.replace(meta={}), {**result_stats(res, ev), **plan.meta,
                                       "share": float(share)}


def _group_max(unit: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros(k)
    np.maximum.at(out, unit, x)
    return out


def etf_schedule(problem: Problem, limit: np.ndarray, favourite: np.ndarray | None = None,
                 coloc: np.ndarray | None = None) -> ListScheduler:
    """Memory-constrained ETF (or SCT, given favourite children) list scheduling.

    At every step, among the ready ops (inputs all scheduled; inputs and parameters
    follow their first consumer, see :class:`ListScheduler`) and the devices each may
    use (its colocation group's once placed, and only where the memory ledger has room),
    take the pair that can **start earliest**; ties go to the op with the higher static
    level (longest path to a sink without communication), then the earlier finish, the
    device with less memory in use, the lower op and device index. When no pair has
    room, the op that could start earliest goes to the device with the most room.

    With ``favourite`` (N,: each op's favourite child or -1), a device whose last op's
    favourite child is ready, and could start there no later than anywhere else, waits
    for it: it takes only that child or an op already ready on every device by the time
    the child could start (Baechi's SCT "awake" state).

    ``coloc`` replaces the graph's colocation groups (see :class:`ListScheduler`).

    Returns
    -------
    ListScheduler
        The finished schedule: ``dev``, ``start``, ``finish``, ``overflow``.

    Notes
    -----
    Estimates are refreshed lazily: one made before its device's last change is a lower
    bound on the start time, so only stale pairs that could still beat the best fresh
    pair are re-estimated before each choice. O(R·D) array work per step for R ready
    ops, plus the re-estimates (O(k·D) for an op of in-degree k).
    """
    n, nd = problem.num_nodes, problem.num_devices
    time = problem.costs.time
    level = upward_rank(problem, time.mean(axis=1))
    s = ListScheduler(problem, limit, coloc)
    pending = s.pending.copy()
    drt = np.zeros((n, nd))  # estimates: inputs' arrival, and bytes needed, per device
    need = np.zeros((n, nd))
    seen = np.zeros((n, nd), dtype=np.int64)  # s.version when each estimate was made

    def estimate(nodes: np.ndarray) -> None:
        drt[nodes], need[nodes] = s.estimate(nodes, np.arange(nd))
        seen[nodes] = s.version

    ready = np.flatnonzero((pending == 0) & ~s.follower)
    estimate(ready)
    while len(ready):
        while True:  # pick the best pair; re-estimate stale rows that might beat it
            est = np.maximum(s.avail, drt[ready])
            allow = np.ones((len(ready), nd), dtype=bool)
            gdev = s.pinned(ready)
            pinned = np.flatnonzero(gdev >= 0)
            allow[pinned] = False
            allow[pinned, gdev[pinned]] = True
            ok = allow & (s.used + need[ready] <= s.limit)
            if favourite is not None:
                _wait_for_favourites(s, favourite, ready, est, drt[ready], ok)
            if ok.any():
                e = np.where(ok, est, np.inf)
                r, c = np.nonzero(e == e.min())
                pick = np.lexsort((c, ready[r], s.used[c], est[r, c] + time[ready[r], c],
                                   -level[ready[r]], est[r, c]))[0]
                v, d, best = int(ready[r[pick]]), int(c[pick]), est[r[pick], c[pick]]
            else:
                e = np.where(allow, est, np.inf)
                v = int(ready[np.lexsort((ready, -level[ready], e.min(axis=1)))[0]])
                d, best = -1, np.inf
            suspect = (allow & (seen[ready] < s.version) & (est <= best)).any(axis=1)
            if not suspect.any():
                break
            estimate(ready[suspect])
        s.assign(v, d if d >= 0 else s.roomiest(v))
        ready = ready[ready != v]
        new = []
        for j in range(problem.succ_ptr[v], problem.succ_ptr[v + 1]):
            w = int(problem.succ_idx[j])
            pending[w] -= 1
            if pending[w] == 0:
                new.append(w)
        if new:
            estimate(np.array(new))
            ready = np.concatenate([ready, new])
    s.place_followers()
    return s


def _wait_for_favourites(s: ListScheduler, favourite: np.ndarray, idx: np.ndarray,
                         est: np.ndarray, drt: np.ndarray, ok: np.ndarray) -> None:
    """SCT: restrict each device that waits for a favourite child (in place on ``ok``)."""
    urgent = drt.max(axis=1)  # when each ready op has its inputs on every device
    for d in range(len(s.avail)):
        u = s.last[d]
        if u < 0 or favourite[u] < 0 or favourite[u] not in idx:
            continue
        i = int(np.flatnonzero(idx == favourite[u])[0])
        if ok[i, d] and est[i, d] <= est[i][ok[i]].min():
            ok[:, d] &= (idx == idx[i]) | (urgent <= est[i, d])


def favourite_children(problem: Problem, lp_max_edges: int = 10_000) -> tuple[np.ndarray, str]:
    """Each op's favourite child (-1: none): the out-edge whose communication the
    schedule should avoid by running the child right after it on the same device.

    Up to ``lp_max_edges`` edges, solves the LP relaxation of Hanen and Munier as Baechi
    does: variables ``x_e ∈ [0, 1]`` (1: edge ``e = (i, j)`` pays its communication
    ``c_e``), start times ``s_i ≥ 0`` and the makespan ``w``; minimize ``w`` subject to
    ``s_i + p_i + c_e·x_e ≤ s_j`` on every edge, ``s_i + p_i ≤ w``, and at most one
    free out-edge per op and one free in-edge per op (``Σ x ≥ degree − 1``). Edges with
    ``x_e < 1/2``, lowest first, become favourite while neither end has one yet (the
    rounding can otherwise break the at-most-one rules). Times are the mean over
    devices; ``c_e`` the transfer time on the mean link (:meth:`Problem.transfer_time`).

    Above ``lp_max_edges`` (HiGHS takes about 1 s for 7,000 edges and a minute for
    34,000), a greedy approximation: edges in
    decreasing length of the longest path through them (with communication), each
    favourite while neither end has one yet. It keeps critical paths on one device,
    which is what the LP's free edges do.

    Returns
    -------
    (favourite, how)
        ``how`` is ``"lp"``, ``"greedy"`` or ``"none"`` (no edges).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> fav, how = favourite_children(Problem(mlp_training_graph(), load_cluster("dgx1-v100:2")))
    >>> how, int((fav >= 0).sum()) > 0
    ('lp', True)
    """
    g = problem.graph
    n, e = g.num_nodes, g.num_edges
    fav = np.full(n, -1, dtype=np.int64)
    if e == 0:
        return fav, "none"
    p = problem.costs.time.mean(axis=1) * 1e6  # microseconds: a well-scaled LP
    c = problem.transfer_time(g.edge_bytes) * 1e6
    if e <= lp_max_edges:
        x = _favourite_lp(g.src, g.dst, p, c, n)
        cand = np.flatnonzero(x < 0.5)
        cand = cand[np.lexsort((-c[cand], x[cand]))]
        how = "lp"
    else:
        top = _top_level(problem, p, c)
        bottom = upward_rank(problem, p, problem.transfer_time(problem.succ_bytes) * 1e6)
        through = top[g.src] + p[g.src] + c + bottom[g.dst]
        cand = np.lexsort((np.arange(e), -through))
        how = "greedy"
    has_parent = np.zeros(n, dtype=bool)
    for k in cand:
        i, j = g.src[k], g.dst[k]
        if fav[i] < 0 and not has_parent[j]:
            fav[i] = j
            has_parent[j] = True
    return fav, how


def _favourite_lp(src: np.ndarray, dst: np.ndarray, p: np.ndarray, c: np.ndarray, n: int
                  ) -> np.ndarray:
    e = len(src)
    xs, ss, w = np.arange(e), e + np.arange(n), e + n
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    rhs: list[np.ndarray] = []

    def add(r, col, v) -> None:
        rows.append(np.asarray(r))
        cols.append(np.asarray(col))
        vals.append(np.asarray(v, dtype=np.float64))

    k = np.arange(e)  # precedence: s_i - s_j + c_e x_e <= -p_i
    add(k, ss[src], np.ones(e))
    add(k, ss[dst], -np.ones(e))
    add(k, xs, c)
    rhs.append(-p[src])
    r0 = e
    sinks = np.setdiff1d(np.arange(n), src)  # makespan: s_i - w <= -p_i
    add(r0 + np.arange(len(sinks)), ss[sinks], np.ones(len(sinks)))
    add(r0 + np.arange(len(sinks)), np.full(len(sinks), w), -np.ones(len(sinks)))
    rhs.append(-p[sinks])
    r0 += len(sinks)
    for end in (src, dst):  # at most one free edge out of / into a node: -Σx <= 1 - deg
        deg = np.bincount(end, minlength=n)
        many = np.flatnonzero(deg >= 2)
        row_of = np.full(n, -1)
        row_of[many] = r0 + np.arange(len(many))
        sel = np.flatnonzero(deg[end] >= 2)
        add(row_of[end[sel]], xs[sel], -np.ones(len(sel)))
        rhs.append(1.0 - deg[many])
        r0 += len(many)
    a = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(r0, e + n + 1))
    obj = np.zeros(e + n + 1)
    obj[w] = 1.0
    bounds = [(0.0, 1.0)] * e + [(0.0, None)] * (n + 1)
    sol = linprog(obj, A_ub=a, b_ub=np.concatenate(rhs), bounds=bounds, method="highs")
    if sol.x is None:  # cannot happen for a DAG (all x = 1 is feasible); be safe
        return np.ones(e)
    return sol.x[:e]


def _top_level(problem: Problem, p: np.ndarray, c_edge: np.ndarray) -> np.ndarray:
    """Longest path from a source to each node, excluding the node (edge times in the
    graph's edge order)."""
    g = problem.graph
    ptr, nodes, eids = g.pred
    top = np.zeros(g.num_nodes)
    for v in range(g.num_nodes):
        a, b = ptr[v], ptr[v + 1]
        if b > a:
            u = nodes[a:b]
            top[v] = (top[u] + p[u] + c_edge[eids[a:b]]).max()
    return top


@register("m-etf")
@dataclass
class METF:
    """Baechi's m-ETF: earliest-task-first list scheduling under memory limits.

    See :func:`etf_schedule`. When the task includes scheduling, the plan's priorities
    replay the ETF order on each device.

    Complexity: O(N·R·k + N·R·D) per round for R ready ops of in-degree k; at most
    ``max_rounds`` rounds and simulations.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> plan, stats = METF().optimize(prob, frozenset({"placement"}), Budget(), 0)
    >>> stats["valid"]
    True
    """

    max_rounds: int = field(default=8, metadata={"min": 1,
        "help": "Schedule-and-simulate rounds to fit memory."})
    coplace: bool = field(default=True, metadata={
        "help": "An op whose only consumer is B goes with B (Baechi's grouper)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        return _run_etf(problem, task, budget, init, self.max_rounds, None, self.coplace, {})


@register("m-sct")
@dataclass
class MSCT:
    """Baechi's m-SCT: m-ETF that waits for favourite children chosen by an LP.

    Favourite children come from :func:`favourite_children` (the LP relaxation solved
    with HiGHS up to ``lp_max_edges`` edges, a greedy critical-path approximation
    beyond); the schedule is :func:`etf_schedule` with them. ``stats["favourites"]``
    says how they were chosen.

    Complexity: the LP (HiGHS, interior point / simplex on E + N variables), then as
    m-ETF.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> plan, stats = MSCT().optimize(prob, frozenset({"placement"}), Budget(), 0)
    >>> stats["valid"], stats["favourites"]
    (True, 'lp')
    """

    max_rounds: int = field(default=8, metadata={"min": 1,
        "help": "Schedule-and-simulate rounds to fit memory."})
    coplace: bool = field(default=True, metadata={
        "help": "An op whose only consumer is B goes with B (Baechi's grouper)."})
    lp_max_edges: int = field(default=10_000, metadata={"min": 0,
        "help": "Above this, favourite children by a greedy approximation."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        fav, how = favourite_children(problem, self.lp_max_edges)
        return _run_etf(problem, task, budget, init, self.max_rounds, fav, self.coplace,
                        {"favourites": how, "favourite_edges": int((fav >= 0).sum())})


def _run_etf(problem: Problem, task: frozenset[str], budget: Budget, init: Plan | None,
             max_rounds: int, favourite: np.ndarray | None, grouped: bool, extra: dict
             ) -> tuple[Plan, dict]:
    ev = LocalEvaluator.from_budget(problem, budget)
    coloc = coplace(problem) if grouped else None

    def build(limit: np.ndarray) -> tuple[Plan, np.ndarray]:
        s = etf_schedule(problem, limit, favourite, coloc)
        plan = Plan(placement=s.dev, priority=s.priority(), meta=s.summary())
        return compose(task | {"placement"}, init, plan), s.peak

    plan, res = fit_memory(ev, build, max_rounds)
    return plan.replace(meta={}), {**result_stats(res, ev), **plan.meta, **extra}
