"""Simulated annealing in the style of FlexFlow's MCMC search, with parallel chains.

FlexFlow (Jia, Zaharia & Aiken, 2019) walks the space of strategies from data
parallelism: propose a random change to one op's configuration, accept it if it is
faster, and if slower with probability ``exp(−α·Δ)`` (α = 1.2), resetting to the best
strategy now and then. Here every one of ``chains`` Markov chains proposes one single
move per round (one colocation unit to another device, two priorities adjacent in one
device's order swapped, or one fusion toggled), and the round's proposals are simulated
as one batch, so the simulator's parallelism is used. Δ is taken relative to the
chain's current step time, which makes α independent of the time scale, and the
temperature T falls geometrically from 1 to ``final_temperature`` over the budget:

    accept with probability min(1, exp(−α · (new − current) / (current · T)))

``final_temperature = 1`` gives FlexFlow's fixed-temperature MCMC. Every ``reset_every``
rounds every chain restarts from the best plan seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphopt.dist.local import BudgetExhausted, LocalEvaluator
from graphopt.optim.base import Budget, register
from graphopt.optim.search._space import SearchSpace
from graphopt.sim import Plan, Problem

__all__ = ["SimulatedAnnealing"]


@register("sa")
@dataclass
class SimulatedAnnealing:
    """Parallel-chain simulated annealing (FlexFlow-style MCMC) over single moves.

    Starts every chain from ``init`` (default: the fastest of one device, units round
    robin, contiguous blocks). The best plan seen is returned, never worse than the start.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(5, 4), load_cluster("dgx1-v100:2"))
    >>> plan, stats = SimulatedAnnealing(chains=8).optimize(prob, frozenset({"placement"}),
    ...                                                     Budget(evals=200), seed=0)
    >>> stats["step_time"] <= stats["initial_step_time"]
    True

    References
    ----------
    Z. Jia, M. Zaharia and A. Aiken, "Beyond data and model parallelism for deep neural
    networks", MLSys 2019 (§5: MCMC search, α = 1.2).
    S. Kirkpatrick, C. D. Gelatt and M. P. Vecchi, "Optimization by simulated annealing",
    Science 220, 1983.
    """

    chains: int = field(default=16, metadata={"min": 1,
        "help": "Markov chains run side by side; one proposal each per simulated batch."})
    alpha: float = field(default=1.2, metadata={"gt": 0,
        "help": "FlexFlow's α: a proposal Δ slower (relative) is accepted with probability exp(−α·Δ/T)."})
    initial_temperature: float = field(default=0.02, metadata={"gt": 0,
        "help": "Temperature T at the start (relative Δ: a 1% slower proposal passes w.p. exp(−0.6))."})
    final_temperature: float = field(default=0.001, metadata={"gt": 0,
        "help": "Temperature at the end of the budget; equal to the initial one: FlexFlow's fixed T."})
    reset_every: int = field(default=50, metadata={"min": 1,
        "help": "Rounds between restarts of every chain from the best plan seen."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        rng = np.random.default_rng(seed)
        space = SearchSpace(problem, task, init)
        ev = LocalEvaluator.from_budget(problem, budget)
        interrupted, rounds, accepted = False, 0, 0
        try:
            start, start_score = space.start(ev)
            chains = start.take(np.zeros(self.chains, np.int64))
            current = np.full(self.chains, start_score)
            best, best_score = start, start_score
            while len(space.kinds):
                proposal = space.apply(chains, space.random_moves(chains, rng))
                scores = space.evaluate(ev, proposal)
                k = len(scores)
                temperature = self.initial_temperature * (
                    self.final_temperature / self.initial_temperature) ** ev.fraction_spent()
                delta = (scores - current[:k]) / current[:k]
                accept = rng.random(k) < np.exp(-self.alpha * np.maximum(delta, 0.0) / temperature)
                rows = np.flatnonzero(accept)
                chains.put(rows, proposal.take(rows))
                current[rows] = scores[rows]
                accepted += len(rows)
                if scores.min() < best_score:
                    i = int(np.argmin(scores))
                    best, best_score = proposal.take([i]), float(scores[i])
                rounds += 1
                if rounds % self.reset_every == 0:
                    chains = best.take(np.zeros(self.chains, np.int64))
                    current[:] = best_score
        except BudgetExhausted:
            pass
        except KeyboardInterrupt:
            interrupted = True
        return space.result(ev, interrupted, rounds=rounds,
                            acceptance=accepted / max(rounds * self.chains, 1))
