"""Optimizers: every method — heuristic, search or learned — under one protocol and
one registry, so the CLI, the benchmarks and the tests treat them alike."""

from graphopt._lazy import lazy_exports

__all__ = ["TASKS", "Budget", "Optimizer", "register", "get_optimizer", "list_optimizers",
           "optimize"]

# Names load from graphopt.optim.base (and the simulator) on first use, so that the command
# line can read a method's torch-free config (graphopt.optim.learned.regal.config) at start.
__getattr__ = lazy_exports(__name__, {"graphopt.optim.base": tuple(__all__)})
