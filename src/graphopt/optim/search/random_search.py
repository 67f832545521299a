"""Random search: sample plans uniformly, keep the fastest.

The baseline every search must beat (Bergstra & Bengio, 2012, argue it is a strong one
when few decisions matter). Each batch draws uniform random keys and decodes them as
BRKGA does: a device per colocation unit, a priority and a fusion priority per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphopt.errors import BudgetExhausted
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, register
from graphopt.optim.search._space import SearchSpace
from graphopt.sim import Plan, Problem

__all__ = ["RandomSearch"]


@register("random-search")
@dataclass
class RandomSearch:
    """Uniform random sampling of the decisions in ``task``, simulated in batches.

    Every unit (colocation group, or node in no group) gets a device drawn uniformly;
    with ``scheduling`` every node a uniform priority; with ``fusion`` every node a
    uniform fusion priority in [-0.5, 0.5) (so each fusion is on with probability 1/2).
    The initial plan is evaluated first, so the result is never worse than it.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(5, 4), load_cluster("dgx1-v100:2"))
    >>> plan, stats = RandomSearch(batch_size=16).optimize(prob, frozenset({"placement"}),
    ...                                                    Budget(evals=50), seed=0)
    >>> stats["evals"], stats["step_time"] <= stats["initial_step_time"]
    (50, True)

    References
    ----------
    J. Bergstra and Y. Bengio, "Random search for hyper-parameter optimization", JMLR 13, 2012.
    """

    batch_size: int = field(default=128, metadata={"min": 1, "limit": 10_000,
        "help": "Plans sampled and simulated per batch."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        rng = np.random.default_rng(seed)
        space = SearchSpace(problem, task, init)
        ev = LocalEvaluator.from_budget(problem, budget)
        interrupted = False
        try:
            space.start(ev)
            while len(space.kinds):
                keys = rng.random((self.batch_size, space.num_genes))
                space.evaluate(ev, space.decode(keys))
        except BudgetExhausted:
            pass
        except KeyboardInterrupt:
            interrupted = True
        return space.result(ev, interrupted)
