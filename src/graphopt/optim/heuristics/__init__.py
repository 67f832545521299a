"""Classic heuristics: the baselines every search and learned method must beat.

Placement (each decides ``placement``; m-ETF, m-SCT and HEFT also give their
schedule's order as ``priority`` when the task includes scheduling):

=============  ======================================================  ============
name           what it does                                            memory-aware
=============  ======================================================  ============
single         everything on the fastest device that fits              yes
expert         layer-wise / encoder-decoder / pipeline by module path  no
round-robin    colocation units dealt to devices in turn               no
random         colocation units on uniformly random devices (seeded)   no
metis          METIS k-way partition, then memory repaired             yes
m-topo         Baechi: fill devices in topological order               yes
m-etf          Baechi: earliest task first under memory limits         yes
m-sct          Baechi: ETF with LP favourite children                  yes
heft           upward-rank list scheduling, earliest finish time       yes
=============  ======================================================  ============

Scheduling only (they keep ``init``'s placement and fusion): ``critical-path`` and
``xla-memory``; the priority functions themselves are in
:mod:`~graphopt.optim.heuristics.schedulers`.

Every method keeps colocation groups on one device and is deterministic given the seed.
The memory-aware ones check their plan with the simulator and recalibrate their own
memory estimate until it fits (:func:`~graphopt.optim.heuristics._common.fit_memory`),
then, if need be, move the smallest units off full devices
(:func:`~graphopt.optim.heuristics._common.repair_memory`); ``stats["evals"]`` counts
those simulations.
"""

from graphopt.optim.heuristics import baechi, expert, heft, metis, schedulers, simple

__all__ = ["baechi", "expert", "heft", "metis", "schedulers", "simple"]
