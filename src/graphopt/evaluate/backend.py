"""The choice of evaluator: which backend (in-process, a Ray pool) every evaluator a method
builds is made of. Methods never name a backend, so they run unchanged on any of them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

__all__ = ["make_evaluator", "use_evaluator"]

# What make_evaluator builds while use_evaluator blocks are open (innermost last).
_backend: list[Callable] = []


@contextlib.contextmanager
def use_evaluator(make: Callable) -> Iterator[None]:
    """Within this block every evaluator made by
    :meth:`~graphopt.evaluate.local.LocalEvaluator.from_budget` (so by every method) is
    ``make(problem, max_evals, max_seconds, **options)``, e.g. a
    :class:`graphopt.evaluate.ray.RayEvaluator` on a pool of Ray actors.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from graphopt.evaluate.local import LocalEvaluator
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.sim import Problem
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> class Counting(LocalEvaluator): ...
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> with use_evaluator(Counting):
    ...     ev = LocalEvaluator.from_budget(prob, SimpleNamespace(evals=8, seconds=None))
    >>> type(ev).__name__
    'Counting'
    """
    _backend.append(make)
    try:
        yield
    finally:
        _backend.remove(make)


def make_evaluator(problem, max_evals: int | None = None, max_seconds: float | None = None, *,
                   default: Callable, **options):
    """An evaluator of the backend in use (:func:`use_evaluator`), else of ``default``
    (:class:`~graphopt.evaluate.local.LocalEvaluator`, which this module does not import:
    it imports this one): what trainers call where they bound a run by hand rather than
    by a ``Budget``."""
    make = _backend[-1] if _backend else default
    return make(problem, max_evals, max_seconds, **options)

