"""The ``Optimizer`` protocol, budgets and the registry of methods by name."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from graphopt.evaluate.interrupt import stop_requested
from graphopt.evaluate.objective import OBJECTIVES, Budget, check_objective
from graphopt.errors import BudgetExhausted, UsageError, check_fields
from graphopt.sim import Plan, Problem

__all__ = ["TASKS", "OBJECTIVES", "PIPELINE", "Budget", "Optimizer", "check_objectives",
           "check_params", "compose", "register", "get_optimizer", "list_optimizers", "optimize",
           "parse_task", "tasks_of"]

#: What an optimizer of a plan may decide.
TASKS = frozenset({"placement", "scheduling", "fusion"})

#: The pipeline task: a model's blocks split into contiguous stages
#: (:mod:`graphopt.optim.partition.pipeline`); its methods ``split`` rather than ``optimize``.
PIPELINE = "pipeline"

#: The part of a :class:`Plan` each task decides.
_PART = {"placement": "placement", "scheduling": "priority", "fusion": "fusion"}


def compose(task: frozenset[str], init: Plan | None, plan: Plan) -> Plan:
    """The plan a method returns: each part of ``plan`` that ``task`` names, where
    ``plan`` has it; every other part ``init``'s (None, the compiler default, without
    ``init``). ``plan``'s meta is kept.

    A method that always decides a part whatever the task (a placer places) names it
    in ``task``.

    >>> init = Plan(priority=[0.0, 1.0, 2.0], fusion=[0.0, 0.0, 0.0])
    >>> p = compose(frozenset({"placement"}), init, Plan(placement=[0, 1, 1], fusion=[1, 1, 1]))
    >>> p.placement.tolist(), p.priority.tolist(), p.fusion.tolist()
    ([0, 1, 1], [0.0, 1.0, 2.0], [0.0, 0.0, 0.0])
    """
    base = init or Plan()
    parts = {}
    for t, part in _PART.items():
        mine = getattr(plan, part)
        parts[part] = mine if t in task and mine is not None else getattr(base, part)
    return Plan(**parts, meta=dict(plan.meta))


class Optimizer(Protocol):
    """``optimize(problem, task, budget, seed) -> (Plan, stats)``.

    ``task`` is a subset of :data:`TASKS`; parts of the plan outside it are left to the
    compiler defaults (``None``), or taken from ``init`` when one is given. ``stats`` is
    a JSON-ready dict with at least ``evals`` (simulations used) and ``seconds``.
    The same seed gives the same plan.

    ``tasks`` (optional class attribute) names the tasks a method serves: without it, the
    plan's :data:`TASKS`; a method of the pipeline task names :data:`PIPELINE` and has
    ``split(problem, costs, stages, microbatches, schedule, virtual, overhead, cores) ->
    bounds`` instead.

    ``objectives`` (optional class attribute) names the ``budget.objective`` values a
    method can minimise; without it, every one of :data:`OBJECTIVES` (a method that
    ranks plans through its evaluator minimises whatever the evaluator scores). A method
    with its own fixed objective (a policy trained on step time) lists only that one.
    """

    name: str

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]: ...


_REGISTRY: dict[str, Callable[..., Optimizer]] = {}


def register(name: str) -> Callable:
    """Class decorator: list an optimizer under ``name``."""

    def wrap(cls):
        if name in _REGISTRY:
            raise ValueError(f"optimizer {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def _load_all() -> None:
    # Importing the method packages registers them.
    import importlib

    for mod in ("graphopt.optim.heuristics", "graphopt.optim.search", "graphopt.optim.partition",
                "graphopt.optim.learned"):
        try:
            package = importlib.import_module(mod)
            # a package that loads its methods lazily names the modules that register them
            for method in getattr(package, "METHOD_MODULES", ()):
                importlib.import_module(method)
        except ModuleNotFoundError as err:
            if err.name != mod:
                raise


def list_optimizers() -> list[str]:
    """Names of every registered method."""
    _load_all()
    return sorted(_REGISTRY)


def get_optimizer(name: str, **kwargs) -> Optimizer:
    """An optimizer instance by registered name; ``kwargs`` go to its constructor.

    Raises
    ------
    GraphoptError
        Unknown name (the message lists the known ones), or a hyperparameter the
        constructor rejects or outside its field's range (see :func:`check_params`).
    """
    _load_all()
    if name not in _REGISTRY:
        raise UsageError(f"unknown method {name!r}; known methods: {', '.join(sorted(_REGISTRY))}")
    try:
        opt = _REGISTRY[name](**kwargs)
    except (TypeError, ValueError) as err:
        raise UsageError(f"method {name}: {err}") from None
    check_params(opt)
    return opt


def check_params(opt: object) -> None:
    """Reject a method's hyperparameters that are out of range (:func:`graphopt.errors.check_fields`
    on its dataclass fields).

    Raises
    ------
    GraphoptError
        Naming ``METHOD.FIELD``, the value and the range.

    Examples
    --------
    >>> from graphopt.optim.search.annealing import SimulatedAnnealing
    >>> check_params(SimulatedAnnealing(chains=0))
    Traceback (most recent call last):
    graphopt.errors.GraphoptError: sa.chains=0: expected >= 1
    """
    method = getattr(opt, "name", type(opt).__name__)
    check_fields(opt, lambda key: f"{method}.{key}")


def check_objectives(method: str, objective: str) -> None:
    """Refuse an objective that method ``method`` cannot minimise (see :class:`Optimizer`).

    Raises
    ------
    GraphoptError
        Naming the method, the objective asked for and those it takes.

    Examples
    --------
    >>> check_objectives("hdp", "memory")
    Traceback (most recent call last):
    graphopt.errors.UsageError: method hdp cannot minimise memory; it takes runtime only
    """
    _load_all()
    takes = getattr(_REGISTRY.get(method), "objectives", OBJECTIVES)
    if check_objective(objective) not in takes:
        raise UsageError(f"method {method} cannot minimise {objective}; it takes "
                         f"{', '.join(takes)} only")


def tasks_of(method: str) -> frozenset[str]:
    """The tasks method ``method`` serves (see :class:`Optimizer`).

    >>> sorted(tasks_of("sa")), sorted(tasks_of("exact"))
    (['fusion', 'placement', 'scheduling'], ['pipeline'])

    Raises
    ------
    GraphoptError
        Unknown name.
    """
    _load_all()
    if method not in _REGISTRY:
        raise UsageError(f"unknown method {method!r}; known methods: {', '.join(sorted(_REGISTRY))}")
    return frozenset(getattr(_REGISTRY[method], "tasks", TASKS))


def parse_task(task: str | frozenset[str] | set[str]) -> frozenset[str]:
    """``"placement,scheduling"`` → frozenset; rejects unknown task names."""
    parts = frozenset(t.strip() for t in task.split(",")) if isinstance(task, str) else frozenset(task)
    bad = parts - TASKS
    if bad or not parts:
        raise UsageError(f"unknown task {sorted(bad) or task!r}; tasks are "
                         f"{', '.join(sorted(TASKS))} (comma-separated)")
    return parts


def optimize(problem: Problem, method: str = "single", task: str | frozenset[str] = "placement",
             budget: Budget | None = None, seed: int = 0, init: Plan | None = None,
             **kwargs) -> tuple[Plan, dict]:
    """Run one method by name and return its plan and stats (with ``seconds`` filled in).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> plan, stats = optimize(prob, "single")
    >>> len(plan.placement) == prob.num_nodes
    True
    """
    budget = budget or Budget()
    tasks = parse_task(task)
    if not tasks <= tasks_of(method):
        raise UsageError(f"method {method} serves the {', '.join(sorted(tasks_of(method)))} "
                         f"task, not {', '.join(sorted(tasks - tasks_of(method)))}")
    check_objectives(method, budget.objective)
    opt = get_optimizer(method, **kwargs)
    t0 = time.perf_counter()
    try:
        plan, stats = opt.optimize(problem, parse_task(task), budget, seed, init)
    except BudgetExhausted as err:
        if stop_requested():  # a stop before the method had a plan: the caller ends the run
            raise
        raise UsageError(str(err)) from err  # a budget too small to simulate one plan
    stats = {"method": method, "seed": seed, "objective": budget.objective, **stats,
             "seconds": stats.get("seconds", time.perf_counter() - t0)}
    return plan.replace(meta={**plan.meta, "method": method, "seed": seed}), stats
