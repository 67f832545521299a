"""In-process evaluation with budget accounting and best-so-far tracking: the one owner of
an optimizer's budget. What it minimises is :mod:`graphopt.evaluate.objective`'s; a stop
request (:mod:`graphopt.evaluate.interrupt`) ends it like a spent budget."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from graphopt.errors import BudgetExhausted
from graphopt.evaluate.backend import make_evaluator
from graphopt.evaluate.interrupt import stop_requested
from graphopt.evaluate.objective import Budget, check_objective, objective_values, runtime_bound, score
from graphopt.sim import BatchResult, Plan, Problem, SimResult, simulate, simulate_batch

__all__ = ["LocalEvaluator", "BudgetExhausted"]


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
        What "best" means (:func:`~graphopt.evaluate.objective.objective_values`); default step time.

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
    def from_budget(cls, problem: Problem, budget: Budget) -> LocalEvaluator:
        """An evaluator bounded by a :class:`~graphopt.evaluate.objective.Budget` (``evals``,
        ``seconds``) and minimising its ``objective``, its clock started now: of the backend in use
        (:func:`~graphopt.evaluate.backend.use_evaluator`, e.g. a Ray pool), else of ``cls``."""
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
        """The objective of simulated plans where valid, above :attr:`bound` where not
        (:func:`~graphopt.evaluate.objective.score`): invalid plans rank last. Lower is
        better.

        >>> from graphopt.hardware import load_cluster
        >>> from graphopt.ir.generate import mlp_training_graph
        >>> ev = LocalEvaluator(Problem(mlp_training_graph(), load_cluster("dgx1-v100:2")),
        ...                     objective="memory")
        >>> r = ev.evaluate(np.zeros((1, ev.problem.num_nodes), dtype=int))
        >>> bool(ev.score(r)[0] == r.peak_memory[0].max())
        True
        """
        return score(result, self.objective, self.bound, self.problem.capacity)

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
        (:func:`~graphopt.evaluate.interrupt.stop_on_interrupt`) after the first batch (so
        that a method always has a plan to end with)."""
        return (self.remaining == 0 or (stop_requested() and self.evals > 0) or
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
        if stop_requested() and self.evals:
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
        backend (:class:`graphopt.evaluate.ray.RayEvaluator`) replaces; the budget, the
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
