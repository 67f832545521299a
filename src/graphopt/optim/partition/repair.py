"""OR-Tools CP-SAT models of multi-chip partitioning: the repair of a proposal into the
nearest valid partition, and the partition of highest modelled throughput.

**Encoding.** Chips sit in a chain, and every constraint of
:mod:`graphopt.optim.partition.constraints` speaks of order along it, so each op ``u``
gets ``D - 1`` order Booleans ``y[u, c] = (chip[u] > c)`` (``y[u, c] ⇒ y[u, c - 1]``).
Then every constraint is linear or a two-literal clause:

- acyclic dataflow, an edge ``u → v``: ``y[u, c] ⇒ y[v, c]`` for every ``c``;
- ops on chip ``c``: ``y[u, c - 1] − y[u, c]`` (with ``y[u, -1] = 1``, ``y[u, D - 1] = 0``),
  so the SRAM of a chip is a linear sum of those differences;
- no skipping chips: a Boolean ``used[c]`` bounds the ops on chip ``c`` from both sides,
  and ``used[c] ⇒ used[c - 1]``;
- colocation groups: equal order Booleans.

**Repair** minimizes the confidence-weighted distance along the chain to the proposal,
``Σ_u w_u · |chip[u] − proposal[u]|``, itself linear in the ``y`` (one term per order
Boolean on the wrong side of the proposal): a confident op is moved last and least. The
model is built once per problem; each repair only sets new objective coefficients and
a hint (the proposal).

**Throughput** (:func:`solve_throughput`, the CP-SAT baseline) minimizes the interval
``I ≥ compute[c]`` and ``I ≥ latency + bytes crossing the boundary after c / bandwidth``
for every chip ``c``: a tensor crosses boundary ``c`` when its producer is on a chip
``<= c`` and a consumer on a chip ``> c``. That is the pipeline cost of
:mod:`graphopt.sim.pipeline` whenever each tensor goes to the next chip only; a tensor
that skips chips is charged on every boundary it passes (a ring forwards it hop by hop),
where the pipeline cost charges it once on the direct link. Its solutions are priced by
the pipeline cost like every other method's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphopt.errors import InfeasibleError, MissingDependencyError
from graphopt.optim.partition.constraints import memory_need
from graphopt.optim.search.cpsat import _solve  # Ctrl-C stops the search, keeps its best
from graphopt.sim import Problem
from graphopt.sim.pipeline import stationary, stationary_bytes

__all__ = ["RepairModel", "RepairResult", "crossing_tensors", "solve_throughput"]

#: Integer resolution of the repair's confidence weights.
_WEIGHT_SCALE = 1000
#: Nanoseconds: the time unit of the throughput model.
_NS = 1e-9


def _cp_model():
    try:
        from ortools.sat.python import cp_model
    except ModuleNotFoundError as err:
        raise MissingDependencyError("multi-chip partitioning needs OR-Tools: pip install ortools") from err
    return cp_model


@dataclass
class RepairResult:
    """Repaired partitions of a batch of proposals.

    ``placement`` int64 (B, N): the repaired partition (the proposal itself where it was
    valid, or where no valid one was found); ``valid`` bool (B,): a valid partition came
    back; ``changed`` int64 (B,): ops moved; ``seconds`` float (B,): solver wall time.
    """

    placement: np.ndarray
    valid: np.ndarray
    changed: np.ndarray
    seconds: np.ndarray


class _Encoding:
    """The order encoding of a partition of ``units`` and the constraints every model
    here shares (module docstring)."""

    def __init__(self, problem: Problem, units: np.ndarray):
        cp_model = _cp_model()
        self.problem, self.unit = problem, np.asarray(units, dtype=np.int64)
        n, d = int(self.unit.max()) + 1, problem.num_devices
        self.num_units = n
        g = problem.graph
        us, ud = self.unit[g.src], self.unit[g.dst]
        cross = (us != ud) & ~stationary(g)[g.src]
        self.edges = np.unique(np.stack([us[cross], ud[cross]], 1), axis=0).reshape(-1, 2)
        m = self.model = cp_model.CpModel()
        # y[u][c] = chip[u] > c, c = 0..d-2
        y = self.y = [[m.new_bool_var(f"y{u}_{c}") for c in range(d - 1)] for u in range(n)]
        for row in y:
            for c in range(1, d - 1):
                m.add_implication(row[c], row[c - 1])
        for s, t in self.edges.tolist():
            for c in range(d - 1):
                m.add_implication(y[s][c], y[t][c])
        lead: dict[int, int] = {}
        for i in np.flatnonzero(problem.coloc >= 0).tolist():
            u, first = int(self.unit[i]), lead.setdefault(int(problem.coloc[i]), int(self.unit[i]))
            if first != u:
                for c in range(d - 1):
                    m.add(y[u][c] == y[first][c])
        self.on = [self.on_chip(u) for u in range(n)]
        kib = 1024.0
        need = np.bincount(self.unit, memory_need(problem), n)
        # a weight is held once on every chip that reads it: added to its reader's unit
        # when one unit reads it, else a Boolean per chip (held there if a reader is)
        shared = []  # (KiB, [Boolean per chip])
        still = stationary(g)
        w = still[g.src] & ~still[g.dst]  # a weight and an op that computes with it
        size = stationary_bytes(g)
        readers: dict[int, set[int]] = {}
        for s, t in zip(g.src[w].tolist(), self.unit[g.dst[w]].tolist()):
            readers.setdefault(s, set()).add(t)
        for s, units_read in readers.items():
            if len(units_read) == 1:
                need[next(iter(units_read))] += size[s]
                continue
            held = [m.new_bool_var(f"h{s}_{c}") for c in range(d)]
            for t in units_read:
                for c in range(d):
                    m.add(held[c] >= self.on[t][c])
            shared.append((int(np.ceil(size[s] / kib)), held))
        need = np.ceil(need / kib).astype(np.int64)
        cap = np.floor(problem.capacity / kib).astype(np.int64)  # KiB
        if need.max(initial=0) > cap.max():
            u = int(np.flatnonzero(self.unit == need.argmax())[0])
            raise InfeasibleError(f"op {str(g.names[u])!r} and the ops it is kept with need "
                                  f"{need.max() / 1024:.1f} MiB of SRAM; no chip of "
                                  f"{problem.cluster.name} holds it")
        self.used = [m.new_bool_var(f"used{c}") for c in range(d)]
        for c in range(d):
            count = sum(self.on[u][c] for u in range(n))
            m.add(count >= self.used[c])
            m.add(count <= n * self.used[c])
            if c:
                m.add_implication(self.used[c], self.used[c - 1])
            m.add(sum(int(need[u]) * self.on[u][c] for u in range(n) if need[u])
                  + sum(size * held[c] for size, held in shared) <= int(cap[c]))

    def on_chip(self, u: int) -> list:
        """``[chip[u] == c for c in 0..D-1]`` as linear expressions of the y."""
        row, d = self.y[u], self.problem.num_devices
        if d == 1:
            return [1]
        return [1 - row[0], *(row[c - 1] - row[c] for c in range(1, d - 1)), row[d - 2]]

    def decode(self, solver) -> np.ndarray:
        """The chip of every op in the solver's solution."""
        return np.array([sum(solver.boolean_value(v) for v in row) for row in self.y],
                        dtype=np.int64)


