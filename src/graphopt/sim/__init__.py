"""The simulator: compile a graph on a cluster into a :class:`Problem`, then price plans."""

from graphopt.sim.engine import ensure_compiled
from graphopt.sim.plan import Plan
from graphopt.sim.problem import BatchResult, Problem, SimResult, Timeline, simulate, simulate_batch

__all__ = ["BatchResult", "Plan", "Problem", "SimResult", "Timeline", "ensure_compiled", "simulate",
           "simulate_batch"]
