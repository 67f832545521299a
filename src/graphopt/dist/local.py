"""In-process evaluation with budget accounting, the objective and best-so-far tracking,
and Ctrl-C as a request to stop long work at its next safe point.

The objective lives here, in one place: ``runtime`` is a plan's step time, ``memory`` the
highest peak memory over its devices (REGAL's objective); :meth:`LocalEvaluator.score`
ranks invalid plans (out of memory) after every valid one for both, so a search only
minimises the scores its evaluator hands back."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from graphopt.errors import GraphoptError
from graphopt.sim import BatchResult, Plan, Problem, SimResult, simulate, simulate_batch
from graphopt.sim.plan import INVALID_PENALTY

__all__ = ["OBJECTIVES", "LocalEvaluator", "BudgetExhausted", "check_objective",
           "objective_values", "runtime_bound", "STOP_SIGNALS", "stop_on_interrupt", "stop_requested",
           "make_evaluator", "use_evaluator"]

#: What a search may minimise: step time, or the highest peak memory over devices.
OBJECTIVES = ("runtime", "memory")


_stop = threading.Event()
_active = threading.Lock()
# What LocalEvaluator.from_budget builds while use_evaluator blocks are open (innermost
# last): methods never name a backend, so they run unchanged on any of them.
_backend: list[Callable[..., LocalEvaluator]] = []


@contextlib.contextmanager
def use_evaluator(make: Callable[..., LocalEvaluator]) -> Iterator[None]:
    """Within this block every evaluator made by :meth:`LocalEvaluator.from_budget` (so by
    every method) is ``make(problem, max_evals, max_seconds, **options)``, e.g. a
    :class:`graphopt.dist.ray.RayEvaluator` on a pool of Ray actors.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> class Counting(LocalEvaluator): ...
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> with use_evaluator(Counting):
    ...     ev = LocalEvaluator.from_budget(prob, SimpleNamespace(evals=8, seconds=None))
    >>> type(ev).__name__
    'Counting'
    """
    _backend.append(make)
    try:
        yield
    finally:
        _backend.remove(make)


def make_evaluator(problem: Problem, max_evals: int | None = None,
                   max_seconds: float | None = None, *, default: type | None = None,
                   **options) -> LocalEvaluator:
    """An evaluator of the backend in use (:func:`use_evaluator`), else of ``default``
    (:class:`LocalEvaluator`): what trainers call where they bound a run by hand rather
    than by a ``Budget``."""
    make = _backend[-1] if _backend else (default or LocalEvaluator)
    return make(problem, max_evals, max_seconds, **options)


#: The signals :func:`stop_on_interrupt` turns into a request to stop with the best so far.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_requested() -> bool:
    """Whether Ctrl-C (or another of :data:`STOP_SIGNALS`) asked the work under
    :func:`stop_on_interrupt` to stop."""
    return _stop.is_set()


@contextlib.contextmanager
def stop_on_interrupt(notice: str = "stopping at the next safe point with the best so far "
                                    "(Ctrl-C again to abort) ...") -> Iterator[None]:
    """Within this block the first Ctrl-C (SIGINT), or SIGTERM (``kill``, a batch system's
    time limit) or SIGHUP (the terminal closed), only asks the work to stop: every
    :class:`LocalEvaluator` then refuses further batches as if its budget were spent, so a
    search ends with its best plan so far (an evaluator still admits its first batch), and
    a trainer polls :func:`stop_requested` between whole updates. A second one raises
    ``KeyboardInterrupt`` as Ctrl-C does.

    A raised ``KeyboardInterrupt`` would land wherever the main thread happens to be:
    inside numba's batch simulator (where it surfaces as a ``SystemError``) or halfway
    through an optimizer step. Nested blocks share the outer one; outside the main
    thread (where signals cannot be handled) the block changes nothing. The request is
    cleared when the outermost block ends.

    Examples
    --------
    >>> with stop_on_interrupt():
    ...     stop_requested()
    False
    """
    if threading.current_thread() is not threading.main_thread() or \
            not _active.acquire(blocking=False):
        yield
        return

    def request(signum, frame) -> None:
        if _stop.is_set():
            raise KeyboardInterrupt
        _stop.set()
        try:
            name = "" if signum == signal.SIGINT else f"{signal.Signals(signum).name}: "
            print(f"\n{name}{notice}", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # SIGHUP: the terminal may be gone
            pass

    previous = {sig: signal.signal(sig, request) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stop.clear()
        _active.release()


def check_objective(objective: str) -> str:
    """``objective`` if it is one of :data:`OBJECTIVES`.

    Raises
    ------
    GraphoptError
        Any other name; the message lists the known ones.

    >>> check_objective("memory")
    'memory'
    """
    if objective not in OBJECTIVES:
        raise GraphoptError(f"unknown objective {objective!r}; objectives are "
                            f"{', '.join(OBJECTIVES)}")
    return objective


def objective_values(result, objective: str) -> np.ndarray:
    """The objective of simulated plans, lower is better, whether valid or not: the step
    time (``runtime``) or the highest peak memory over devices in bytes (``memory``).
    ``result`` is a :class:`BatchResult` (one value per row) or a :class:`SimResult` (a
    0-d array). The batch simulator returns peak memory with step time, so neither
    objective costs a second simulation.
    """
    if check_objective(objective) == "memory":
        return np.max(result.peak_memory, axis=-1)
    return np.asarray(result.step_time, dtype=np.float64)


def runtime_bound(problem: Problem) -> float:
    """No valid plan of ``problem`` takes longer: every kernel on its slowest device and
    every transfer (each output sent to every other device over the slowest link, one
    after another) in sequence."""
    d = problem.num_devices
    max_bytes = np.zeros(problem.num_nodes)
    np.maximum.at(max_bytes, problem.graph.src, problem.graph.edge_bytes)
    off = ~np.eye(d, dtype=bool)
    sends = np.minimum(problem.graph.out_degree, d - 1)
    comm = 0.0 if d == 1 else (sends * (problem.latency[off].max()
                                        + max_bytes / problem.bandwidth[off].min())).sum()
    return float(problem.costs.time.max(axis=1).sum() + comm)


class _Bounds(Protocol):
    """What :meth:`LocalEvaluator.from_budget` reads: ``graphopt.optim.Budget``'s fields
    (dist sits below optim, so it names the shape, not the class)."""

    evals: int | None
    seconds: float | None
    objective: str


class BudgetExhausted(GraphoptError):
    """Raised by :meth:`LocalEvaluator.evaluate` and :meth:`LocalEvaluator.simulate` once
    the evaluation or time budget is spent. Methods catch it to end their search; one
    that escapes a method means the budget ran out before it could simulate a plan."""


@dataclass
class LocalEvaluator:
    """Evaluates plans with :func:`simulate_batch` (or :func:`simulate`), counting them
    against a budget: the one owner of an optimizer's budget.

    Every simulation a method asks for goes through its evaluator, so that the count,
    the clock and the best plan seen are kept in one place.

    Parameters
    ----------
    problem : Problem
    max_evals : int, optional
        Evaluations allowed; a batch that would exceed it is cut to what is left.
    max_seconds : float, optional
        Wall-clock seconds allowed from construction. A batch is never cut short by
        time: the bound is checked before each batch.
    objective : {"runtime", "memory"}
        What "best" means (:func:`objective_values`); default step time.

    Attributes
    ----------
    evals : int
        Plans evaluated so far.
    best_plan, best_value, best_time : Plan or None, float, float
        The valid plan seen with the lowest objective, its objective value and its step
        time (with the runtime objective, the fastest plan and its step time twice).
    history : list of (evals, seconds, best_value)
        One row per batch, for convergence curves.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> ev = LocalEvaluator(Problem(mlp_training_graph(), load_cluster("dgx1-v100:2")), max_evals=8)
    >>> r = ev.evaluate(np.zeros((8, ev.problem.num_nodes), dtype=int))
    >>> ev.evals, bool(r.valid.all())
    (8, True)
    """

    problem: Problem
    max_evals: int | None = None
    max_seconds: float | None = None
    evals: int = 0
    best_plan: Plan | None = None
    best_time: float = float("inf")
    history: list = field(default_factory=list)
    objective: str = "runtime"
    best_value: float = float("inf")

    def __post_init__(self) -> None:
        check_objective(self.objective)
        self._t0 = time.perf_counter()
        self._bound: float | None = None

    @classmethod
    def from_budget(cls, problem: Problem, budget: _Bounds) -> LocalEvaluator:
        """An evaluator bounded by a :class:`graphopt.optim.Budget` (``evals``, ``seconds``)
        and minimising its ``objective``, its clock started now: of the backend in use
        (:func:`use_evaluator`, e.g. a Ray pool), else of ``cls``."""
        return make_evaluator(problem, budget.evals, budget.seconds, default=cls,
                              objective=getattr(budget, "objective", "runtime"))

    @property
    def bound(self) -> float:
        """No valid plan's objective is higher: :func:`runtime_bound` for ``runtime``, the
        largest device capacity for ``memory`` (a valid plan fits every device)."""
        if self._bound is None:
            self._bound = (runtime_bound(self.problem) if self.objective == "runtime"
                           else float(self.problem.capacity.max()))
        return self._bound

    def score(self, result) -> np.ndarray:
        """The objective of simulated plans (:func:`objective_values`) where valid; above
        :attr:`bound` where not, higher the more a plan overflows memory (by
        :data:`~graphopt.sim.plan.INVALID_PENALTY` bounds per unit of relative overflow), so that invalid
        plans rank last and searches walk out of infeasibility. Lower is better.

        >>> from graphopt.hardware import load_cluster
        >>> from graphopt.ir.generate import mlp_training_graph
        >>> ev = LocalEvaluator(Problem(mlp_training_graph(), load_cluster("dgx1-v100:2")),
        ...                     objective="memory")
        >>> r = ev.evaluate(np.zeros((1, ev.problem.num_nodes), dtype=int))
        >>> bool(ev.score(r)[0] == r.peak_memory[0].max())
        True
        """
        value = objective_values(result, self.objective)
        over = np.max(np.maximum(result.peak_memory / self.problem.capacity - 1.0, 0.0), axis=-1)
        return np.where(result.valid, value, self.bound * (1.0 + INVALID_PENALTY * over) + value)

    @property
    def elapsed(self) -> float:
        """Seconds since construction."""
        return time.perf_counter() - self._t0

    @property
    def remaining(self) -> int | None:
        """Evaluations left (None: unbounded)."""
        return None if self.max_evals is None else max(self.max_evals - self.evals, 0)

    def exhausted(self) -> bool:
        """Whether the evaluations or the seconds are spent, or a stop was requested
        (:func:`stop_on_interrupt`) after the first batch (so that a method always has a
        plan to end with)."""
        return (self.remaining == 0 or (_stop.is_set() and self.evals > 0) or
                (self.max_seconds is not None and self.elapsed >= self.max_seconds))

    def fraction_spent(self) -> float:
        """How much of the budget is spent, 0..1: the larger of evaluations over
        ``max_evals`` and seconds over ``max_seconds`` (0 when unbounded). Schedules
        that anneal over a run (a temperature, a learning rate) read it.

        >>> from graphopt.hardware import load_cluster
        >>> from graphopt.ir.generate import mlp_training_graph
        >>> ev = LocalEvaluator(Problem(mlp_training_graph(), load_cluster("dgx1-v100:2")), 8)
        >>> _ = ev.evaluate(np.zeros((2, ev.problem.num_nodes), dtype=int))
        >>> ev.fraction_spent()
        0.25
        """
        parts = [0.0]
        if self.max_evals:
            parts.append(self.evals / self.max_evals)
        if self.max_seconds:
            parts.append(self.elapsed / self.max_seconds)
        return min(max(parts), 1.0)

    def _admit(self, rows: int) -> int:
        """How many of ``rows`` plans the budget lets through; raises when none."""
        if _stop.is_set() and self.evals:
            raise BudgetExhausted(f"interrupted after {self.evals} evaluations")
        if self.exhausted():
            raise BudgetExhausted(f"budget spent: {self.evals} of {self.max_evals} evaluations, "
                                  f"{self.elapsed:.1f} of {self.max_seconds} s")
        return rows if self.remaining is None else min(rows, self.remaining)

    def _record(self, plan: Plan, value: float, step_time: float) -> None:
        """Keep ``plan`` (valid, objective ``value``) if it is the best so far."""
        if value < self.best_value:
            self.best_value, self.best_time, self.best_plan = float(value), float(step_time), plan

    def _simulate_batch(self, problem: Problem, placements: np.ndarray,
                        priorities: np.ndarray | None, fusion: np.ndarray | None) -> BatchResult:
        """How an admitted batch is simulated: here, in this process. The one thing a
        backend (:class:`graphopt.dist.ray.RayEvaluator`) replaces; the budget, the
        objective and the best plan stay in :meth:`evaluate`."""
        return simulate_batch(problem, placements, priorities, fusion)

    def evaluate(self, placements: np.ndarray, priorities: np.ndarray | None = None,
                 fusion: np.ndarray | None = None, problem: Problem | None = None
                 ) -> BatchResult:
        """Simulate a batch (rows are plans); update the count and the best plan.

        A batch larger than the remaining budget is cut to fit; the result then has
        fewer rows than the input. Raises :class:`BudgetExhausted` when nothing is left.
        ``problem`` simulates the batch on another problem under this budget (a trainer
        cycling through several graphs); its plans count, but never become
        :attr:`best_plan`.
        """
        placements = np.atleast_2d(placements)
        b = self._admit(len(placements))
        placements = placements[:b]
        priorities = None if priorities is None else np.atleast_2d(priorities)[:b]
        fusion = None if fusion is None else np.atleast_2d(fusion)[:b]
        try:
            res = self._simulate_batch(problem or self.problem, placements, priorities, fusion)
        except SystemError as err:
            # Ctrl-C outside stop_on_interrupt reaches numba's dispatcher as a SystemError
            if isinstance(err.__cause__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            raise
        self.evals += b
        ok = np.flatnonzero(res.valid)
        if len(ok) and (problem is None or problem is self.problem):
            value = objective_values(res, self.objective)
            i = int(ok[np.argmin(value[ok])])
            self._record(Plan(placement=placements[i],
                              priority=None if priorities is None else priorities[i],
                              fusion=None if fusion is None else fusion[i]),
                         value[i], res.step_time[i])
        self.history.append((self.evals, self.elapsed, self.best_value))
        return res

    def simulate(self, plan: Plan) -> SimResult:
        """Simulate one plan with :func:`simulate` (the full result: the reason a plan is
        invalid, busy time per device), counted as one evaluation. Raises
        :class:`BudgetExhausted` when nothing is left."""
        self._admit(1)
        res = simulate(self.problem, plan)
        self.evals += 1
        if res.valid:
            self._record(plan, float(objective_values(res, self.objective)), res.step_time)
        self.history.append((self.evals, self.elapsed, self.best_value))
        return res
