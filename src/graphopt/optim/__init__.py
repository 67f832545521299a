"""Optimizers: every method — heuristic, search or learned — under one protocol and
one registry, so the CLI, the benchmarks and the tests treat them alike.

The names load from :mod:`graphopt.optim.base` on first use (it imports the simulator),
so that :mod:`graphopt.optim.catalog` — what ``graphopt methods`` prints — loads alone.
"""

from graphopt._lazy import lazy_exports

__all__ = ["TASKS", "Budget", "Optimizer", "register", "get_optimizer", "list_optimizers",
           "optimize"]

__getattr__ = lazy_exports(__name__, {"graphopt.optim.base": tuple(__all__)})
