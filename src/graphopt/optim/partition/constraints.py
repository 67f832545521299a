"""The constraints of multi-chip partitioning (Xie et al., MLSys 2022, §3) and a checker
that names every violation.

A partition gives every op one chip (``placement[N]``, chips ``0..D-1`` in the order of
the chain along the ring). It is valid when:

1. **one chip per op**: every entry is a chip of the module (the IR's placement already
   gives each op exactly one);
2. **acyclic dataflow**: data flows only forward along the chain, so every edge goes
   from a chip to the same or a later one (``chip[src] <= chip[dst]``); the chips then
   form a pipeline whose stages never wait on a later one. Edges out of stationary
   weights (:func:`graphopt.sim.pipeline.stationary`) do not count: a weight sits in the
   SRAM of every chip that reads it;
3. **no skipping chips**: the chips used are ``0..k`` with none empty in between, so the
   pipeline is one unbroken run of the chain;
4. **SRAM per chip**: the weights its ops read (each once per chip) and one input's
   activations they produce (every op's output buffered once: a pipeline stage holds
   its input's tensors while it works on it) fit the chip's memory.

Colocation groups of the IR must stay whole as well (the simulator's rule).

Not modelled: the paper's "chip triangle dependency" and the compiler's own
feasibility checks, which depend on its TPU compiler; and memory reuse within a
stage (the SRAM figure is the sum, an upper bound on what a compiler would need).
"""

from __future__ import annotations

import numpy as np

from graphopt.sim import Problem
from graphopt.sim.pipeline import stationary, stationary_bytes
from graphopt.ir.graph import format_bytes

__all__ = ["chip_memory", "check_partition", "memory_need", "pipeline_units", "valid_partitions"]


def memory_need(problem: Problem) -> np.ndarray:
    """SRAM bytes each op needs on its own chip: its persistent bytes plus its output,
    buffered for one input; 0 for a stationary weight, which :func:`chip_memory` counts
    on the chips of its readers instead (float64 (N,))."""
    return np.where(stationary(problem.graph), 0.0, problem.persistent + problem.out_bytes)


def chip_memory(problem: Problem, placements: np.ndarray) -> np.ndarray:
    """SRAM bytes each chip needs under each partition (float64 (B, D)): the
    :func:`memory_need` of its ops plus every weight one of its ops reads, once."""
    place = np.atleast_2d(placements)
    b, n = place.shape
    d = problem.num_devices
    rows = np.repeat(np.arange(b), n)
    mem = np.bincount(rows * d + place.ravel(), np.tile(memory_need(problem), b), b * d)
    g = problem.graph
    still = stationary(g)
    w = still[g.src] & ~still[g.dst]  # a weight and an op that computes with it
    if w.any():
        src, dst = g.src[w], g.dst[w]
        held = np.zeros((b, n, d), dtype=bool)  # weight u held on chip c
        bi = np.repeat(np.arange(b), len(src))
        held[bi, np.tile(src, b), place[:, dst].ravel()] = True
        bb, u, c = np.nonzero(held)
        mem += np.bincount(bb * d + c, stationary_bytes(g)[u], b * d)
    return mem.reshape(b, d)


def pipeline_units(problem: Problem, max_share: float = 1 / 128) -> np.ndarray:
    """Units a partition keeps whole: each op with one consumer joins its consumer's unit
    while the unit's compute stays within ``max_share`` of the graph's, and each
    stationary weight joins its first consumer's unit. Returns the unit of every op
    (int64 (N,), numbered in topological order of their roots).

    Each unit is an in-tree (every member but its root has its only consumer inside it)
    plus sources whose first consumer is inside it, so the units' graph stays acyclic
    and a valid partition of units is a valid partition of ops. On BERT-base's forward
    graph (861 ops) it leaves 151 units: the repair and the policy work on those.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(4, 3), load_cluster("mcm-ring4"))
    >>> u = pipeline_units(prob)
    >>> bool((u[prob.graph.src] <= u[prob.graph.dst]).all()), bool(u.max() < prob.num_nodes)
    (True, True)
    """
    n = problem.num_nodes
    t = problem.costs.time.max(axis=1)
    cap = max_share * t.sum()
    root = np.arange(n)
    size = t.copy()
    out_deg, still = np.diff(problem.succ_ptr), stationary(problem.graph)
    for u in range(n - 1, -1, -1):  # consumers before producers
        cons = problem.succ_idx[problem.succ_ptr[u]:problem.succ_ptr[u + 1]]
        if not len(cons):
            continue
        r = root[cons.min()]
        if (out_deg[u] == 1 and size[r] + t[u] <= cap) or still[u]:
            root[u] = r
            size[r] += t[u]
    return np.unique(root, return_inverse=True)[1].astype(np.int64)


