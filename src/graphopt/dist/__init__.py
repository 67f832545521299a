"""Evaluation backends: how an optimizer gets many plans simulated.

:class:`LocalEvaluator` runs :func:`graphopt.sim.simulate_batch` in this process
(numba threads across the cores). Every optimizer goes through an evaluator, so
evaluation budgets are counted in one place and the best plan seen is never lost.
"""

from graphopt.dist.local import BudgetExhausted, LocalEvaluator, stop_on_interrupt, stop_requested

__all__ = ["LocalEvaluator", "BudgetExhausted", "stop_on_interrupt", "stop_requested"]
