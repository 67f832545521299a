"""``graphopt bench mcm`` as a script (the same function, the same arguments), for runs
where the ``graphopt`` entry point is not at hand.

Usage: python bench/mcm.py [--graphs a,b] [--presets p,q] [--budget N] [--scratch-budget N]
"""

from __future__ import annotations

import argparse

import torch

from graphopt.benchmarks import mcm
from graphopt.cli._common import parse_bench_args

REPAIR = 0.25  # CP-SAT seconds per repair, the same for every method

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", default=",".join(mcm.GRAPHS))
    ap.add_argument("--presets", default=",".join(mcm.PRESETS))
    ap.add_argument("--methods", default=",".join(mcm.METHODS))
    ap.add_argument("--budget", type=int, default=48)
    ap.add_argument("--scratch-budget", type=int, default=0)
    ap.add_argument("--out", default="bench/results/mcm.json")
    a = parse_bench_args(ap)
    torch.set_num_threads(1)
    params = {m: {"repair_seconds": REPAIR} for m in ("mcm-random", "mcm-sa", "mcm", "mcm-finetune",
                                                       "mcm-one")}
    params["mcm-cpsat"] = {"time_limit": 20.0}
    flags = [f"-p {m}.repair_seconds={REPAIR}" for m in ("mcm-random", "mcm-sa", "mcm",
                                                          "mcm-finetune", "mcm-one")]
    command = " ".join(["graphopt bench mcm", f"--graphs {a.graphs}", f"--presets {a.presets}",
                        f"--methods {a.methods}", f"--budget {a.budget}",
                        *([f"--scratch-budget {a.scratch_budget}"] if a.scratch_budget else []),
                        f"--out {a.out}", *flags, "-p mcm-cpsat.time_limit=20"])
    res = mcm.run(tuple(a.graphs.split(",")), tuple(a.presets.split(",")),
                  tuple(a.methods.split(",")), a.budget, 0, a.out, params=params,
                  scratch_budget=a.scratch_budget, command=command)
    print(mcm.to_markdown(res))
