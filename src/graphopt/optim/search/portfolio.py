"""The bar a user would set without learning: every heuristic, then a search from the best.

``best`` runs every placement heuristic (cheapest first) and keeps the fastest valid
plan; ``--init best`` starts any method from it (``graphopt optimize --init best
--methods sa,brkga,local-search``). ``portfolio`` is ``best`` followed by simulated
annealing (:class:`~graphopt.optim.search.annealing.SimulatedAnnealing`) from that plan,
the two sharing one budget: the heuristics' own simulations, the pricing of their plans
and the annealing's proposals all count, and the annealing gets what is left of the
evaluations and seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from graphopt.evaluate.interrupt import stop_requested
from graphopt.errors import BudgetExhausted, InfeasibleError, UsageError
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, get_optimizer, register
from graphopt.optim.search.annealing import SimulatedAnnealing
from graphopt.sim import Plan, Problem

__all__ = ["HEURISTICS", "BestHeuristic", "Portfolio", "budget_left", "run_heuristics"]

#: Placement heuristics ``best`` runs, cheapest first, so that a time budget cuts the
#: slow list schedulers (minutes on 50k-op graphs) before the partitioners.
HEURISTICS = "single,expert,round-robin,metis,heft,m-topo,m-etf,m-sct"


def budget_left(budget: Budget, evals: int, t0: float) -> Budget:
    """What remains of ``budget`` after ``evals`` evaluations and the seconds since ``t0``."""
    return replace(budget, evals=None if budget.evals is None else max(budget.evals - evals, 0),
                   seconds=None if budget.seconds is None
                   else max(budget.seconds - (time.perf_counter() - t0), 0.0))


def _spent(budget: Budget) -> bool:
    return budget.evals == 0 or budget.seconds == 0.0 or stop_requested()


def run_heuristics(problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                   init: Plan | None, names: str) -> tuple[Plan, dict]:
    """Every heuristic of ``names`` (comma-separated) under ``budget``, each plan priced
    once through one evaluator; the fastest valid plan (``init`` competes when given).

    The first heuristic always runs; the others only while the budget lasts. Stats:
    ``evals`` (the heuristics' own simulations and the pricing), ``seconds``,
    ``step_time``, ``chosen`` (the winner's name), ``heuristics`` (step time of each,
    None where invalid) and ``history`` rows ``(evals, seconds, best)``.

    Raises
    ------
    GraphoptError
        A name that is not a registered method, or no valid plan at all.
    """
    t0 = time.perf_counter()
    methods = [m.strip() for m in names.split(",") if m.strip()]
    if not methods:
        raise UsageError(f"heuristics {names!r}: no method named")
    ev = LocalEvaluator(problem)  # prices the plans; the budget is checked against the total
    evals, found, chosen, history = 0, {}, None, []
    for i, name in enumerate(methods):
        left = budget_left(budget, evals + ev.evals, t0)
        if i and _spent(left):
            break
        if not i:  # the first always runs, whatever the clock says
            left = replace(left, seconds=None)
        opt = get_optimizer(name)
        try:
            plan, st = opt.optimize(problem, task | {"placement"}, left, seed, init)
        except BudgetExhausted:
            break
        evals += int(st.get("evals", 0))
        before = ev.best_time
        res = ev.simulate(plan)
        found[name] = float(res.step_time) if res.valid else None
        if ev.best_time < before:
            chosen = name
        history.append([evals + ev.evals, time.perf_counter() - t0,
                        ev.best_time if np.isfinite(ev.best_time) else None])
    if init is not None and init.placement is not None:
        res = ev.simulate(init)
        if res.valid and ev.best_plan is init:
            chosen = "init"
    if ev.best_plan is None:
        raise InfeasibleError(f"no heuristic of {', '.join(found)} found a plan that fits "
                              f"{problem.graph.name} on {problem.cluster.name}")
    return ev.best_plan, {"evals": evals + ev.evals, "seconds": time.perf_counter() - t0,
                          "step_time": ev.best_time, "valid": True, "chosen": chosen,
                          "heuristics": found, "history": history}


@register("best")
@dataclass
class BestHeuristic:
    """The fastest plan of every placement heuristic: the start ``--init best`` gives.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4), load_cluster("dgx1-v100:2"))
    >>> plan, stats = BestHeuristic().optimize(prob, frozenset({"placement"}), Budget(), 0)
    >>> stats["step_time"] == min(t for t in stats["heuristics"].values() if t)
    True
    """
    objectives: ClassVar[tuple[str, ...]] = ("runtime",)  # heuristics are picked by step time


    heuristics: str = field(default=HEURISTICS, metadata={
        "help": "Placement heuristics to run, comma-separated, cheapest first."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        return run_heuristics(problem, task, budget, seed, init, self.heuristics)


@register("portfolio")
@dataclass
class Portfolio:
    """Every placement heuristic, then simulated annealing from the fastest, in one budget.

    The non-learned bar a learned method must clear: what a user gets by trying every
    heuristic and then searching from the winner. Without placement in the task the
    heuristics are skipped and the annealing starts from ``init``.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4), load_cluster("dgx1-v100:2"))
    >>> plan, stats = Portfolio().optimize(prob, frozenset({"placement"}), Budget(300), 0)
    >>> stats["evals"] <= 300, stats["step_time"] <= stats["heuristic_step_time"]
    (True, True)
    """
    objectives: ClassVar[tuple[str, ...]] = ("runtime",)  # heuristics are picked by step time


    heuristics: str = field(default=HEURISTICS, metadata={
        "help": "Placement heuristics to run first, comma-separated, cheapest first."})
    chains: int = field(default=16, metadata={"min": 1, "limit": 10_000,
        "help": "Markov chains of the annealing that follows (sa.chains)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        t0 = time.perf_counter()
        start, head = init, {"evals": 0, "step_time": None, "chosen": None, "heuristics": {},
                             "history": []}
        if "placement" in task:
            start, head = run_heuristics(problem, task, budget, seed, init, self.heuristics)
        left = budget_left(budget, head["evals"], t0)
        if _spent(left):
            return start, {**head, "seconds": time.perf_counter() - t0,
                           "heuristic_step_time": head["step_time"], "sa_evals": 0,
                           "initial_step_time": head["step_time"], "interrupted": stop_requested()}
        offset_s = time.perf_counter() - t0
        plan, st = SimulatedAnnealing(chains=self.chains).optimize(problem, task, left, seed, start)
        if head["step_time"] is not None and (st["step_time"] is None
                                              or head["step_time"] < st["step_time"]):
            plan, st["step_time"] = start, head["step_time"]  # sa never beat its start
        cap = head["step_time"] if head["step_time"] is not None else float("inf")
        history = head["history"] + [
            [head["evals"] + e, offset_s + s, min(cap, t) if t is not None else head["step_time"]]
            for e, s, t in st["history"]]
        return plan, {**st, "evals": head["evals"] + st["evals"],
                      "seconds": time.perf_counter() - t0, "chosen": head["chosen"],
                      "heuristics": head["heuristics"], "heuristic_step_time": head["step_time"],
                      "heuristic_evals": head["evals"], "sa_evals": st["evals"],
                      "history": history}
