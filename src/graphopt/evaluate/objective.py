"""The objective, in one place: ``runtime`` is a plan's step time, ``memory`` the highest
peak memory over its devices (REGAL's objective); :func:`score` ranks invalid plans (out
of memory) after every valid one for both, so a search only minimises the scores its
evaluator hands back. :class:`Budget` bounds a search and names the objective it
minimises."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphopt.errors import UsageError
from graphopt.sim import Problem
from graphopt.sim.plan import INVALID_PENALTY

__all__ = ["OBJECTIVES", "Budget", "check_objective", "objective_values", "runtime_bound", "score"]

#: What a search may minimise: step time, or the highest peak memory over devices.
OBJECTIVES = ("runtime", "memory")


@dataclass(frozen=True)
class Budget:
    """Bounds on a search, simulator evaluations and wall-clock seconds (None: unbounded),
    and what it minimises: ``objective`` ``"runtime"`` (step time) or ``"memory"`` (the
    highest peak memory over devices); invalid plans rank last for both (see
    :func:`score`, the one place it is scored)."""

    evals: int | None = 1000
    seconds: float | None = None
    objective: str = "runtime"

    def __post_init__(self) -> None:
        check_objective(self.objective)


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
        raise UsageError(f"unknown objective {objective!r}; objectives are "
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


def score(result, objective: str, bound: float, capacity: np.ndarray) -> np.ndarray:
    """The objective of simulated plans (:func:`objective_values`) where valid; above
    ``bound`` (no valid plan's objective is higher) where not, higher the more a plan
    overflows its devices' ``capacity`` (by :data:`~graphopt.sim.plan.INVALID_PENALTY`
    bounds per unit of relative overflow), so that invalid plans rank last and searches
    walk out of infeasibility. Lower is better."""
    value = objective_values(result, objective)
    over = np.max(np.maximum(result.peak_memory / capacity - 1.0, 0.0), axis=-1)
    return np.where(result.valid, value, bound * (1.0 + INVALID_PENALTY * over) + value)