class RepairModel:
    """Repairs proposals into the nearest valid partitions (module docstring).

    Parameters
    ----------
    problem : Problem
    units : int array (N,), optional
        Unit of every op (:func:`~graphopt.optim.partition.constraints.pipeline_units`);
        proposals and partitions give a chip per unit. Default: every op its own unit.
    time_limit : float
        Solver seconds per proposal. The solver starts from the proposal projected onto
        the units' topological order (:meth:`project`) and returns the nearest partition
        found by then.
    workers : int
        CP-SAT search workers; 1 (default) makes repairs reproducible when they finish
        within the time limit.

    Raises
    ------
    GraphoptError
        OR-Tools missing, or a unit that fits no chip's SRAM.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> from graphopt.optim.partition.constraints import valid_partitions
    >>> prob = Problem(layered_graph(3, 2), load_cluster("mcm-ring4"))
    >>> proposal = np.arange(prob.num_nodes)[::-1] % 4          # everything backwards
    >>> out = RepairModel(prob).repair(proposal[None])
    >>> bool(out.valid[0]), bool(valid_partitions(prob, out.placement)[0])
    (True, True)
    """

    def __init__(self, problem: Problem, units: np.ndarray | None = None,
                 time_limit: float = 0.5, workers: int = 1):
        unit = np.arange(problem.num_nodes) if units is None else np.asarray(units)
        self.base = _Encoding(problem, unit)
        self.unit, self.num_units = self.base.unit, self.base.num_units
        self.problem, self.time_limit, self.workers = problem, float(time_limit), int(workers)

    def project(self, proposals: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """A partition near each proposal that keeps dataflow forward and skips no chip
        (not SRAM): the chips nondecreasing along the units' topological order nearest
        to the proposal in weighted L1 (pool-adjacent-violators with weighted medians),
        the used chips renumbered 0..k. ``O(B·U²)`` at worst, in Python."""
        out = np.empty_like(proposals)
        for r, (p, w) in enumerate(zip(proposals.tolist(), weights.tolist())):
            blocks: list[list] = []  # [value, [(chip, weight), ...]]
            for x, wx in zip(p, w):
                blocks.append([x, [(x, wx)]])
                while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
                    top = blocks.pop()
                    pool = sorted(blocks[-1][1] + top[1])
                    blocks[-1] = [_weighted_median(pool), pool]
            out[r] = np.repeat([b[0] for b in blocks], [len(b[1]) for b in blocks])
        d = self.problem.num_devices
        used = np.zeros((len(out), d), dtype=bool)
        np.put_along_axis(used, out, True, axis=1)
        rank = np.cumsum(used, axis=1) - 1
        return np.take_along_axis(rank, out, axis=1)

    def repair(self, proposals: np.ndarray, confidence: np.ndarray | None = None,
               seed: int = 0) -> RepairResult:
        """Repair each row of ``proposals`` (int (B, U): a chip per unit) into the valid
        partition nearest to it, weighting unit ``u`` of row ``b`` by
        ``confidence[b, u]`` (> 0; default 1). Rows already valid come back unchanged
        without a solve; ``RepairResult.placement`` gives a chip per unit."""
        from graphopt.optim.partition.constraints import valid_partitions

        cp_model = _cp_model()
        d = self.problem.num_devices
        props = np.clip(np.atleast_2d(np.asarray(proposals, dtype=np.int64)), 0, d - 1)
        b, n = props.shape
        conf = np.ones((b, n)) if confidence is None else np.atleast_2d(confidence)
        weights = np.maximum(np.rint(conf * _WEIGHT_SCALE), 1).astype(np.int64)
        out = props.copy()
        ok = valid_partitions(self.problem, props[:, self.unit])
        todo = np.flatnonzero(~ok)
        hints = self.project(props[todo], weights[todo]) if len(todo) else props[:0]
        changed = np.zeros(b, np.int64)
        seconds = np.zeros(b)
        y, m = self.base.y, self.base.model
        for r, hint in zip(todo.tolist(), hints):
            m.clear_objective()
            m.clear_hints()
            terms, const = [], 0
            for u in range(n):
                p, w = int(props[r, u]), int(weights[r, u])
                for c in range(d - 1):
                    # the proposal has y = 1 below its chip and 0 from it on
                    if c < p:
                        terms.append(-w * y[u][c])
                        const += w
                    else:
                        terms.append(w * y[u][c])
                    m.add_hint(y[u][c], c < int(hint[u]))
            m.minimize(sum(terms) + const)
            solver = cp_model.CpSolver()
            solver.parameters.max_time_in_seconds = self.time_limit
            solver.parameters.num_workers = self.workers
            solver.parameters.random_seed = seed % 2**31
            status, _ = _solve(solver, m)
            seconds[r] = solver.wall_time
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                out[r], ok[r] = self.base.decode(solver), True
            elif valid_partitions(self.problem, hint[self.unit])[0]:
                out[r], ok[r] = hint, True  # the solver ran out of time; the projection holds
            changed[r] = int((out[r] != props[r]).sum())
        return RepairResult(out, ok, changed, seconds)


def _weighted_median(pool: list[tuple[int, int]]) -> int:
    """The lowest chip at which the weights of sorted ``(chip, weight)`` pairs reach half
    their total."""
    half, acc = sum(w for _, w in pool) / 2, 0
    for chip, w in pool:
        acc += w
        if acc >= half:
            return chip
    return pool[-1][0]


def crossing_tensors(problem: Problem, unit: np.ndarray) -> tuple[np.ndarray, dict[int, set[int]]]:
    """The tensors a partition of ``unit`` may send between chips: every op (not a
    stationary weight) with a consumer in another unit, the units of those consumers, and
    the bytes it sends (its largest edge out: once per destination chip, as the pipeline
    cost charges it). Returns ``max_bytes`` (float64 (N,)) and ``{op: consumer units}``."""
    g = problem.graph
    cross = (unit[g.src] != unit[g.dst]) & ~stationary(g)[g.src]
    max_bytes = np.zeros(problem.num_nodes)
    np.maximum.at(max_bytes, g.src[cross], g.edge_bytes[cross])
    consumers: dict[int, set[int]] = {}
    for s, v in zip(g.src[cross].tolist(), unit[g.dst[cross]].tolist()):
        consumers.setdefault(s, set()).add(v)
    return max_bytes, consumers


def solve_throughput(problem: Problem, units: np.ndarray | None = None,
                     time_limit: float = 60.0, workers: int = 1, seed: int = 0,
                     hint: np.ndarray | None = None) -> tuple[np.ndarray | None, dict]:
    """The valid partition of ``units`` (default: one per op) of least modelled interval
    (module docstring), found by CP-SAT within ``time_limit`` seconds; ``hint`` (a chip
    per unit) starts it.

    Returns a chip per unit (None if no partition was found) and the solver's stats:
    ``status``, ``objective`` and ``bound`` (seconds of the modelled interval),
    ``solver_seconds``.
    """
    cp_model = _cp_model()
    enc = _Encoding(problem, np.arange(problem.num_nodes) if units is None else units)
    m, y, d, n = enc.model, enc.y, problem.num_devices, enc.num_units
    t_op = problem.costs.time.max(axis=1)  # the chips of a module are alike
    t = np.rint(np.bincount(enc.unit, t_op, n) / _NS).astype(np.int64)
    max_bytes, consumers = crossing_tensors(problem, enc.unit)
    interval = m.new_int_var(0, int(t.sum()) + 10**12, "interval")
    for c in range(d):
        m.add(interval >= sum(int(t[u]) * enc.on[u][c] for u in range(n) if t[u]))
    for c in range(d - 1):
        nxt = c + 1
        crossing = []
        for op, dests in consumers.items():
            cost = problem.latency[c, nxt] + max_bytes[op] * problem.sec_per_byte[c, nxt]
            x = m.new_bool_var(f"x{op}_{c}")
            u = int(enc.unit[op])
            for v in dests:  # u on a chip <= c and v on a chip > c: the tensor crosses
                m.add_bool_or([y[u][c], y[v][c].Not(), x])
            crossing.append(int(round(cost / _NS)) * x)
        m.add(interval >= sum(crossing))
    if hint is not None:
        for u in range(n):
            for c in range(d - 1):
                m.add_hint(y[u][c], int(hint[u]) > c)
    m.minimize(interval)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = seed % 2**31
    status, _ = _solve(solver, m)
    stats = {"status": solver.status_name(status), "solver_seconds": solver.wall_time}
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, stats
    stats.update(objective=solver.objective_value * _NS, bound=solver.best_objective_bound * _NS)
    return enc.decode(solver), stats
