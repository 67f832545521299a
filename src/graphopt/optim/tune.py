"""Tuning a method's hyperparameters with Ray Tune (the ``ray`` extra).

A *trial* is one setting of the method's numeric hyperparameters; its score is the
geometric mean, over the graphs and seeds given, of the step time of the plan the
method finds within its budget over the problem's lower bound (an invalid plan scores
its step time times 10: worse than any valid one). Ray Tune draws the settings (random
search seeded by ``seed``; the method's defaults are always the first trial, so the
result says how much tuning gained) and runs the trials as Ray tasks, one CPU each, on
a local Ray or a cluster. The best setting is written as ``{"params": {METHOD: {KEY:
VALUE}}}``, the file ``-p`` reads: REGAL's "tuned BRKGA" baseline is
``graphopt tune ... --method brkga`` then ``-p tuned.json``.

The space (:func:`search_space`) comes from the method's dataclass fields: a number
with both bounds in its field's metadata is drawn uniformly between them; one with a
lower bound or none, log-uniformly within a factor 4 of its default (the defaults of
graphopt's searches follow their papers, so the good region is near them).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import signal
import sys
import tempfile
import threading
import typing
from collections.abc import Sequence
from dataclasses import dataclass

from graphopt.errors import GraphoptError, UsageError
from graphopt.optim.base import Budget, get_optimizer, optimize, parse_task
from graphopt.sim import Problem, simulate
from graphopt.sim.plan import INVALID_PENALTY

__all__ = ["Knob", "score", "search_space", "tune"]


# A refused setting's score inside Tune: the largest float, finite (Tune's loggers refuse
# infinities); None in the result.
_NO_SCORE = sys.float_info.max


@dataclass(frozen=True)
class Knob:
    """One hyperparameter's range: ``low``..``high`` (inclusive), on a log scale or not,
    whole numbers or not."""

    low: float
    high: float
    log: bool
    integer: bool

    def domain(self):
        """The Ray Tune distribution of this range."""
        from ray import tune

        if self.integer:
            # Tune's integer ranges exclude the upper end
            return (tune.lograndint if self.log else tune.randint)(int(self.low),
                                                                   int(self.high) + 1)
        return (tune.loguniform if self.log else tune.uniform)(self.low, self.high)


def search_space(method: str, keys: Sequence[str] | None = None) -> dict[str, Knob]:
    """The tunable hyperparameters of ``method`` (its int and float fields, not bools)
    and their ranges; ``keys`` keeps only those.

    Raises
    ------
    GraphoptError
        A key the method does not have or that is not a number; a method with nothing to
        tune.

    Examples
    --------
    >>> search_space("sa", ["chains", "alpha"])["alpha"]
    Knob(low=0.3, high=4.8, log=True, integer=False)
    """
    opt = get_optimizer(method)
    cls = type(opt)
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    hints = typing.get_type_hints(cls) if fields else {}
    space = {}
    for name, f in fields.items():
        kinds = typing.get_args(hints[name]) or (hints[name],)
        default = f.default
        numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
        if not numeric or not set(kinds) & {int, float} or "choices" in f.metadata:
            continue
        integer = float not in kinds
        lo = f.metadata.get("min", f.metadata.get("gt"))
        hi = f.metadata.get("max")
        if lo is not None and hi is not None and hi < math.inf:
            low = lo if "min" in f.metadata else lo + (1 if integer else 1e-3 * (hi - lo))
            space[name] = Knob(low, hi, False, integer)
        elif default > 0:
            low, high = default / 4, default * 4
            if lo is not None:
                low = max(low, lo if "min" in f.metadata else lo * (1 + 1e-9))
            if integer:
                low, high = max(1, math.ceil(low)), max(1, math.floor(high))
            space[name] = Knob(low, high, True, integer)
    if keys:
        bad = [k for k in keys if k not in space]
        if bad:
            raise UsageError(f"--keys {','.join(bad)}: not a numeric hyperparameter of "
                             f"{method}; it has {', '.join(space) or 'none'}")
        space = {k: space[k] for k in keys}
    if not space:
        raise UsageError(f"{method} has no numeric hyperparameter to tune")
    return space


def score(problems: Sequence[Problem], method: str, params: dict, budget: int,
          seeds: Sequence[int], task: str = "placement") -> float:
    """Geometric mean over ``problems`` and ``seeds`` of the step time of ``method``'s
    plan (``params`` its hyperparameters, ``budget`` evaluations) over the lower bound;
    an invalid plan counts :data:`~graphopt.sim.plan.INVALID_PENALTY` times its step time
    (as REGAL scores infeasible plans).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> score([prob], "sa", {"chains": 4}, 40, [0]) >= 1.0
    True
    """
    logs = []
    for problem in problems:
        for seed in seeds:
            plan, _ = optimize(problem, method, task, Budget(budget), seed, **params)
            res = simulate(problem, plan)
            ratio = res.step_time / problem.lower_bound
            logs.append(math.log(ratio if res.valid else ratio * INVALID_PENALTY))
    return math.exp(sum(logs) / len(logs))


def _trial(config: dict, problems, method: str, budget: int, seeds: list[int],
           task: str) -> dict:
    """One Tune trial: the score of ``config`` (run in a Ray worker, one CPU)."""
    import numba

    numba.set_num_threads(1)  # a trial takes one CPU; Tune runs one per CPU side by side
    # the problems come from Ray's object store as read-only arrays, a type numba would
    # compile the simulator for anew (a minute): writable copies load it from its cache
    problems = copy.deepcopy(problems)
    try:
        get_optimizer(method, **config)
    except GraphoptError as err:  # a setting the method refuses as a whole (BRKGA's
        return {"ratio": _NO_SCORE, "refused": str(err)}  # elites + mutants > 1)
    return {"ratio": score(problems, method, config, budget, seeds, task), "refused": None}


def tune(problems: Sequence[Problem], method: str, *, trials: int = 16, budget: int = 1000,
         seeds: Sequence[int] = (0,), task: str = "placement",
         keys: Sequence[str] | None = None, seed: int = 0,
         concurrent: int | None = None) -> dict:
    """Tune ``method``'s hyperparameters on ``problems`` with Ray Tune: ``trials``
    settings, the defaults first, each scored by :func:`score`, at most ``concurrent`` at
    once (default: one per CPU). Ray must be initialized
    (:func:`graphopt.evaluate.ray.ray_session`).

    Returns
    -------
    dict
        ``params`` (``{method: best setting}``, the file ``-p`` reads), ``ratio`` (its
        score), ``default_ratio`` (the defaults' score), ``space`` and ``trials`` (each
        setting with its score, best first; None and the reason for a setting the
        method refuses).
    """
    # Tune's status box and its "results here" line (a folder removed after the run) are
    # not shown: the command prints its own table; the returned dict holds every trial
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    from ray import tune as rt
    from ray.tune.search.basic_variant import BasicVariantGenerator

    parse_task(task)
    space = search_space(method, keys)
    opt = get_optimizer(method)
    defaults = {k: getattr(opt, k) for k in space}
    trainable = rt.with_parameters(_trial, problems=list(problems), method=method,
                                   budget=budget, seeds=list(seeds), task=task)
    with tempfile.TemporaryDirectory(prefix="graphopt-tune-") as storage:
        # reuse_actors: a trial's worker, graphopt (and torch) imported, runs the next one
        tuner = rt.Tuner(
            trainable, param_space={k: knob.domain() for k, knob in space.items()},
            tune_config=rt.TuneConfig(metric="ratio", mode="min", num_samples=trials,
                                      reuse_actors=True, max_concurrent_trials=concurrent,
                                      search_alg=BasicVariantGenerator(
                                          points_to_evaluate=[defaults], random_state=seed)),
            run_config=rt.RunConfig(storage_path=storage, name="tune", verbose=0))
        # Tune installs a Ctrl-C handler of its own and leaves it: after a tuning run in
        # a Python session, Ctrl-C would no longer stop anything else
        handler = signal.getsignal(signal.SIGINT)
        try:
            grid = tuner.fit()
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, handler)
        errors = [r.error for r in grid if r.error is not None]
        if errors:
            cause = getattr(errors[0], "cause", errors[0])
            raise cause if isinstance(cause, GraphoptError) else errors[0]
        rows = [{"config": {k: _plain(v) for k, v in r.config.items()},
                 "ratio": r.metrics["ratio"], "refused": r.metrics["refused"]} for r in grid]
    rows.sort(key=lambda r: r["ratio"])
    default = next(r["ratio"] for r in rows
                   if r["config"] == {k: _plain(v) for k, v in defaults.items()})
    for r in rows:
        r["ratio"] = None if r["ratio"] == _NO_SCORE else r["ratio"]
    return {"method": method, "params": {method: rows[0]["config"]}, "ratio": rows[0]["ratio"],
            "default_ratio": default, "budget": budget, "seeds": list(seeds), "task": task,
            "seed": seed, "graphs": [f"{p.graph.name}@{p.cluster.name}" for p in problems],
            "space": {k: dataclasses.asdict(v) for k, v in space.items()}, "trials": rows}


def _plain(value):
    """A numpy scalar as the JSON number it is."""
    return value.item() if hasattr(value, "item") else value
