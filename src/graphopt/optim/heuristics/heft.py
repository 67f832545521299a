"""HEFT: list scheduling by upward rank onto the device that finishes each op first.

Topcuoglu, Hariri and Wu, "Performance-effective and low-complexity task scheduling
for heterogeneous computing", IEEE TPDS 13(3), 2002.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.heuristics._common import coplace, fit_memory, result_stats, upward_rank
from graphopt.optim.heuristics._listsched import ListScheduler
from graphopt.sim import Plan, Problem

__all__ = ["HEFT", "heft_rank"]


def heft_rank(problem: Problem) -> np.ndarray:
    """HEFT's upward rank: mean op time over devices plus, on every edge, the transfer
    time over the mean link (:meth:`Problem.transfer_time`), longest path to a sink.
    O(N + E).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(layers=2), load_cluster("dgx1-v100:2"))
    >>> bool(heft_rank(prob).max() >= prob.lower_bound)
    True
    """
    return upward_rank(problem, problem.costs.time.mean(axis=1),
                       problem.transfer_time(problem.succ_bytes))


@register("heft")
@dataclass
class HEFT:
    """HEFT: ops by decreasing upward rank, each on the device where it finishes first.

    Ops are taken in decreasing :func:`heft_rank` (ties: topological index, so the
    order is topological). Each goes to the allowed device (its colocation group's,
    once the group is placed) where it would finish first, counting its inputs'
    transfers over the links; ties go to the device with less memory in use, then the
    lower index. Inputs and parameters follow their first consumer; with
    ``coplace=True``, so does every op whose output only one op consumes (Baechi's
    co-placement, off by default as in the paper). Devices without
    room under the memory ledger of
    :class:`~graphopt.optim.heuristics._listsched.ListScheduler` are skipped (when none
    has room, the roomiest takes the op), and the plan is checked with the simulator
    (:func:`~graphopt.optim.heuristics._common.fit_memory`).

    When the task includes scheduling, the plan's priorities replay HEFT's order on
    each device (earlier start first).

    Differences from the paper: ops are appended after a device's last op (no insertion
    into idle gaps, which the simulator's list scheduler could not honour), and the
    memory check is ours.

    Complexity: O((N + E)·D) per round; at most ``max_rounds`` rounds, then at most 50
    simulations of memory repair, all within the budget.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> plan, stats = HEFT().optimize(prob, frozenset({"placement", "scheduling"}), Budget(), 0)
    >>> stats["valid"], plan.priority is not None
    (True, True)
    """

    max_rounds: int = field(default=8, metadata={"min": 1,
        "help": "Schedule-and-simulate rounds to fit memory."})
    coplace: bool = field(default=False, metadata={
        "help": "An op whose only consumer is B goes with B (Baechi's grouper)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        ev = LocalEvaluator.from_budget(problem, budget)
        time = problem.costs.time
        rank = heft_rank(problem)
        order = np.lexsort((np.arange(problem.num_nodes), -rank))
        coloc = coplace(problem) if self.coplace else None

        def build(limit: np.ndarray) -> tuple[Plan, np.ndarray]:
            s = ListScheduler(problem, limit, coloc)
            for v in order[~s.follower[order]]:
                devs = s.allowed(v)
                ready, need = s.estimate([v], devs)
                fits = np.flatnonzero(s.used[devs] + need[0] <= s.limit[devs])
                if len(fits) == 0:
                    s.assign(v, s.roomiest(v))
                    continue
                devs = devs[fits]
                finish = np.maximum(s.avail[devs], ready[0, fits]) + time[v, devs]
                s.assign(v, int(devs[np.lexsort((devs, s.used[devs], finish))[0]]))
            s.place_followers()
            plan = Plan(placement=s.dev, priority=s.priority(), meta=s.summary())
            return compose(task | {"placement"}, init, plan), s.peak

        plan, res = fit_memory(ev, build, self.max_rounds)
        return plan.replace(meta={}), {**result_stats(res, ev), **plan.meta}
