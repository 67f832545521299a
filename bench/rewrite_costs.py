"""Which cost model makes saturation pick faster programs on this CPU: the roofline of
the ``cpu:1`` preset, or ops measured here (``RewriteConfig.cost``)?

For each model, saturation + ILP runs once with each cost model; the original and the
two rewritten programs are then timed side by side as ``graphopt bench rewrite`` times
them (one pinned thread, rotating order, speed-up = median over rounds of the original's
time over the program's in the same round), so the two cost models' programs are compared
under the same load.

Usage:  .venv/bin/python bench/rewrite_costs.py [--models bert,squeezenet] [--repeats 40]
Writes runs/bench/rewrite_costs.json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
from pathlib import Path

import torch

from graphopt.benchmarks import save_json
from graphopt.benchmarks.rewrite import paired_speedup, time_programs
from graphopt.rewrite import RewriteConfig, rewrite
from graphopt.rewrite.models import MODELS, make_model

COSTS = ("roofline", "measured")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.models.split(","):
        model, inputs = make_model(name, "bench")
        programs, search, ops = {}, {}, {}
        for cost in COSTS:
            res = rewrite(model, inputs, RewriteConfig(cost=cost))
            programs["original"], programs[cost] = res.original, res.module
            search[cost] = res.stats["search_s"]
            ops[cost] = res.stats["ops_after"]
        times = time_programs(programs, inputs, args.repeats, 3)
        row = {"model": name, "speedup": paired_speedup(times), "search_s": search, "ops": ops,
               "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}}
        rows.append(row)
        print(f"{name:>12}  " + "  ".join(f"{c} {row['speedup'][c]:.3f}x ({ops[c]} ops, "
                                          f"search {search[c]:.1f} s)" for c in COSTS),
              flush=True)
    save_json({"machine": {"cpu": platform.processor() or platform.machine(),
                           "torch": torch.__version__, "threads": 1},
               "repeats": args.repeats, "rows": rows},
              Path("runs/bench/rewrite_costs.json"))


if __name__ == "__main__":
    main()
