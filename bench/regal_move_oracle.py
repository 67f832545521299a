"""How far GO's move ranking could take REGAL: an oracle check (docs/regal.md).

On the held-out corpus graphs of ``bench/regal_imitate.py`` (one per family, p100:2,
placement and scheduling, peak memory), every single move of a placement unit off the
layer-split prior's devices is simulated; the Beta leanings of the ``k`` units whose
moves lower the peak most are flipped towards their better device (the true gains: an
oracle no trained policy can beat), and BRKGA runs at ``--evals`` on each seed. Printed:
% below uniform BRKGA's peak, per graph and on the mean, for the prior alone and each k.

Usage:  OMP_NUM_THREADS=1 .venv/bin/python bench/regal_move_oracle.py [--corpus runs/corpus]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from graphopt.benchmarks.regal_imitate import held_out_items
from graphopt.corpus import load_manifest
from graphopt.evaluate.local import LocalEvaluator
from graphopt.hardware import load_cluster
from graphopt.ir import load_graph
from graphopt.optim.base import Budget
from graphopt.optim.learned.regal.method import RegalSpace, layer_split_devices, layer_split_prior
from graphopt.optim.search.brkga import BRKGA
from graphopt.sim import Plan, Problem, simulate

TASK = frozenset({"placement", "scheduling"})


def peak(space: RegalSpace, params: dict | None, seed: int, evals: int) -> float:
    """BRKGA's best peak memory on REGAL's chromosome, with per-gene ``params`` (None:
    uniform)."""
    brkga = BRKGA() if params is None else BRKGA(
        inheritance=params["inheritance"], mutant_alpha=params["alpha"], mutant_beta=params["beta"])
    plan, _ = brkga.evolve(space, Budget(evals, objective="memory"), seed)
    return float(simulate(space.problem, plan).peak_memory.max())


def flipped(prior: dict, units: np.ndarray, num_units: int) -> dict:
    """``prior`` with the affinity leanings of ``units`` swapped (two devices)."""
    out = {k: v.copy() for k, v in prior.items()}
    a = out["alpha"][:num_units * 2].reshape(num_units, 2)
    b = out["beta"][:num_units * 2].reshape(num_units, 2)
    a[units], b[units] = b[units].copy(), a[units].copy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=Path("runs/corpus"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--evals", type=int, default=5000)
    a = ap.parse_args()
    manifest = load_manifest(a.corpus)
    rows = []
    print(f"load average {os.getloadavg()[0]:.2f}")
    for item in held_out_items(manifest, 1):
        record = manifest["items"][item]
        problem = Problem(load_graph(a.corpus / record["file"]), load_cluster("p100:2"))
        space = RegalSpace(problem, TASK)
        assert problem.num_devices == 2, "a move here is to the other of two devices"
        prior, devices = layer_split_prior(space), layer_split_devices(space)
        u, of = space.num_units, space.unit_of
        start = devices[of]
        moves = np.repeat(start[None], u, 0)
        for k in range(u):
            moves[k, of == k] = 1 - devices[k]
        res = LocalEvaluator(problem).evaluate(moves)
        after = np.where(res.valid, res.peak_memory.max(axis=1), np.inf)
        gain = simulate(problem, Plan(placement=start)).peak_memory.max() / after
        order = [k for k in np.argsort(-gain) if gain[k] > 1]
        seeds = range(a.seeds)
        uniform = np.mean([peak(space, None, s, a.evals) for s in seeds])
        row = {"prior": prior, **{f"oracle {k}": flipped(prior, np.array(order[:k], int), u)
                                  for k in (4, 16)}}
        row = {name: 100 * (uniform - np.mean([peak(space, p, s, a.evals) for s in seeds])) / uniform
               for name, p in row.items()}
        rows.append(row)
        print(record["family"], {k: round(v, 2) for k, v in row.items()}, flush=True)
    print("mean % below uniform BRKGA:", {k: round(float(np.mean([r[k] for r in rows])), 2)
                                          for k in rows[0]})


if __name__ == "__main__":
    main()
