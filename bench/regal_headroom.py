"""How much peak memory there is to win on REGAL's test graphs: long searches against
BRKGA-5K.

REGAL's target is a mean peak 5% below BRKGA-5K's on the held-out graphs, at BRKGA-5K's
budget. This script measures what searches with ``--long`` evaluations (10x that budget
by default) reach on the same graphs: the registry's uniform BRKGA and BRKGA on REGAL's
chromosome with the layer-split prior
(:func:`graphopt.optim.learned.regal.method.layer_split_prior`), ``--long-seeds`` seeds each, and
the best of all of them. It prices nothing REGAL is trained or tuned with: the figures
bound what a method at 5,000 evaluations can be expected to reach, they choose nothing.
Peak memory, ``p100:2``, placement and scheduling; BRKGA-5K is the median of
``--seeds`` seeds, as in ``graphopt bench regal``.

Usage:  nice -n 19 .venv/bin/python bench/regal_headroom.py [--long 50000] [--long-seeds 2]
            [--seeds 3] [--out bench/results/regal_headroom.json]
Prints a markdown table (% below BRKGA-5K, positive: lower peak) and writes it as JSON.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from graphopt.benchmarks import save_json
from graphopt.cli._common import parse_bench_args

TASK = frozenset({"placement", "scheduling"})
BASE_EVALS = 5000


def _brkga(problem, evals: int, seed: int) -> float:
    from graphopt.optim.base import Budget, optimize

    return optimize(problem, "brkga", TASK, Budget(evals, objective="memory"), seed)[1]["value"]


def run(long: int, long_seeds: int, seeds: int) -> dict:
    # imported here so that a bad --out fails at once, before torch loads
    from graphopt.optim.learned.regal.method import (TEST_GRAPHS, RegalSpace, layer_split_prior,
                                              load_corpus, regal_value)

    rows = []
    for spec, problem in zip(TEST_GRAPHS, load_corpus(TEST_GRAPHS)):
        t0 = time.perf_counter()
        base = float(np.median([_brkga(problem, BASE_EVALS, s) for s in range(seeds)]))
        prior = layer_split_prior(RegalSpace(problem, TASK))
        uniform = min(_brkga(problem, long, s) for s in range(long_seeds))
        layered = min(regal_value(problem, prior, s, long) for s in range(long_seeds))
        pct = {k: 100 * (base - v) / base for k, v in
               (("uniform", uniform), ("layer_split", layered), ("best", min(uniform, layered)))}
        rows.append({"graph": spec, "brkga_5k_mib": base / 2**20, "percent_below": pct,
                     "seconds": time.perf_counter() - t0})
        print(f"{spec:28s} BRKGA-5K {base / 2**20:.4f} MiB  " +
              "  ".join(f"{k} {v:+.2f}%" for k, v in pct.items()), flush=True)
    mean = {k: float(np.mean([r["percent_below"][k] for r in rows])) for k in rows[0]["percent_below"]}
    return {"long_evals": long, "long_seeds": long_seeds, "seeds": seeds, "rows": rows,
            "mean": mean, "machine": platform.machine(), "date": time.strftime("%Y-%m-%d")}


def to_markdown(result: dict) -> str:
    k = result["long_evals"] // 1000
    lines = [f"| test graph | BRKGA-5K (MiB) | uniform BRKGA-{k}K | layer-split BRKGA-{k}K | best |",
             "|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        p = r["percent_below"]
        lines.append(f"| {r['graph']} | {r['brkga_5k_mib']:.4g} | {p['uniform']:+.2f} | "
                     f"{p['layer_split']:+.2f} | {p['best']:+.2f} |")
    m = result["mean"]
    lines.append(f"| **mean** | | **{m['uniform']:+.2f}** | **{m['layer_split']:+.2f}** | "
                 f"**{m['best']:+.2f}** |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", type=int, default=50_000, help="evaluations of each long search")
    ap.add_argument("--long-seeds", type=int, default=2, help="seeds of each long search (the best counts)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds of BRKGA-5K (the median counts)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/regal_headroom.json"))
    a = parse_bench_args(ap)
    if a.long < BASE_EVALS or a.long_seeds < 1 or a.seeds < 1:
        ap.error(f"--long must be at least {BASE_EVALS}, --long-seeds and --seeds at least 1")
    result = run(a.long, a.long_seeds, a.seeds)
    save_json(result, a.out)
    print(to_markdown(result))


if __name__ == "__main__":
    main()
