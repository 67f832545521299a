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

Where the task searches several parts of the plan (placement with fusion, say), the
parts are not drawn at fixed odds: each part earns the relative gains of its proposals
over their chain's current plan, and ``adapt`` of the odds follow each part's mean gain
per proposal so far, the rest the fixed odds (adaptive operator selection, as in Ropke
& Pisinger's ALNS, 2006). A part that stops paying, such as priority swaps on devices
that are never idle, then costs little of the budget. Within fusion, toggles and
reorders keep even odds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphopt.errors import BudgetExhausted
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, register
from graphopt.optim.search._space import PART_OF_KIND, SearchSpace
from graphopt.sim import Plan, Problem

__all__ = ["SimulatedAnnealing"]

#: The parts of a plan, and the index in it of the part each kind of move changes.
PARTS = ("placement", "scheduling", "fusion")
PART_OF = np.array([PARTS.index(PART_OF_KIND[k]) for k in sorted(PART_OF_KIND)], np.int64)


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

    chains: int = field(default=16, metadata={"min": 1, "limit": 10_000,
        "help": "Markov chains run side by side; one proposal each per simulated batch."})
    alpha: float = field(default=1.2, metadata={"gt": 0,
        "help": "FlexFlow's α: a proposal Δ slower (relative) is accepted with probability exp(−α·Δ/T)."})
    initial_temperature: float = field(default=0.02, metadata={"gt": 0,
        "help": "Temperature T at the start (relative Δ: a 1% slower proposal passes w.p. exp(−0.6))."})
    final_temperature: float = field(default=0.001, metadata={"gt": 0,
        "help": "Temperature at the end of the budget; equal to the initial one: FlexFlow's fixed T."})
    reset_every: int = field(default=50, metadata={"min": 1,
        "help": "Rounds between restarts of every chain from the best plan seen."})
    adapt: float = field(default=0.9, metadata={"min": 0, "max": 1,
        "help": "Share of the odds of each part's moves (placement, scheduling, fusion) that "
                "follows the part's mean gain so far, where a task searches several (the "
                "rest: parts equally likely). 0: fixed odds. Example: -p sa.adapt=0"})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        rng = np.random.default_rng(seed)
        space = SearchSpace(problem, task, init)
        ev = LocalEvaluator.from_budget(problem, budget)
        interrupted, rounds, accepted = False, 0, 0
        kinds = len(space.kinds)
        fixed = np.full(kinds, 1 / max(kinds, 1)) if space.kind_odds is None else space.kind_odds
        part = PART_OF[space.kinds]
        share = np.bincount(part, fixed, minlength=3)  # each part's fixed odds
        gain, tries = np.zeros(3), np.zeros(3)  # per part of the plan
        adapting = self.adapt > 0 and len(np.unique(part)) > 1
        try:
            start, start_score = space.start(ev)
            chains = start.take(np.zeros(self.chains, np.int64))
            current = np.full(self.chains, start_score)
            best, best_score = start, start_score
            while kinds:
                odds = None
                if adapting:
                    earned = share * (gain + 1e-3) / (tries + 1)  # a part yet to pay keeps some
                    odds_part = (1 - self.adapt) * share + self.adapt * earned / earned.sum()
                    odds = fixed * odds_part[part] / share[part]
                moves = space.random_moves(chains, rng, odds)
                proposal = space.apply(chains, moves)
                scores = space.evaluate(ev, proposal)
                k = len(scores)
                temperature = self.initial_temperature * (
                    self.final_temperature / self.initial_temperature) ** ev.fraction_spent()
                cur = current[:k]  # a plan of no time (a graph of views only) has no ratio
                delta = np.divide(scores - cur, cur, out=scores - cur, where=cur > 0)
                of = PART_OF[moves[:k, 0]]
                np.add.at(tries, of, 1)
                np.add.at(gain, of, np.maximum(-delta, 0.0))
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
                            acceptance=accepted / max(rounds * self.chains, 1),
                            proposals={name: int(tries[i]) for i, name in enumerate(PARTS)
                                       if share[i] > 0})
