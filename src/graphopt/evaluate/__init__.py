"""Who evaluates plans, and against what: the objective and the budget
(:mod:`~graphopt.evaluate.objective`), the in-process evaluator that owns a budget
(:mod:`~graphopt.evaluate.local`), the choice of evaluator every method's is made of
(:mod:`~graphopt.evaluate.backend`), Ray's (:mod:`~graphopt.evaluate.ray`, an extra), and
Ctrl-C as a request to stop with the best so far (:mod:`~graphopt.evaluate.interrupt`).

:class:`LocalEvaluator` runs :func:`graphopt.sim.simulate_batch` in this process
(numba threads across the cores). Every optimizer goes through an evaluator, so
evaluation budgets are counted in one place and the best plan seen is never lost.
"""

from graphopt.errors import BudgetExhausted
from graphopt.evaluate.backend import make_evaluator, use_evaluator
from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
from graphopt.evaluate.local import LocalEvaluator
from graphopt.evaluate.objective import OBJECTIVES, Budget

__all__ = ["OBJECTIVES", "Budget", "LocalEvaluator", "BudgetExhausted", "make_evaluator",
           "stop_on_interrupt", "stop_requested", "use_evaluator"]
