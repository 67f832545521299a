"""Local search: first-improvement hill climbing over single moves, restarted from a
perturbed best plan at every local optimum (iterated local search).

A move changes one decision: one colocation unit to another device, two priorities
adjacent in one device's order swapped, or one node's fusion toggled. The neighbourhood
is shuffled and evaluated in batches; the best improving neighbour of the first batch
that holds one is taken, and the neighbourhood of the new plan is scanned afresh. When a
whole neighbourhood holds no improvement, the search restarts from the best plan seen
with ``kick`` random moves applied (Lourenço, Martin & Stützle, 2003).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphopt.errors import BudgetExhausted
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, register
from graphopt.optim.search._space import SearchSpace
from graphopt.sim import Plan, Problem

__all__ = ["LocalSearch"]


@register("local-search")
@dataclass
class LocalSearch:
    """Batched first-improvement local search with perturbed restarts from the best.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(5, 4), load_cluster("dgx1-v100:2"))
    >>> plan, stats = LocalSearch().optimize(prob, frozenset({"placement", "scheduling"}),
    ...                                      Budget(evals=200), seed=0)
    >>> stats["step_time"] <= stats["initial_step_time"]
    True

    References
    ----------
    H. R. Lourenço, O. C. Martin and T. Stützle, "Iterated local search", in Handbook of
    Metaheuristics, 2003.
    """

    batch_size: int = field(default=64, metadata={"min": 1, "limit": 10_000,
        "help": "Neighbours simulated per batch (one batch is the unit of \"first improvement\")."})
    kick: int = field(default=4, metadata={"min": 1,
        "help": "Random moves applied to the best plan to restart from a local optimum."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        rng = np.random.default_rng(seed)
        space = SearchSpace(problem, task, init)
        ev = LocalEvaluator.from_budget(problem, budget)
        interrupted, steps, restarts = False, 0, 0
        try:
            cur, cur_score = space.start(ev)
            best, best_score = cur, cur_score
            while len(space.kinds):
                moves = space.moves(cur)
                moves = moves[rng.permutation(len(moves))]
                improved = False
                for lo in range(0, len(moves), self.batch_size):
                    batch = moves[lo:lo + self.batch_size]
                    cand = space.apply(cur.take(np.zeros(len(batch), np.int64)), batch)
                    scores = space.evaluate(ev, cand)
                    i = int(np.argmin(scores))
                    if scores[i] < cur_score:
                        cur, cur_score, improved = cand.take([i]), float(scores[i]), True
                        steps += 1
                        break
                if cur_score < best_score:
                    best, best_score = cur, cur_score
                if not improved:  # a local optimum: restart from the best, perturbed
                    restarts += 1
                    cur = best
                    for _ in range(self.kick):
                        cur = space.apply(cur, space.random_moves(cur, rng))
                    cur_score = float(space.evaluate(ev, cur)[0])
        except BudgetExhausted:
            pass
        except KeyboardInterrupt:
            interrupted = True
        return space.result(ev, interrupted, improving_steps=steps, restarts=restarts)