def _contiguous(used: np.ndarray) -> np.ndarray:
    """Whether the used chips of each row are a prefix 0..k (bool (B,))."""
    # a used chip after an empty one: used[c] and not used[c-1]
    return ~(used[:, 1:] & ~used[:, :-1]).any(axis=1)


def valid_partitions(problem: Problem, placements: np.ndarray) -> np.ndarray:
    """Which rows of ``placements`` (int (B, N)) meet every constraint (bool (B,)).

    ``O(B·(N + E + D))``.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(3, 2), load_cluster("mcm-ring4"))
    >>> n = prob.num_nodes
    >>> valid_partitions(prob, np.array([np.zeros(n, int), np.arange(n)[::-1] % 4])).tolist()
    [True, False]
    """
    place = np.atleast_2d(np.asarray(placements, dtype=np.int64))
    b, d = len(place), problem.num_devices
    inside = ((place >= 0) & (place < d)).all(axis=1)
    place = np.clip(place, 0, d - 1)
    g = problem.graph
    moving = ~stationary(g)[g.src]
    forward = (place[:, g.src[moving]] <= place[:, g.dst[moving]]).all(axis=1)
    rows = np.repeat(np.arange(b), place.shape[1])
    fits = (chip_memory(problem, place) <= problem.capacity).all(axis=1)
    count = np.bincount(rows * d + place.ravel(), minlength=b * d).reshape(b, d)
    whole = np.ones(b, dtype=bool)
    grouped = np.flatnonzero(problem.coloc >= 0)
    if len(grouped):
        groups = problem.coloc[grouped]
        first = {}
        for i, grp in zip(grouped, groups):
            first.setdefault(int(grp), int(i))
        lead = np.array([first[int(grp)] for grp in groups])
        whole = (place[:, grouped] == place[:, lead]).all(axis=1)
    return inside & forward & fits & _contiguous(count > 0) & whole


def check_partition(problem: Problem, placement: np.ndarray, limit: int = 5) -> list[str]:
    """Every constraint ``placement`` breaks, as sentences naming the ops and chips at
    fault (at most ``limit`` per constraint); an empty list when it is valid.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(2, 1), load_cluster("mcm-ring4"))
    >>> check_partition(prob, np.zeros(prob.num_nodes, int))
    []
    >>> place = np.zeros(prob.num_nodes, int); place[0] = 2
    >>> print(check_partition(prob, place)[0])  # doctest: +ELLIPSIS
    acyclic dataflow: ... on chip 2 feeds ... on chip 0 (data flows only forward along the chain)
    """
    place = np.asarray(placement, dtype=np.int64)
    n, d = problem.num_nodes, problem.num_devices
    names, chips = problem.graph.names, problem.cluster.devices
    if place.shape != (n,):
        return [f"one chip per op: the partition has shape {place.shape}; expected ({n},)"]
    out = []
    bad = np.flatnonzero((place < 0) | (place >= d))
    out += [f"one chip per op: op {str(names[i])!r} on chip {place[i]}; the module has chips "
            f"0..{d - 1}" for i in bad[:limit]]
    if len(bad):
        return out
    g = problem.graph
    back = np.flatnonzero((place[g.src] > place[g.dst]) & ~stationary(g)[g.src])
    out += [f"acyclic dataflow: op {str(names[g.src[e]])!r} on chip {place[g.src[e]]} feeds op "
            f"{str(names[g.dst[e]])!r} on chip {place[g.dst[e]]} (data flows only forward along "
            "the chain)" for e in back[:limit]]
    used = np.bincount(place, minlength=d) > 0
    gaps = [c for c in range(1, d) if used[c] and not used[c - 1]]
    out += [f"no skipping chips: chip {c} is used but chip {c - 1} ({chips[c - 1].name}) is "
            "empty" for c in gaps[:limit]]
    mem = chip_memory(problem, place)[0]
    over = np.flatnonzero(mem > problem.capacity)
    out += [f"SRAM: chip {c} ({chips[c].name}) needs {format_bytes(mem[c])} for weights and "
            f"activations; it holds {format_bytes(problem.capacity[c])}" for c in over[:limit]]
    for grp in np.unique(problem.coloc[problem.coloc >= 0]):
        members = np.flatnonzero(problem.coloc == grp)
        if len(np.unique(place[members])) > 1 and len(out) < 4 * limit:
            out.append(f"colocation group {grp} ({str(names[members[0]])!r}, ...) is split over "
                       f"chips {sorted(set(place[members].tolist()))}")
    return out
