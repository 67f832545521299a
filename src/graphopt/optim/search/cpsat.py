"""Exact joint placement and scheduling of small graphs with OR-Tools CP-SAT.

The model follows docs/design.md's simulator semantics with fusion off, in integer time:

- **placement**: a Boolean ``x[u, d]`` per colocation unit and device, exactly one per unit;
- **ops**: one optional interval per op and device, present where the op runs, of the
  op's compute time there; no two intervals on one device overlap;
- **transfers**: an op ``u`` on device ``a`` with a consumer on ``b ≠ a`` sends its output
  once to ``b``: an optional interval of ``latency + bytes / bandwidth`` on the directed
  link ``a → b``, after ``u`` ends and before each such consumer starts. A link sends one
  transfer at a time, first come first served: it only carries outputs of ops on ``a``,
  queued as they end, so two transfers on it go in the order their ops ran (a Boolean
  per pair of ops). ``bytes`` is the largest of ``u``'s edges (the simulator sends the
  largest edge *to that device*: equal whenever a producer's edges carry equal bytes);
- **memory** per device: persistent bytes of its ops, plus (``transient_memory``) a
  cumulative of each output from its op's start until its last local consumer and its
  transfers end, each received tensor from its transfer's start until its last consumer
  there ends, and scratch while an op runs, within the device's capacity;
- **objective**: the makespan, the last op's end (``runtime``); or (``memory``, REGAL's
  baseline) the peak: one variable, at least every device's persistent bytes plus its
  cumulative, minimised. The memory model needs ``transient_memory``.

It relaxes the simulator in one way: a device or a link may stay idle while work is
ready for it, where the simulator's list scheduler never waits. The model's makespan is
then a lower bound a plan may not reach (for fusion off): on a 3-layer MLP on 2 GPUs,
scheduling only, the model holds back a bias read so that its 5 µs transfer does not
queue ahead of an activation, 0.653 ms; the best list schedule local search found takes
0.661 ms, the model's start order 0.672 ms. The solution becomes a plan (the placement,
and priorities in order of start time) that is simulated: the simulator's step time is
what counts. Link order matters: without it the model would send activations ahead of
queued weights, and on an 8-layer MLP on 4 GPUs (fusion off) its plans simulated 3–14%
slower than its makespan; with it, within 0.01%.

**Time.** ``time_steps`` integer steps span :attr:`SearchSpace.upper_bound` (every
kernel and transfer one after another). Durations are rounded to the nearest step and
made at least one step (an op with no cost still holds its device, as in the simulator),
so the model's makespan is within ``(ops on a path) / 2`` steps of the true one.
Memory is counted in KiB (demands rounded up, capacities down).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from graphopt.errors import BudgetExhausted, MissingDependencyError, UsageError, MAX_THREADS
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, register
from graphopt.optim.search._space import Decisions, SearchSpace, priority_ranks
from graphopt.sim import Plan, Problem

__all__ = ["CPSAT"]


@register("cpsat")
@dataclass
class CPSAT:
    """Constraint programming (CP-SAT): optimal placement and schedule of a small graph.

    Decides ``placement`` and/or ``scheduling`` (not ``fusion``: the model has none; the
    plan keeps ``init``'s fusion, or the compiler's). The initial plan is evaluated first
    and hinted to the solver, and the result is never worse than it.

    Raises
    ------
    GraphoptError
        ``fusion`` in the task; a graph of more than ``max_ops`` ops without ``force``;
        OR-Tools missing.

    Notes
    -----
    The model has ``O(N·D)`` op intervals, ``O(N·D²)`` transfer intervals and up to
    ``O(N²·D²)`` link-order constraints; CP-SAT proves optimality on tens of ops in
    seconds, not on thousands (a 1000-op graph with ``force``: no solution in 30 s). ``stats`` adds
    ``status`` (OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN), ``model_value`` and ``model_bound``
    (in the model: seconds of makespan, or bytes of peak memory), ``optimality_gap`` =
    (value − bound) / value and ``solver_seconds``. Ctrl-C stops the solver; its best
    solution is still simulated.

    **Determinism.** With ``workers=1`` the same seed gives the same plan, as long as the
    solver finishes before its time limit. With more workers CP-SAT races a portfolio of
    searches, and two runs may return different plans of equal model makespan. (CP-SAT's
    ``interleave_search``, reproducible on many workers, ran to its time limit even on
    8-op graphs it had solved, in OR-Tools 9.15: not used.)

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(3, 2), load_cluster("dgx1-v100:2"))
    >>> plan, stats = CPSAT(workers=1).optimize(prob, frozenset({"placement", "scheduling"}),
    ...                                         Budget(evals=10), seed=0,
    ...                                         init=Plan(fusion=np.zeros(prob.num_nodes)))
    >>> stats["status"], stats["step_time"] <= stats["initial_step_time"]
    ('OPTIMAL', True)

    References
    ----------
    L. Perron and F. Didier, "CP-SAT", Google OR-Tools, https://developers.google.com/optimization.
    P. Laborie et al., "IBM ILOG CP Optimizer for scheduling", Constraints 23, 2018
    (optional intervals, alternatives and no-overlap for scheduling).
    """

    objectives: ClassVar[tuple[str, ...]] = ("runtime", "memory")

    time_limit: float = field(default=30.0, metadata={"gt": 0,
        "help": "Solver seconds when the budget sets no time."})
    max_ops: int = field(default=200, metadata={"min": 1, "help": "Largest graph solved without ``force``."})
    force: bool = field(default=False, metadata={
        "help": "Build and solve the model above ``max_ops`` anyway."})
    workers: int = field(default=8, metadata={"min": 1, "limit": MAX_THREADS,
        "help": "CP-SAT search workers (threads); 1 makes the search reproducible."})
    time_steps: int = field(default=1_000_000, metadata={"min": 1,
        "help": "Integer time steps spanning the upper bound on the makespan."})
    transient_memory: bool = field(default=True, metadata={
        "help": "Bound live tensors and scratch per device too (else persistent bytes only)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        try:
            from ortools.sat.python import cp_model
        except ModuleNotFoundError as err:
            raise MissingDependencyError("cpsat needs OR-Tools: pip install ortools") from err
        if "fusion" in task:
            raise UsageError(f"cpsat decides placement and scheduling; task {sorted(task)} "
                             "asks for fusion, which its model does not have")
        if problem.num_nodes > self.max_ops and not self.force:
            raise UsageError(f"cpsat: graph {problem.graph.name!r} has {problem.num_nodes} ops, "
                             f"more than max_ops={self.max_ops}; the exact model would not "
                             "finish (pass force=True to try anyway)")
        space = SearchSpace(problem, task, init)
        ev = LocalEvaluator.from_budget(problem, budget)
        interrupted = False
        stats: dict[str, object] = {"status": "NOT_SOLVED"}
        try:
            start, _ = space.start(ev)
            if ev.exhausted():
                raise BudgetExhausted("no evaluation left to simulate a solution")
            if budget.objective == "memory" and not self.transient_memory:
                raise UsageError("cpsat: the memory objective needs transient_memory=true "
                                 "(live tensors are most of a peak)")
            model, x, s, unit = _build_model(cp_model.CpModel(), problem, space, start,
                                             self.time_steps, self.transient_memory,
                                             budget.objective)
            # leave a tenth of a time budget to simulate the solution
            limit = (self.time_limit if ev.max_seconds is None
                     else max(0.9 * (ev.max_seconds - ev.elapsed), 0.0))
            solver = cp_model.CpSolver()
            solver.parameters.max_time_in_seconds = limit
            solver.parameters.num_workers = self.workers
            solver.parameters.random_seed = seed % 2**31
            solver.parameters.catch_sigint_signal = False
            status, interrupted = _solve(solver, model)
            name = solver.status_name(status)
            stats = {"status": name, "solver_seconds": solver.wall_time}
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                obj, bound = solver.objective_value, solver.best_objective_bound
                stats.update(model_value=obj * unit, model_bound=bound * unit,
                             optimality_gap=(obj - bound) / obj if obj > 0 else 0.0)
                units = np.array([[solver.boolean_value(v) for v in row] for row in x]).argmax(1)
                starts = np.array([solver.value(v) for v in s], dtype=np.float64)
                dec = Decisions(units=units[None] if "placement" in task else None,
                                priority=priority_ranks(-starts)[None]
                                if "scheduling" in task else None)
                space.evaluate(ev, dec)
        except BudgetExhausted:
            pass
        except KeyboardInterrupt:
            interrupted = True
        return space.result(ev, interrupted, **stats)


def _solve(solver, model) -> tuple[int, bool]:
    """Solve in a worker thread so that Ctrl-C reaches Python: it stops the search, whose
    best solution so far is kept. Returns the status and whether Ctrl-C stopped it."""
    out, done = {}, threading.Event()

    def work():
        try:
            out["status"] = solver.solve(model)
        finally:
            done.set()

    threading.Thread(target=work, daemon=True).start()
    try:
        while not done.wait(0.1):
            pass
        return out["status"], False
    except KeyboardInterrupt:
        solver.stop_search()
        done.wait()
        return out["status"], True


def _build_model(m, problem: Problem, space: SearchSpace, start: Decisions, time_steps: int,
                 transient_memory: bool, objective: str = "runtime"):
    """The CP-SAT model of the module docstring. Returns the model, the placement
    Booleans ``x[u][d]``, the op start variables and the objective's unit (seconds per time
    step, or bytes per KiB for ``memory``)."""
    n, d_count, unit_of = problem.num_nodes, problem.num_devices, space.unit_of
    devs = range(d_count)
    unit = space.upper_bound / time_steps
    dur = np.maximum(np.rint(problem.costs.time / unit), 1).astype(np.int64)  # (N, D)
    max_bytes = np.zeros(n)
    np.maximum.at(max_bytes, problem.graph.src, problem.graph.edge_bytes)
    link = problem.transfer_time(max_bytes[:, None, None], *np.ix_(devs, devs))
    comm = np.maximum(np.rint(link / unit), 1).astype(np.int64)  # (N, D, D), diagonal unused
    ptr, succ = problem.succ_ptr, problem.succ_idx
    # consumers of each op that may sit on another device (not in its colocation unit)
    remote = [np.unique(succ[ptr[i]:ptr[i + 1]][unit_of[succ[ptr[i]:ptr[i + 1]]] != unit_of[i]])
              for i in range(n)]
    sends = np.array([min(len(r), d_count - 1) for r in remote])
    off = ~np.eye(d_count, dtype=bool)
    horizon = int(dur.max(axis=1).sum() + (sends * comm[:, off].max(axis=1, initial=0)).sum()) + 1

    # placement: one device per unit (fixed when placement is not searched)
    x = [[m.new_bool_var(f"x{u}_{d}") for d in devs] for u in range(space.num_units)]
    given = space.fixed_placement[space.first_node] if start.units is None else start.units[0]
    for u, row in enumerate(x):
        m.add_exactly_one(row)
        if "placement" in space.task:
            m.add_hint(row[given[u]], True)
        else:
            m.add(row[given[u]] == 1)

    def on(i, d):
        return x[unit_of[i]][d]

    # ops: start, end, one optional interval per device
    s = [m.new_int_var(0, horizon, f"s{i}") for i in range(n)]
    e = [m.new_int_var(0, horizon, f"e{i}") for i in range(n)]
    ops = [[m.new_optional_fixed_size_interval_var(s[i], int(dur[i, d]), on(i, d), f"op{i}_{d}")
            for d in devs] for i in range(n)]
    for i in range(n):
        m.add(e[i] == s[i] + sum(int(dur[i, d]) * on(i, d) for d in devs))
        for v in succ[ptr[i]:ptr[i + 1]]:
            m.add(s[v] >= e[i])
    for d in devs:
        m.add_no_overlap([ops[i][d] for i in range(n)])

    # transfers: once per producer and destination device, one at a time per link
    links: dict[tuple[int, int], list] = {(a, b): [] for a in devs for b in devs if a != b}
    sent = []  # (producer, a, b, present, start, duration)
    for u in range(n):
        if not len(remote[u]):
            continue
        for (a, b), on_link in links.items():
            z = m.new_bool_var(f"z{u}_{a}_{b}")
            ts = m.new_int_var(0, horizon, f"ts{u}_{a}_{b}")
            c = int(comm[u, a, b])
            on_link.append(m.new_optional_fixed_size_interval_var(ts, c, z, f"t{u}_{a}_{b}"))
            m.add_implication(z, on(u, a))
            m.add_bool_or([on(v, b) for v in remote[u]] + [z.Not()])
            m.add(ts >= e[u]).only_enforce_if(z)
            for v in remote[u]:
                m.add_bool_or([on(u, a).Not(), on(v, b).Not(), z])
                m.add(s[v] >= ts + c).only_enforce_if([on(u, a), on(v, b)])
            sent.append((u, a, b, z, ts, c))
    for on_link in links.values():
        m.add_no_overlap(on_link)
    # first come, first served: a link a → b carries only transfers of ops on device a,
    # queued as those ops end, so two transfers on it go in the order their ops ran
    queued: dict[tuple[int, int], list] = {}
    for u, a, b, z, ts, c in sent:
        queued.setdefault((a, b), []).append((u, z, ts, c))
    first: dict[tuple[int, int], Any] = {}  # (u, w) → "u ends before w"
    for on_link in queued.values():
        for k, (u, zu, tu, cu) in enumerate(on_link):
            for w, zw, tw, cw in on_link[k + 1:]:
                if (u, w) not in first:
                    o = first[u, w] = m.new_bool_var(f"o{u}_{w}")
                    m.add(e[u] <= e[w]).only_enforce_if(o)
                    m.add(e[w] + 1 <= e[u]).only_enforce_if(o.Not())
                o = first[u, w]
                m.add(tu + cu <= tw).only_enforce_if([o, zu, zw])
                m.add(tw + cw <= tu).only_enforce_if([o.Not(), zu, zw])

    # memory: persistent bytes, and live tensors and scratch as a cumulative per device
    kib = 1024.0
    pers = np.ceil(problem.persistent / kib).astype(np.int64)
    cap = np.floor(problem.capacity / kib).astype(np.int64)
    held = [sum(int(pers[i]) * on(i, d) for i in range(n) if pers[i]) for d in devs]
    if not transient_memory:
        for d in devs:
            m.add(held[d] <= int(cap[d]))
    else:
        items: dict[int, tuple[list, list[int]]] = {d: ([], []) for d in devs}  # intervals, demands
        out = np.ceil(problem.out_bytes / kib).astype(np.int64)
        temp = np.ceil(problem.temp_bytes / kib).astype(np.int64)
        live_end = {}
        for i in range(n):
            if temp[i]:
                for d in devs:
                    items[d][0].append(ops[i][d])
                    items[d][1].append(int(temp[i]))
            if not out[i]:
                continue
            end = live_end[i] = m.new_int_var(0, horizon, f"le{i}")
            size = m.new_int_var(0, horizon, f"ls{i}")
            m.add(end >= e[i])
            for v in succ[ptr[i]:ptr[i + 1]]:
                for d in devs:
                    m.add(end >= e[v]).only_enforce_if([on(i, d), on(v, d)])
            for d in devs:
                items[d][0].append(m.new_optional_interval_var(s[i], size, end, on(i, d),
                                                               f"out{i}_{d}"))
                items[d][1].append(int(out[i]))
        for u, a, b, z, ts, c in sent:
            if u in live_end:
                m.add(live_end[u] >= ts + c).only_enforce_if(z)
            nbytes = int(np.ceil(max_bytes[u] / kib))
            if not nbytes:
                continue
            end = m.new_int_var(0, horizon, f"re{u}_{a}_{b}")
            size = m.new_int_var(0, horizon, f"rs{u}_{a}_{b}")
            m.add(end >= ts + c)
            for v in remote[u]:
                m.add(end >= e[v]).only_enforce_if([on(u, a), on(v, b)])
            items[b][0].append(m.new_optional_interval_var(ts, size, end, z, f"recv{u}_{a}_{b}"))
            items[b][1].append(nbytes)
        peak = m.new_int_var(0, max(int(cap.max()), 0), "peak")
        for d in devs:  # CP-SAT takes an affine capacity: a variable for what is left
            free = m.new_int_var(0, max(int(cap[d]), 0), f"free{d}")
            m.add(free == (peak if objective == "memory" else int(cap[d])) - held[d])
            m.add(free <= int(cap[d]) - held[d])
            m.add_cumulative(items[d][0], items[d][1], free)
        if objective == "memory":
            m.minimize(peak)
            return m, x, s, kib

    makespan = m.new_int_var(0, horizon, "makespan")
    m.add_max_equality(makespan, e)
    m.minimize(makespan)
    return m, x, s, unit
