"""BRKGA: a biased random-key genetic algorithm, vectorized in numpy.

A chromosome is a vector of keys in [0, 1): one per colocation unit for placement
(device ``floor(key · D)``), one per node for scheduling (the key is the priority) and
one per node for fusion (fusion priority ``key − 0.5``: keys at or below 0.5 never fuse),
for the parts the task searches (:meth:`BRKGA.layout` gives the slices). Each
generation keeps the elite unchanged, adds mutants drawn afresh and fills the rest with
children of one elite and one non-elite parent, each gene taken from the elite parent
with the inheritance probability (Gonçalves & Resende, 2011), or each group of genes
where the chromosome groups them (:attr:`SearchSpace.crossover_groups`). REGAL (Paliwal et al.,
2020) drives this algorithm with a GNN that sets, per gene, the Beta distribution
mutants are drawn from and the inheritance probability: both are constructor arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphopt.errors import BudgetExhausted, UsageError
from graphopt.evaluate.local import LocalEvaluator
from graphopt.optim.base import Budget, register
from graphopt.optim.search._space import SearchSpace
from graphopt.sim import Plan, Problem

__all__ = ["BRKGA", "crossover"]


def crossover(rng: np.random.Generator, elite: np.ndarray, rest: np.ndarray, n: int,
              inherit: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """``n`` children, each of an elite parent (a row of ``elite``) and a non-elite one (of
    ``rest``), chosen at random: gene g from the elite parent with probability
    ``inherit[g]``, one coin per gene or, with ``groups`` (group of every gene, numbered from
    0), one per group, so that a group's genes all come from the same parent (for a group,
    give its genes one inheritance). Without ``groups`` the draws are BRKGA's own.

    >>> rng = np.random.default_rng(0)
    >>> kids = crossover(rng, np.zeros((1, 4)), np.ones((1, 4)), 3, np.full(4, 0.5),
    ...                  groups=np.array([0, 0, 1, 1]))
    >>> bool((kids[:, 0] == kids[:, 1]).all() and (kids[:, 2] == kids[:, 3]).all())
    True
    """
    a = elite[rng.integers(len(elite), size=n)]
    b = rest[rng.integers(len(rest), size=n)]
    genes = elite.shape[1]
    coins = (rng.random((n, genes)) if groups is None
             else rng.random((n, int(groups.max()) + 1))[:, groups])
    return np.where(coins < inherit, a, b)


@register("brkga")
@dataclass(eq=False)
class BRKGA:
    """Biased random-key genetic algorithm over device, priority and fusion keys.

    The first population holds the initial plan's encoding and ``population − 1``
    chromosomes drawn like mutants, so the result is never worse than the initial plan.
    Only new chromosomes are simulated: ``population − elites`` per generation.

    Defaults follow the ranges Gonçalves & Resende (2011, §4) recommend: elite 10–25% of
    the population, mutants 10–30%, inheritance 0.5–0.8 (0.7 in their experiments).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(5, 4), load_cluster("dgx1-v100:2"))
    >>> task = frozenset({"placement", "scheduling"})
    >>> BRKGA.layout(prob, task)
    {'placement': slice(0, 20, None), 'scheduling': slice(20, 40, None)}
    >>> alpha = np.ones(40); alpha[:20] = 5.0     # mutants: placement keys skewed high
    >>> plan, stats = BRKGA(population=20, mutant_alpha=alpha).optimize(
    ...     prob, task, Budget(evals=200), seed=0)
    >>> stats["step_time"] <= stats["initial_step_time"]
    True

    References
    ----------
    J. F. Gonçalves and M. G. C. Resende, "Biased random-key genetic algorithms for
    combinatorial optimization", Journal of Heuristics 17(5), 2011.
    A. Paliwal et al., "Reinforced genetic algorithm learning for optimizing computation
    graphs" (REGAL), ICLR 2020.
    """

    population: int = field(default=100, metadata={"min": 2, "limit": 10_000,
                                                   "help": "Chromosomes per generation."})
    elite_fraction: float = field(default=0.2, metadata={"gt": 0, "max": 1,
        "help": "Share of the population kept unchanged as the elite."})
    mutant_fraction: float = field(default=0.1, metadata={"min": 0, "max": 1,
        "help": "Share of the population replaced by fresh mutants each generation."})
    inheritance: float | np.ndarray = field(default=0.7, metadata={"min": 0, "max": 1,
        "help": "Probability a child takes each gene from its elite parent (scalar or one per gene)."})
    mutant_alpha: float | np.ndarray = field(default=1.0, metadata={"gt": 0,
        "help": "Beta α that mutant genes are drawn from (scalar or one per gene; 1, 1 = uniform)."})
    mutant_beta: float | np.ndarray = field(default=1.0, metadata={"gt": 0,
        "help": "Beta β that mutant genes are drawn from (scalar or one per gene)."})

    def __post_init__(self) -> None:
        # each fraction alone is checked by check_params; their sum only here, and only
        # when both are in range so that a bad single value gets its own message
        e, m = self.elite_fraction, self.mutant_fraction
        if 0 <= e <= 1 and 0 <= m <= 1 and e + m > 1:
            raise UsageError(f"brkga.elite_fraction + brkga.mutant_fraction = {e:g} + {m:g}: "
                             "expected <= 1 (elites and mutants share one population)")

    @staticmethod
    def layout(problem: Problem, task: frozenset[str]) -> dict[str, slice]:
        """Slices of the chromosome for each searched part, in the order placement
        (one gene per colocation unit), scheduling and fusion (one gene per node)."""
        return SearchSpace(problem, task).layout

    def _per_gene(self, name: str, value, genes: int, layout: dict, lo: float,
                  hi: float) -> np.ndarray:
        a = np.asarray(value, dtype=np.float64)
        if a.ndim > 1 or (a.ndim == 1 and len(a) != genes):
            parts = ", ".join(f"{k} {s.start}:{s.stop}" for k, s in layout.items())
            raise UsageError(f"brkga: {name} has shape {a.shape}; expected a scalar or "
                             f"{genes} values, one per gene ({parts})")
        if not (np.isfinite(a).all() and (a >= lo).all() and (a <= hi).all()):
            raise UsageError(f"brkga: {name} must lie in [{lo}, {hi}], got {value!r}")
        return np.broadcast_to(a, (genes,))

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        return self.evolve(SearchSpace(problem, task, init), budget, seed)

    def evolve(self, space: SearchSpace, budget: Budget, seed: int,
               keep_elite: bool = False) -> tuple[Plan, dict]:
        """The genetic algorithm over ``space``'s chromosome (its ``layout``, ``decode`` and
        ``encode``): :meth:`optimize` with a chromosome of another shape, as REGAL's
        (:class:`graphopt.optim.learned.regal.method.RegalSpace`).

        With ``keep_elite`` the stats also hold the last population's elite: ``elite_keys``
        (elites x genes, best first) and ``elite_scores`` (what REGAL's imitation targets
        are fitted to, :mod:`graphopt.optim.learned.regal.imitate`)."""
        rng = np.random.default_rng(seed)
        problem = space.problem
        genes, layout = space.num_genes, space.layout
        inherit = self._per_gene("inheritance", self.inheritance, genes, layout, 0.0, 1.0)
        alpha = self._per_gene("mutant_alpha", self.mutant_alpha, genes, layout, 1e-9, np.inf)
        beta = self._per_gene("mutant_beta", self.mutant_beta, genes, layout, 1e-9, np.inf)
        groups = space.crossover_groups
        pop = self.population
        n_elite = max(1, round(self.elite_fraction * pop))
        n_mutant = round(self.mutant_fraction * pop)
        n_child = pop - n_elite - n_mutant
        if n_child < 0 or n_elite >= pop:
            raise UsageError(f"brkga: population {pop} cannot hold {n_elite} elites and "
                             f"{n_mutant} mutants; lower the fractions or grow the population")
        ev = LocalEvaluator.from_budget(problem, budget)
        interrupted, generations = False, 0
        keys, scores = np.zeros((0, genes)), np.zeros(0)  # a budget spent in the first population
        try:
            start, start_score = space.start(ev)
            keys = np.vstack([space.encode(start), rng.beta(alpha, beta, (pop - 1, genes))])
            scores = np.concatenate([[start_score], space.evaluate(ev, space.decode(keys[1:]))])
            keys = keys[:len(scores)]
            while len(space.kinds) and not ev.exhausted():
                order = np.argsort(scores, kind="stable")
                keys, scores = keys[order], scores[order]
                elite, rest = keys[:n_elite], keys[n_elite:]
                mutants = rng.beta(alpha, beta, (n_mutant, genes))
                children = crossover(rng, elite, rest, n_child, inherit, groups)
                new = np.vstack([mutants, children])
                new_scores = space.evaluate(ev, space.decode(new))
                keys = np.vstack([elite, new[:len(new_scores)]])
                scores = np.concatenate([scores[:n_elite], new_scores])
                generations += 1
        except BudgetExhausted:
            pass
        except KeyboardInterrupt:
            interrupted = True
        extra = {}
        if keep_elite:
            order = np.argsort(scores, kind="stable")[:n_elite]
            extra = {"elite_keys": keys[order], "elite_scores": scores[order]}
        return space.result(ev, interrupted, generations=generations, **extra)
