"""The plainest placements: one device, round robin, and uniformly at random.

They are the floor every other method must clear; ``single`` is also the compiler's
own answer when nobody places anything (TensorFlow and PyTorch put a whole model on
one device unless told otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.heuristics._common import result_stats, units
from graphopt.sim import Plan, Problem, SimResult

__all__ = ["Single", "RoundRobin", "Random"]


@register("single")
@dataclass
class Single:
    """Everything on the fastest device that fits.

    Devices are tried from the lowest total op time (``problem.costs.time.sum(0)``)
    upwards; the first whose simulated peak memory is within capacity wins. When no
    device fits, the plan puts everything on the fastest one and ``stats["fits"]`` is
    False. At most D simulations, fewer when the budget runs out first.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("cpu-v100:3"))
    >>> plan, stats = Single().optimize(prob, frozenset({"placement"}), Budget(), 0)
    >>> stats["device"], stats["fits"]       # gpu:0, not the host CPU
    (1, True)
    """

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        ev = LocalEvaluator.from_budget(problem, budget)
        tried: list[tuple[Plan, SimResult, int]] = []
        for d in np.argsort(problem.costs.time.sum(axis=0), kind="stable"):
            if tried and ev.exhausted():
                break
            plan = compose(task | {"placement"}, init,
                           Plan(placement=np.full(problem.num_nodes, d, dtype=np.int64)))
            res = ev.simulate(plan)
            if res.valid:
                return plan, {**result_stats(res, ev), "device": int(d), "fits": True}
            tried.append((plan, res, int(d)))
        plan, res, d = tried[0]
        return plan, {**result_stats(res, ev), "device": d, "fits": False,
                      "note": "no single device holds the graph; placed on the fastest"}


@register("round-robin")
@dataclass
class RoundRobin:
    """Colocation units dealt to devices in turn, in topological order.

    Consecutive runs of ``chunk`` units (a colocation group or a lone op) go to one
    device, the next run to the next device: ``chunk=1`` deals op by op, a large chunk
    gives contiguous stages. Ignores costs and memory. O(N).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(4, 2), load_cluster("dgx1-v100:2"))
    >>> plan, _ = RoundRobin().optimize(prob, frozenset({"placement"}), Budget(), 0)
    >>> plan.placement.tolist()
    [0, 1, 0, 1, 0, 1, 0, 1]
    """

    chunk: int = field(default=1, metadata={"min": 1, "help": "Units per turn."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        unit, _ = units(problem.graph.coloc)
        place = (unit // max(1, self.chunk)) % problem.num_devices
        return compose(task | {"placement"}, init, Plan(placement=place)), \
            {"evals": 0, "chunk": self.chunk}


@register("random")
@dataclass
class Random:
    """Each colocation unit on a device drawn uniformly at random (seeded).

    Ignores costs and memory. O(N).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(4, 2), load_cluster("dgx1-v100:2"))
    >>> a, _ = Random().optimize(prob, frozenset({"placement"}), Budget(), seed=3)
    >>> b, _ = Random().optimize(prob, frozenset({"placement"}), Budget(), seed=3)
    >>> a == b
    True
    """

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        unit, k = units(problem.graph.coloc)
        draw = np.random.default_rng(seed).integers(0, problem.num_devices, size=k)
        return compose(task | {"placement"}, init, Plan(placement=draw[unit])), {"evals": 0}
