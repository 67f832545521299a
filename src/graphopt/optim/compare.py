"""Run several methods on one problem and compare them side by side.

Used by ``graphopt optimize`` and the benchmarks: every method gets the same problem,
task, budget and seed; every plan is re-simulated here, so the table's step times come
from one simulator whatever a method believed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
from graphopt.errors import BudgetExhausted, WriteError
from graphopt._files import atomic_write, write_error
from graphopt.optim.base import Budget, check_objectives, optimize, parse_task
from graphopt.sim import Plan, Problem, SimResult, simulate

__all__ = ["STAGING", "MethodResult", "compare", "output_paths", "write_all", "write_outputs"]


@dataclass
class MethodResult:
    """One method's outcome: its plan, the simulated result, and its own stats."""

    method: str
    plan: Plan
    result: SimResult
    stats: dict = field(default_factory=dict)
    #: the plan run for real (``graphopt optimize --measure``): median, min and max
    #: seconds, steps, devices, and the measured speed-up over ``single``
    measured: dict | None = None

    @property
    def step_time(self) -> float:
        return self.result.step_time

    def row(self, ref: dict[str, float]) -> dict:
        """A JSON-ready table row; ``ref`` maps reference method names to step times."""
        r = self.result
        out = {"method": self.method, "step_time": r.step_time, "valid": r.valid,
               "reason": r.reason, "bound_ratio": r.step_time / r.lower_bound
               if r.lower_bound > 0 else None,
               "peak_memory": r.peak_memory.tolist(), "search_seconds": self.stats.get("seconds"),
               "evals": self.stats.get("evals", 0)}
        for name, t in ref.items():
            out[f"speedup_vs_{name}"] = t / r.step_time if r.valid and r.step_time > 0 else None
        if self.measured is not None:
            out["measured"] = self.measured
        return out


def compare(problem: Problem, methods: list[str], task: str = "placement",
            budget: Budget | None = None, seed: int = 0, init: str | None = None,
            on_start=None, params: dict[str, dict] | None = None) -> list[MethodResult]:
    """Run ``methods`` one after another; each starts from ``init``'s plan when given.

    ``on_start(method)`` is called before each method (for progress display);
    ``params[method]``, when given, are that method's constructor arguments.

    Ctrl-C ends the running method with its best plan so far (its stats say
    ``interrupted``) and skips the methods after it: the results hold what was done.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> [m.method for m in compare(prob, ["single"])]
    ['single']
    """
    tasks = parse_task(task)
    out = []
    # From the start: loading the methods takes seconds, and a Ctrl-C then still ends
    # with the first method's plan, not a traceback.
    with stop_on_interrupt():
        for m in methods:  # before any runs: a method that cannot take the objective fails fast
            check_objectives(m, (budget or Budget()).objective)
        start = None
        if init:
            start, _ = optimize(problem, init, "placement", budget, seed)
        for m in methods:
            if on_start:
                on_start(m)
            try:
                plan, stats = optimize(problem, m, tasks, budget, seed, init=start,
                                       **(params or {}).get(m, {}))
            except BudgetExhausted:
                if stop_requested():  # stopped before the method had any plan
                    break
                raise
            stats["interrupted"] = stats.get("interrupted", False) or stop_requested()
            out.append(MethodResult(m, plan, simulate(problem, plan, timeline=True), stats))
            if stop_requested():
                break
    return out


#: The files :func:`write_outputs` writes in each method's folder: plan, trace, Gantt chart.
METHOD_FILES = ("plan.json", "trace.json", "gantt.png")


def output_paths(out: Path, methods: list[str]) -> list[Path]:
    """Every file :func:`write_outputs` writes under ``out`` for ``methods``: what a
    command checks can be written before the methods run."""
    return [out / m / name for m in methods for name in METHOD_FILES] + [out / "report.json"]


#: The folder under ``out`` where :func:`write_outputs` writes a run's files before it
#: puts them in place; one a killed run left is removed by the next.
STAGING = ".graphopt-staging"


def write_outputs(problem: Problem, results: list[MethodResult], out: Path,
                  extra: dict | None = None) -> Path:
    """Per method ``plan.json``, ``trace.json`` and ``gantt.png`` under ``out/<method>/``,
    and ``out/report.json`` with every row (the paths of :func:`output_paths`), all or
    nothing (:func:`write_all`).
    """
    from graphopt.sim.trace import save_chrome_trace
    from graphopt.viz import gantt

    ref = {name: r.step_time for r in results for name in ("single", "expert")
           if r.method == name and r.result.valid}
    graph = {"name": problem.graph.name, "nodes": problem.num_nodes,
             "fingerprint": problem.graph.fingerprint()}
    plan_file, trace_file, gantt_file = METHOD_FILES
    stats = [{k: v for k, v in r.stats.items() if k != "history"} for r in results]
    report = {"graph": problem.graph.name, "nodes": problem.num_nodes,
              "cluster": problem.cluster.name, "lower_bound": problem.lower_bound,
              **(extra or {}),
              "rows": [r.row(ref) | {"stats": s} for r, s in zip(results, stats)]}
    files = {}
    for r in results:
        files[f"{r.method}/{plan_file}"] = lambda p, r=r: r.plan.replace(
            meta={**r.plan.meta, "graph": graph}).save(p)
        files[f"{r.method}/{trace_file}"] = lambda p, r=r: save_chrome_trace(problem, r.result, p)
        files[f"{r.method}/{gantt_file}"] = lambda p, r=r: gantt(
            problem, r.result, p, title=f"{problem.graph.name} on {problem.cluster.name}: {r.method}")
    return write_all(out, files, report)


def write_all(out: Path, files: dict, report: dict) -> Path:
    """``files`` (``{path under out: write(path)}``) and ``out/report.json`` (``report``
    as JSON), all or nothing, for a full disk as for a kill at any point.

    Every file is written first under ``out/.graphopt-staging/``, then the old report is
    removed and the files are renamed into place, the report last. So a ``report.json``
    in ``out`` and every file it names are one run's, whole (a failure while writing
    leaves the previous run's files as they were; a kill while renaming leaves no
    report); a write that fails removes what this call wrote and the folders it made,
    then raises naming the file in ``out``.
    """
    text = json.dumps(report, indent=1, default=_plain)
    made = [d for d in dict.fromkeys([out, *((out / p).parent for p in files)]) if not d.exists()]
    stage = out / STAGING
    try:
        shutil.rmtree(stage, ignore_errors=True)  # what a killed run left
        for path, write in files.items():
            (stage / path).parent.mkdir(parents=True, exist_ok=True)
            write(stage / path)
        atomic_write(stage / "report.json", lambda f: f.write(text.encode()))
        # the old report goes first: a folder never holds a report beside another run's plans
        (out / "report.json").unlink(missing_ok=True)
        for path in [*files, "report.json"]:
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(stage / path, out / path)
            except OSError as err:
                raise write_error(out / path, err) from None
    except BaseException as err:
        shutil.rmtree(stage, ignore_errors=True)
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:  # not empty: a lock file, or what was there before
                pass
        if isinstance(err, WriteError) and f"/{STAGING}/" in str(err):  # name the file in out
            moved = WriteError(str(err).replace(f"/{STAGING}/", "/", 1))
            moved.errno = err.errno
            moved.filename = str(err.filename or "").replace(f"/{STAGING}/", "/", 1) or None
            raise moved from None
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return out / "report.json"


def _plain(x):
    if isinstance(x, (np.generic, np.ndarray)):
        return x.tolist()
    return str(x)
