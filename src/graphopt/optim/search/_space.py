"""What every search method shares: the decisions it makes, where it starts, how it scores
a batch of candidates and what it returns.

A search decides the parts of a plan named in its task:

- **placement** as one device per *unit*, a unit being a colocation group or a node in
  no group, so that no candidate ever splits a group;
- **scheduling** as one priority per node (higher runs first among the kernels ready on
  a device);
- **fusion** as one fusion priority per node (a value ``<= 0`` never fuses).

Parts outside the task come from the initial plan (or stay the compiler default).
Candidates travel in batches (:class:`Decisions`, one row per candidate) and are priced
only through a :class:`~graphopt.evaluate.local.LocalEvaluator`, which counts them against
the budget and keeps the fastest valid plan seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphopt.evaluate.interrupt import stop_requested
from graphopt.evaluate.local import LocalEvaluator
from graphopt.evaluate.objective import runtime_bound
from graphopt.optim.base import compose
from graphopt.optim.heuristics._common import units
from graphopt.optim.heuristics.schedulers import critical_path
from graphopt.sim import Plan, Problem

__all__ = ["Decisions", "SearchSpace", "priority_ranks"]

#: Kinds of single moves (column 0 of a move array ``[kind, a, b]``).
PLACE, SWAP, FUSE, REORDER = 0, 1, 2, 3
#: The part of the plan each kind of move changes, in the kinds' order.
PART_OF_KIND = {PLACE: "placement", SWAP: "scheduling", FUSE: "fusion", REORDER: "fusion"}


@dataclass
class Decisions:
    """A batch of B candidates: the parts a task searches, one row per candidate.

    ``units`` (int, (B, U)): device of every unit; ``priority`` (float, (B, N));
    ``fusion`` (float, (B, N)). A part the task does not search is None.
    """

    units: np.ndarray | None = None
    priority: np.ndarray | None = None
    fusion: np.ndarray | None = None

    def __len__(self) -> int:
        return len(next(a for a in (self.units, self.priority, self.fusion) if a is not None))

    def take(self, rows) -> Decisions:
        """A copy of the given rows."""
        return Decisions(*(None if a is None else a[rows] for a in (self.units, self.priority,
                                                                   self.fusion)))

    def put(self, rows, other: Decisions) -> None:
        """Overwrite ``rows`` with the rows of ``other``."""
        for a, b in ((self.units, other.units), (self.priority, other.priority),
                     (self.fusion, other.fusion)):
            if a is not None:
                a[rows] = b


def priority_ranks(priority: np.ndarray) -> np.ndarray:
    """Distinct priorities ``N..1`` that order the nodes as the simulator does ``priority``
    (higher first; ties to the lower index), so that swapping two values always changes
    the order."""
    n = len(priority)
    order = np.lexsort((np.arange(n), -np.asarray(priority, dtype=np.float64)))
    ranks = np.empty(n)
    ranks[order] = np.arange(n, 0, -1)
    return ranks


def _fusion_ranks(fusion: np.ndarray) -> np.ndarray:
    """Fusion priorities ``±(N..1)``: the fusion pass's order of ``fusion`` (higher first;
    ties to the later node), negative where the node never fuses. Turning a node off
    and on again (negating) puts it back in its place."""
    n = len(fusion)
    order = np.lexsort((-np.arange(n), -np.asarray(fusion, dtype=np.float64)))
    ranks = np.empty(n)
    ranks[order] = np.arange(n, 0, -1)
    return np.where(fusion > 0, ranks, -ranks)


class SearchSpace:
    """The decisions of one search (a problem, a task and an initial plan) and their price.

    Parameters
    ----------
    problem : Problem
    task : frozenset of str
        Subset of {"placement", "scheduling", "fusion"}.
    init : Plan, optional
        Where the search starts, and the source of the parts outside ``task``. Default:
        the compiler defaults. A searched placement that ``init`` leaves out starts as
        the fastest of all on one device, units dealt round robin, and contiguous blocks
        of equal work.

    Attributes
    ----------
    unit_of : int64 (N,)
        Unit of every node. Units are numbered by their first node.
    first_node : int64 (U,)
        First node of every unit.
    num_units : int
    kinds : int64 array
        Kinds of single moves available (PLACE, SWAP, FUSE, REORDER): a part is searched
        only where a choice exists (placement with two devices or more, fusion with a
        fusible node, the fusion pass's order with two). Empty: nothing to search.
    kind_odds : float64 array or None
        Odds of each kind in :meth:`random_moves`: the searched parts equally likely,
        fusion's two kinds sharing its turn; None where that is uniform.
    fusible : int64 array
        Nodes whose fusion priority matters (``Problem.fusion_choice``): fused into their
        consumer, duplicated into their consumers, or their consumers merged as siblings.
    upper_bound : float
        No valid plan takes longer: every kernel and every transfer one after another
        (:func:`~graphopt.evaluate.objective.runtime_bound`).
    given_plan, start_plan : Plan
        The plan the space was made with (``init``, or an empty plan), and the one the
        last :meth:`start` began from (its placement chosen when none was given).
    initial_step_time, initial_valid : float or None, bool
        Step time and validity of the initial plan, once :meth:`start` has run.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(layers=2), load_cluster("dgx1-v100:2"))
    >>> space = SearchSpace(prob, frozenset({"placement"}))
    >>> space.num_units < prob.num_nodes   # each layer's weight, gradient, update: one unit
    True
    """

    def __init__(self, problem: Problem, task: frozenset[str], init: Plan | None = None):
        self.problem, self.task, self.init = problem, frozenset(task), init
        n, d = problem.num_nodes, problem.num_devices
        self.unit_of, self.num_units = units(problem.coloc)
        self.first_node = np.unique(self.unit_of, return_index=True)[1]
        self.fusible = np.flatnonzero(problem.fusion_choice)
        self.searches = {"placement": "placement" in task and d > 1,
                         "scheduling": "scheduling" in task and n > 1,
                         "fusion": "fusion" in task and len(self.fusible) > 0}
        self.kinds = np.array([k for k, name in PART_OF_KIND.items()
                               if self.searches[name] and (k != REORDER or len(self.fusible) > 1)],
                              dtype=np.int64)
        # random moves: each part equally likely, fusion's toggles and reorders sharing
        # its turn (None: uniform over the kinds, the draws as before reorders existed)
        self.kind_odds = (None if REORDER not in self.kinds else
                          np.where(np.isin(self.kinds, (FUSE, REORDER)), 0.5, 1.0)
                          / (len(self.kinds) - 1))
        base = init or Plan()
        self.fixed_placement = (np.zeros(n, np.int64) if base.placement is None
                                else np.array(base.placement, np.int64))
        self.upper_bound = runtime_bound(problem)
        self.given_plan = self.start_plan = base
        self.initial_step_time: float | None = None
        self.initial_valid = False

    # -- the chromosome view (random keys in [0, 1)) ------------------------------------
    @property
    def layout(self) -> dict[str, slice]:
        """Which genes of a random-key chromosome decode to which part of the plan:
        ``placement`` (one key per unit), ``scheduling`` and ``fusion`` (one per node),
        in this order, for the parts the task searches."""
        sizes = {"placement": self.num_units, "scheduling": self.problem.num_nodes,
                 "fusion": self.problem.num_nodes}
        out: dict[str, slice] = {}
        at = 0
        for name in ("placement", "scheduling", "fusion"):
            if name in self.task:
                out[name] = slice(at, at + sizes[name])
                at += sizes[name]
        return out

    @property
    def crossover_groups(self) -> np.ndarray | None:
        """Group of every gene (int64 (G,), groups numbered from 0) where BRKGA's crossover
        must pass genes on together, one coin per group; None: every gene on its own (this
        chromosome: a gene decodes alone)."""
        return None

    @property
    def num_genes(self) -> int:
        return sum(s.stop - s.start for s in self.layout.values())

    def decode(self, keys: np.ndarray) -> Decisions:
        """Random keys (B, G) → decisions. A unit's device is ``floor(key · D)``; a node's
        priority is its key; its fusion priority ``key − 0.5`` (keys ≤ 0.5 never fuse)."""
        lay, d = self.layout, self.problem.num_devices
        units: np.ndarray | None = None
        prio: np.ndarray | None = None
        fus: np.ndarray | None = None
        if "placement" in lay:
            units = np.minimum((keys[:, lay["placement"]] * d).astype(np.int64), d - 1)
        if "scheduling" in lay:
            prio = keys[:, lay["scheduling"]].copy()
        if "fusion" in lay:
            fus = keys[:, lay["fusion"]] - 0.5
        return Decisions(units, prio, fus)

    def encode(self, dec: Decisions) -> np.ndarray:
        """Decisions → random keys that :meth:`decode` maps back to the same plans."""
        n, d = self.problem.num_nodes, self.problem.num_devices
        keys = np.empty((len(dec), self.num_genes))
        lay = self.layout
        if dec.units is not None:
            keys[:, lay["placement"]] = (dec.units + 0.5) / d
        if dec.priority is not None:
            keys[:, lay["scheduling"]] = np.array([priority_ranks(p) for p in dec.priority]) / (n + 1)
        if dec.fusion is not None:
            f = np.array([_fusion_ranks(x) for x in dec.fusion])
            keys[:, lay["fusion"]] = 0.5 + 0.5 * f / (n + 1)
        return keys

    # -- single moves --------------------------------------------------------------------
    def placements(self, dec: Decisions) -> np.ndarray:
        """Device of every node for every row (B, N)."""
        if dec.units is None:
            return np.broadcast_to(self.fixed_placement, (len(dec), self.problem.num_nodes))
        return dec.units[:, self.unit_of]

    def moves(self, dec: Decisions) -> np.ndarray:
        """Every single move from row 0 of ``dec``, as rows ``[kind, a, b]``: move unit a to
        device b; swap the priorities of nodes a and b, adjacent in the priority order of
        one device; toggle node a's fusion; swap the fusion priorities of nodes a and b,
        adjacent in the fusion pass's order (where fusions compete, the earlier wins)."""
        out = []
        if self.searches["placement"]:
            assert dec.units is not None
            d = self.problem.num_devices
            u, to = np.divmod(np.arange(self.num_units * (d - 1)), d - 1)
            to = (dec.units[0, u] + 1 + to) % d
            out.append(np.stack([np.full(len(u), PLACE), u, to], axis=1))
        if self.searches["scheduling"]:
            assert dec.priority is not None
            place, p = self.placements(dec)[0], dec.priority[0]
            order = np.lexsort((-p, place))  # by device, then by decreasing priority
            same = place[order[:-1]] == place[order[1:]]
            a, b = order[:-1][same], order[1:][same]
            out.append(np.stack([np.full(len(a), SWAP), a, b], axis=1))
        if self.searches["fusion"]:
            f = self.fusible
            out.append(np.stack([np.full(len(f), FUSE), f, np.zeros_like(f)], axis=1))
            if REORDER in self.kinds:
                assert dec.fusion is not None
                on = self._fusion_order(dec.fusion[0])
                out.append(np.stack([np.full(len(on) - 1, REORDER), on[:-1], on[1:]], axis=1))
        return np.concatenate(out) if out else np.zeros((0, 3), np.int64)

    def _fusion_order(self, fusion: np.ndarray) -> np.ndarray:
        """The fusible nodes that fuse, in the fusion pass's order (first first)."""
        f = self.fusible[fusion[self.fusible] > 0]
        return f[np.argsort(-fusion[f], kind="stable")]

    def random_moves(self, dec: Decisions, rng: np.random.Generator,
                     odds: np.ndarray | None = None) -> np.ndarray:
        """One random single move per row, its kind drawn with ``odds`` (one per entry of
        :attr:`kinds`; default :attr:`kind_odds`: the searched parts equally likely,
        fusion's toggle or reorder then at even odds). A priority swap exchanges a
        random node with its neighbour, above or below at random, in its device's
        priority order; a reorder likewise in the fusion pass's order."""
        b, n, d = len(dec), self.problem.num_nodes, self.problem.num_devices
        kind = rng.choice(self.kinds, size=b, p=self.kind_odds if odds is None else odds)
        unit, shift = rng.integers(self.num_units, size=b), rng.integers(1, max(d, 2), size=b)
        node, up = rng.integers(n, size=b), rng.random(b) < 0.5
        toggle = rng.choice(self.fusible, size=b) if len(self.fusible) else node
        moves = np.stack([kind, toggle, np.zeros(b, np.int64)], axis=1)  # [FUSE, node, 0]
        if self.searches["placement"]:
            assert dec.units is not None
            r = np.flatnonzero(kind == PLACE)
            moves[r, 1], moves[r, 2] = unit[r], (dec.units[r, unit[r]] + shift[r]) % d
        if self.searches["scheduling"]:
            assert dec.priority is not None
            places = self.placements(dec)
            for row in np.flatnonzero(kind == SWAP):
                i, p = node[row], dec.priority[row]
                same = places[row] == places[row, i]
                above, below = same & (p > p[i]), same & (p < p[i])
                j = i  # alone on its device: a move that changes nothing
                if above.any() and (up[row] or not below.any()):
                    j = np.flatnonzero(above)[np.argmin(p[above])]
                elif below.any():
                    j = np.flatnonzero(below)[np.argmax(p[below])]
                moves[row, 1:] = i, j
        for row in np.flatnonzero(kind == REORDER):
            assert dec.fusion is not None
            on = self._fusion_order(dec.fusion[row])
            if len(on) < 2:
                moves[row] = FUSE, toggle[row], 0  # nothing fuses yet: nothing to reorder
                continue
            k = rng.integers(len(on) - 1)
            moves[row, 1:] = on[k], on[k + 1]
        return moves

    def apply(self, dec: Decisions, moves: np.ndarray) -> Decisions:
        """A copy of ``dec`` with ``moves[r]`` applied to row r (same length)."""
        out = dec.take(np.arange(len(dec)))
        kind, a, b = moves.T
        if out.units is not None:
            r = np.flatnonzero(kind == PLACE)
            out.units[r, a[r]] = b[r]
        if out.priority is not None:
            r = np.flatnonzero(kind == SWAP)
            p = out.priority
            p[r, a[r]], p[r, b[r]] = p[r, b[r]], p[r, a[r]]
        if out.fusion is not None:
            r = np.flatnonzero(kind == FUSE)
            out.fusion[r, a[r]] = -out.fusion[r, a[r]]
            r = np.flatnonzero(kind == REORDER)
            f = out.fusion
            f[r, a[r]], f[r, b[r]] = f[r, b[r]], f[r, a[r]]
        return out

    # -- evaluation ------------------------------------------------------------------------
    def _price(self, ev: LocalEvaluator, placements: np.ndarray, priority: np.ndarray | None = None,
               fusion: np.ndarray | None = None):
        """Simulate rows through ``ev``, parts not given taken from the start plan."""
        b, n = len(placements), self.problem.num_nodes

        def part(searched, fixed):
            if searched is not None:
                return searched
            return None if fixed is None else np.broadcast_to(fixed, (b, n))

        res = ev.evaluate(placements, part(priority, self.start_plan.priority),
                          part(fusion, self.start_plan.fusion))
        return res, ev.score(res)

    def evaluate(self, ev: LocalEvaluator, dec: Decisions) -> np.ndarray:
        """Simulate the rows through ``ev`` and score them (lower is better): ``ev``'s
        objective where valid, above every valid plan where not
        (:meth:`~graphopt.evaluate.local.LocalEvaluator.score`). The result is shorter than
        ``dec`` when the budget ran out.
        """
        return self._price(ev, self.placements(dec), dec.priority, dec.fusion)[1]

    def _candidates(self) -> np.ndarray:
        """Default start placements (3, N): one device, units round robin, contiguous
        blocks of equal mean compute time (units in order of their first node)."""
        n, d, u = self.problem.num_nodes, self.problem.num_devices, self.num_units
        work = np.bincount(self.unit_of, self.problem.costs.time.mean(axis=1), minlength=u)
        before = np.cumsum(work) - work
        blocks = np.minimum((d * before / max(work.sum(), 1e-30)).astype(np.int64), d - 1)
        return np.stack([np.zeros(n, np.int64), (np.arange(u) % d)[self.unit_of],
                         blocks[self.unit_of]])

    def start(self, ev: LocalEvaluator) -> tuple[Decisions, float]:
        """Evaluate the initial plan; return the search's first candidate and its score.

        The initial plan is ``init`` as given; when placement is searched and ``init``
        has none, its placement is the fastest of :meth:`_candidates` (all evaluated). The
        first candidate is that plan with colocation groups made whole (each on its first
        node's device) and, when scheduling is searched but the plan has no priorities,
        the upward rank under its placement (:func:`critical_path`) as priorities; it is
        evaluated too when it differs from the
        initial plan.
        """
        # from the plan as given, every call: a space searched again (a caller pricing
        # several distributions on one graph) starts where the first search did
        n, p = self.problem.num_nodes, self.given_plan
        choose = self.searches["placement"] and p.placement is None
        cands = self._candidates() if choose else self.fixed_placement[None]
        res, scores = self._price(ev, cands)
        i = int(np.argmin(scores))
        self.start_plan = p = p.replace(placement=cands[i]) if choose else p
        self.initial_step_time, self.initial_valid = float(res.step_time[i]), bool(res.valid[i])
        score = float(scores[i])
        place = cands[i]
        units = place[self.first_node]
        dec, changed = Decisions(), False
        if "placement" in self.task:
            dec.units = units[None].copy()
            changed = not np.array_equal(units[self.unit_of], place)
            place = units[self.unit_of]
        if "scheduling" in self.task:
            changed |= p.priority is None
            dec.priority = priority_ranks(critical_path(self.problem, place) if p.priority is None
                                          else p.priority)[None]
        if "fusion" in self.task:
            dec.fusion = _fusion_ranks(np.arange(1.0, n + 1) if p.fusion is None
                                       else p.fusion)[None]
        if changed:
            score = float(self.evaluate(ev, dec)[0])
        return dec, score

    def plan(self, dec: Decisions, row: int = 0) -> Plan:
        """Row ``row`` of ``dec`` as a full plan (parts outside the task from the start)."""
        return compose(self.task, self.start_plan, Plan(
            placement=None if dec.units is None else self.placements(dec.take([row]))[0],
            priority=None if dec.priority is None else dec.priority[row],
            fusion=None if dec.fusion is None else dec.fusion[row]))

    def result(self, ev: LocalEvaluator, interrupted: bool, **extra) -> tuple[Plan, dict]:
        """The evaluator's best plan (the start plan when nothing valid was seen) and the
        stats every search reports: ``evals``, ``seconds``, ``step_time``,
        ``initial_step_time``, ``valid``, ``interrupted``, ``objective`` and ``value`` (the
        best plan's objective; its step time with ``runtime``), ``history`` (rows of evals,
        seconds, best value so far; None before the first valid plan), plus ``extra``."""
        plan = compose(self.task, self.start_plan, ev.best_plan or Plan())

        def finite(x):
            return float(x) if np.isfinite(x) else None

        stats = {"evals": ev.evals, "seconds": ev.elapsed, "step_time": finite(ev.best_time),
                 "initial_step_time": self.initial_step_time, "initial_valid": self.initial_valid,
                 "valid": ev.best_plan is not None, "objective": ev.objective,
                 "value": finite(ev.best_value),
                 "interrupted": interrupted or stop_requested(),
                 "history": [[e, s, finite(t)] for e, s, t in ev.history], **extra}
        return plan, stats
