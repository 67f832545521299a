"""Optimizers: every method — heuristic, search or learned — under one protocol and
one registry, so the CLI, the benchmarks and the tests treat them alike."""

from graphopt.optim.base import (
    TASKS,
    Budget,
    Optimizer,
    get_optimizer,
    list_optimizers,
    optimize,
    register,
)

__all__ = ["TASKS", "Budget", "Optimizer", "register", "get_optimizer", "list_optimizers",
           "optimize"]
