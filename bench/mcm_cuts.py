"""Where the contiguous heuristics and CP-SAT cut a graph, stage by stage: each
partition's cut points (unit indices along the units' topological order) and, per chip,
its compute, its busiest outgoing link and its SRAM, priced by the pipeline cost.

Usage: python bench/mcm_cuts.py [--graph bert-base] [--preset mcm-ring16] [--time-limit 20]
"""

from __future__ import annotations

import argparse

import numpy as np

from graphopt.zoo import forward_graph
from graphopt.hardware import load_cluster
from graphopt.optim.partition.constraints import chip_memory, pipeline_units, valid_partitions
from graphopt.optim.partition.methods import cut_contiguous, greedy_contiguous
from graphopt.optim.partition.repair import solve_throughput
from graphopt.sim import Problem
from graphopt.sim.pipeline import pipeline_cost


def _us(seconds: np.ndarray) -> str:
    return " ".join(f"{v * 1e6:5.1f}" for v in seconds)


def show(name: str, problem: Problem, unit: np.ndarray, chips: np.ndarray) -> None:
    place = chips[unit][None]
    cost = pipeline_cost(problem, place)
    print(f"{name}: {cost.throughput[0]:,.0f} inputs/s, interval {cost.interval[0] * 1e6:.2f} us "
          f"(chip {cost.bottleneck[0]}), valid {bool(valid_partitions(problem, place)[0])}")
    print(f"  cuts before units {(np.flatnonzero(np.diff(chips)) + 1).tolist()}")
    print(f"  compute us  {_us(cost.compute[0])}")
    print(f"  link out us {_us(cost.link[0].max(axis=1))}")
    mib = chip_memory(problem, place)[0] / 2**20
    print("  SRAM MiB    " + " ".join(f"{v:5.0f}" for v in mib))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", default="bert-base")
    ap.add_argument("--preset", default="mcm-ring16")
    ap.add_argument("--time-limit", type=float, default=20.0)
    a = ap.parse_args()
    prob = Problem(forward_graph(a.graph), load_cluster(a.preset))
    unit = pipeline_units(prob)
    print(f"{a.graph} on {a.preset}: {prob.num_nodes} ops, {int(unit.max()) + 1} units")
    greedy = {"greedy, compute + SRAM": greedy_contiguous(prob, unit),
              "greedy, compute alone": greedy_contiguous(prob, unit, memory=False),
              "cut_contiguous": cut_contiguous(prob, unit)}
    for name, chips in greedy.items():
        show(name, prob, unit, chips)
    start = min(greedy.values(), key=lambda c: pipeline_cost(prob, c[unit]).interval[0])
    part, stats = solve_throughput(prob, unit, a.time_limit, hint=start)
    if part is not None:
        show(f"CP-SAT ({stats['status']}, {stats['solver_seconds']:.1f} s)", prob, unit, part)
        moved = int((part != greedy["cut_contiguous"]).sum())
        print(f"  units on another chip than cut_contiguous: {moved}")
