"""What makes GO's fusion policy beat XLA's default fusion: an ablation on GO's Table 3.

On each row, with the ``expert`` placement and first-ready-first-run order fixed (as in
``graphopt bench fusion``), the speed-up over XLA's default fusion of three searches
(``sa`` and ``local-search``: each move toggles one op's fusion or swaps two fusing ops
adjacent in the fusion pass's order; ``brkga``: its keys are fusion priorities, so it
can set the whole order) and of ``go-one`` on the fusion task in these variants, same
budget of evaluations, for each seed:

- ``groups``: a fusion priority per colocation group (GO's nodes for placement);
- ``ops, no prior``: per op, the fusion head's prior left out (``fusion_flips`` above
  the number of nodes: every level equally likely at first);
- ``ops``: per op with the prior centred on the default (what ``bench fusion`` runs);
- ``ops, 2 levels``: per op, the head choosing only fuse or not (the default's order
  kept: what the searches' toggles alone can reach).

Step times are simulated, so the figures do not depend on the machine's load.

Usage:  .venv/bin/python bench/go_fusion_ablation.py [--rows rnnlm-4,transformer-xl-2,gnmt-2]
        [--budget 500] [--seeds 0,1,2]
Writes bench/results/go_fusion_ablation.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path
from graphopt.cli._common import parse_bench_args

#: The searches compared, each from XLA's default.
SEARCHES = ("sa", "local-search", "brkga")
#: GO's variants: (label, go-one hyperparameters, fusion levels of the head).
VARIANTS = (("groups", {"units": "groups"}, 4),
            ("ops, no prior", {"units": "ops", "fusion_flips": 1e12}, 4),
            ("ops", {"units": "ops"}, 4),
            ("ops, 2 levels", {"units": "ops"}, 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="rnnlm-4,transformer-xl-2,gnmt-2",
                    help="GO Table 3 rows, comma-separated")
    ap.add_argument("--budget", type=int, default=500, help="evaluations per method")
    ap.add_argument("--seeds", default="0,1,2", help="seeds, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("bench/results/go_fusion_ablation.json"))
    a = parse_bench_args(ap)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from graphopt.benchmarks import geomean, save_json
    from graphopt.benchmarks.fusion import _problem
    from graphopt.optim.base import Budget, optimize
    from graphopt.optim.learned.go.method import GOOne, new_policy
    from graphopt.sim import Plan, simulate

    @dataclass
    class Levels(GOOne):
        """go-one whose fusion head has ``levels`` choices."""

        levels: int = 4

        def _policy(self, seed: int):
            return new_policy(seed, dim=self.dim, fusion_levels=self.levels)

    seeds = [int(s) for s in a.seeds.split(",")]
    labels = [*SEARCHES, *(f"go-one {v[0]}" for v in VARIANTS)]
    result = {"settings": {"rows": a.rows.split(","), "budget": a.budget, "seeds": seeds},
              "rows": []}
    for name in a.rows.split(","):
        prob = _problem(name, "p100", True)
        expert, _ = optimize(prob, "expert", "placement", Budget(a.budget), 0)
        base = Plan(placement=expert.placement)
        default = simulate(prob, base).step_time
        row = {"model": name, "default": default, "speedup": {k: [] for k in labels}}
        for seed in seeds:
            for m in SEARCHES:
                plan, _ = optimize(prob, m, "fusion", Budget(a.budget), seed, init=base)
                row["speedup"][m].append(default / simulate(prob, plan).step_time)
            for label, params, levels in VARIANTS:
                plan, _ = Levels(progress=False, levels=levels, **params).optimize(
                    prob, frozenset({"fusion"}), Budget(a.budget), seed, init=base)
                row["speedup"][f"go-one {label}"].append(default / simulate(prob, plan).step_time)
        result["rows"].append(row)
        save_json(result, a.out)
        print(json.dumps({name: {k: [round(x, 4) for x in v]
                                 for k, v in row["speedup"].items()}}), flush=True)
    print(f"\nSpeed-up over XLA's default fusion, {a.budget} evaluations, seeds {a.seeds} "
          "(one figure per seed):\n")
    print("| model | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for row in result["rows"]:
        print(f"| {row['model']} | " + " | ".join(
            ", ".join(f"{x:.3f}" for x in row["speedup"][k]) for k in labels) + " |")
    print("| **geomean** | " + " | ".join(
        f"{geomean([x for r in result['rows'] for x in r['speedup'][k]]):.3f}x"
        for k in labels) + " |")


if __name__ == "__main__":
    main()
