"""METIS k-way graph partitioning as a placement, the baseline of HDP and GO.

Karypis and Kumar, "A fast and high quality multilevel scheme for partitioning
irregular graphs", SIAM J. Sci. Comput. 20(1), 1998; called through ``pymetis``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from graphopt.evaluate.local import LocalEvaluator
from graphopt.errors import MissingDependencyError
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.heuristics._common import repair_memory, result_stats, units
from graphopt.sim import Plan, Problem

__all__ = ["Metis", "metis_parts"]

#: Largest integer weight handed to METIS (weights are scaled into 1..this).
_SCALE = 10_000


def _ints(x: np.ndarray) -> np.ndarray:
    """Non-negative weights scaled to integers in ``1.._SCALE`` (METIS wants positive ints)."""
    top = x.max(initial=0.0)
    if top <= 0:
        return np.ones(len(x), dtype=np.int64)
    return np.maximum(1, np.round(x / top * _SCALE)).astype(np.int64)


def _cap_to_share(w: np.ndarray, parts: int) -> np.ndarray:
    """Vertex weights capped at a part's fair share of the capped total, the largest ``c``
    with ``parts · c <= sum(min(w, c))``.

    A vertex heavier than a part's share fills a part alone whatever its weight, but
    METIS's recursive bisection cannot balance around it: it prints "Cannot bisect a
    graph with 0 vertices" and puts every vertex in one part (a one-layer BLOOM on 8
    devices, its embedding ~99% of the compute). Capped, the rest spread over the other
    parts.

    >>> _cap_to_share(np.array([1000.0, 1, 1, 1]), 2).tolist()
    [3.0, 1.0, 1.0, 1.0]
    """
    ws = np.sort(w)[::-1]
    rest = np.cumsum(ws[::-1])[::-1]  # rest[j]: the weight of all but the j heaviest
    for j in range(min(parts, len(ws))):  # cap the j heaviest at the share of the rest
        c = rest[j] / (parts - j)
        if ws[j] <= c:
            break
    return np.minimum(w, c)


def metis_parts(problem: Problem, parts: int, seed: int = 0) -> np.ndarray:
    """Part of every op, ``0..parts-1``: a METIS k-way partition of the colocation units
    (vertex weights the compute time on device 0, edge weights the bytes between two
    units, both directions summed, each scaled to integers), balanced in compute with
    the fewest bytes cut; seeded. With no more units than parts (METIS refuses), each
    unit is its own part. Needs the ``pymetis`` package.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(20, 8), load_cluster("dgx1-v100:4"))
    >>> sorted(set(metis_parts(prob, 4).tolist()))
    [0, 1, 2, 3]
    """
    try:
        import pymetis
    except ModuleNotFoundError as err:
        raise MissingDependencyError("method 'metis' needs the pymetis package: pip install pymetis") from err
    g = problem.graph
    unit, k = units(g.coloc)
    if k <= parts:  # nothing to partition (METIS refuses): one unit per part
        return np.arange(k, dtype=np.int64)[unit]
    vw = _ints(_cap_to_share(np.bincount(unit, weights=problem.costs.time[:, 0], minlength=k),
                             parts))
    adj = sparse.coo_matrix((g.edge_bytes, (unit[g.src], unit[g.dst])), shape=(k, k))
    adj = (adj + adj.T).tolil()  # undirected, as METIS wants
    adj.setdiag(0)  # edges inside a unit cut nothing
    adj = adj.tocsr()
    adj.eliminate_zeros()
    adj.sort_indices()
    _, part = pymetis.part_graph(parts, pymetis.CSRAdjacency(adj.indptr, adj.indices),
                                 vweights=vw, eweights=_ints(adj.data) if adj.nnz else None,
                                 options=pymetis.Options(seed=int(seed) % 2**31))
    return np.asarray(part, dtype=np.int64)[unit]


@register("metis")
@dataclass
class Metis:
    """METIS k-way partition: balanced compute, fewest bytes cut; then memory repaired.

    Colocation groups are merged into one vertex first. Vertex weights are the compute
    time on device 0, edge weights the bytes between two vertices (both directions
    summed), each scaled to integers; ``pymetis.part_graph`` splits the vertices into D
    parts of balanced weight with the least cut weight (seeded; with no more vertices
    than devices, each gets its own device). METIS sees neither time order nor memory,
    so the plan is then simulated: while a device is over capacity, its smallest units
    (by footprint: persistent + output + scratch bytes) move to the device with the
    most free memory until the estimated excess is gone, and the plan is simulated
    again (:func:`~graphopt.optim.heuristics._common.repair_memory`, at most
    ``max_repairs`` simulations, fewer when the budget runs out first).

    Complexity: METIS is O(N + E) in practice; each repair one simulation.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(20, 8), load_cluster("dgx1-v100:4"))
    >>> plan, stats = Metis().optimize(prob, frozenset({"placement"}), Budget(), seed=0)
    >>> stats["valid"], len(set(plan.placement.tolist()))
    (True, 4)
    """

    max_repairs: int = field(default=50, metadata={"min": 0,
        "help": "Simulations spent moving units off devices over capacity."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        part = metis_parts(problem, problem.num_devices, seed)
        ev = LocalEvaluator.from_budget(problem, budget)
        k = units(problem.graph.coloc)[1]
        plan = compose(task | {"placement"}, init, Plan(placement=part))
        plan, res = repair_memory(ev, plan, self.max_repairs)
        moved = plan.meta.get("moved_units", 0)
        return plan.replace(meta={}), {**result_stats(res, ev), "moved_units": moved, "units": k}
