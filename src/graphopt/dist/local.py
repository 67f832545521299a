"""In-process evaluation with budget accounting and best-so-far tracking."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from graphopt.sim import BatchResult, Plan, Problem, simulate_batch

__all__ = ["LocalEvaluator", "BudgetExhausted"]


class BudgetExhausted(Exception):
    """Raised by :meth:`LocalEvaluator.evaluate` once the evaluation or time budget is spent."""


@dataclass
class LocalEvaluator:
    """Evaluates batches of plans with :func:`simulate_batch`, counting against a budget.

    Parameters
    ----------
    problem : Problem
    max_evals : int, optional
        Evaluations allowed; a batch that would exceed it is cut to what is left.
    max_seconds : float, optional
        Wall-clock seconds allowed from construction.

    Attributes
    ----------
    evals : int
        Plans evaluated so far.
    best_plan, best_time : Plan or None, float
        The fastest valid plan seen and its step time.
    history : list of (evals, seconds, best_time)
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

    def __post_init__(self) -> None:
        self._t0 = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    @property
    def remaining(self) -> int | None:
        """Evaluations left (None: unbounded)."""
        return None if self.max_evals is None else max(self.max_evals - self.evals, 0)

    def exhausted(self) -> bool:
        return (self.remaining == 0 or
                (self.max_seconds is not None and self.elapsed >= self.max_seconds))

    def evaluate(self, placements: np.ndarray, priorities: np.ndarray | None = None,
                 fusion: np.ndarray | None = None) -> BatchResult:
        """Simulate a batch (rows are plans); update the count and the best plan.

        A batch larger than the remaining budget is cut to fit; the result then has
        fewer rows than the input. Raises :class:`BudgetExhausted` when nothing is left.
        """
        if self.exhausted():
            raise BudgetExhausted(f"budget spent: {self.evals} evaluations, "
                                  f"{self.elapsed:.1f} s")
        placements = np.atleast_2d(placements)
        b = len(placements) if self.remaining is None else min(len(placements), self.remaining)
        placements = placements[:b]
        priorities = None if priorities is None else np.atleast_2d(priorities)[:b]
        fusion = None if fusion is None else np.atleast_2d(fusion)[:b]
        res = simulate_batch(self.problem, placements, priorities, fusion)
        self.evals += b
        ok = np.flatnonzero(res.valid)
        if len(ok):
            i = int(ok[np.argmin(res.step_time[ok])])
            if res.step_time[i] < self.best_time:
                self.best_time = float(res.step_time[i])
                self.best_plan = Plan(placement=placements[i],
                                      priority=None if priorities is None else priorities[i],
                                      fusion=None if fusion is None else fusion[i])
        self.history.append((self.evals, self.elapsed, self.best_time))
        return res
