"""What fine-tuning GO costs against simulated annealing at the same evaluation budget.

On each row, in one process and alternating in rounds so that the load of a shared
machine falls on both alike: ``sa`` and ``go-finetune`` (the shipped policy; ``tune``
``heads``, the default, and ``all``, the whole network as before) at the same budget of
evaluations, one torch thread. Per method the median wall seconds over rounds and the
step time reached (seeded: the same in every round); the figure is the median over
rounds of the per-round ratio of go-finetune's seconds to sa's (target: <= 10).

Usage:  .venv/bin/python bench/go_finetune_cost.py [--rows rnnlm-2] [--budget 2000] [--rounds 3]
Writes runs/bench/go_finetune_cost.json (--out) and, with --docs FILE, FILE's go-finetune-cost section.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path
from graphopt.benchmarks import parse_bench_args

#: The variants timed: (label, method, hyperparameters).
VARIANTS = (("sa", "sa", {}), ("go-finetune", "go-finetune", {"progress": False}),
            ("go-finetune tune=all", "go-finetune", {"progress": False, "tune": "all"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="rnnlm-2", help="GO Table 2 rows, comma-separated")
    ap.add_argument("--budget", type=int, default=2000, help="evaluations per method")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (alternating methods)")
    ap.add_argument("--variants", default=",".join(v[0] for v in VARIANTS),
                    help="which of the variants to time, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/go_finetune_cost.json"))
    ap.add_argument("--docs", type=Path, default=None,
                    help="Markdown file whose section is rewritten (default: none)")
    a = parse_bench_args(ap)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from graphopt.benchmarks import replace_section, save_json
    from graphopt.benchmarks.go_table2 import row_entry
    from graphopt.hardware import load_cluster
    from graphopt.optim import Budget, optimize
    from graphopt.sim import Problem
    from graphopt.zoo import build

    torch.set_num_threads(1)
    chosen = [v for v in VARIANTS if v[0] in a.variants.split(",")]
    rows = []
    for name in a.rows.split(","):
        entry = row_entry(name)
        prob = Problem(build(entry), load_cluster(f"p100:{entry.num_devices}"))
        optimize(prob, "sa", "placement", Budget(50), 0)  # compile and warm up once
        seconds: dict[str, list[float]] = {v[0]: [] for v in chosen}
        steps: dict[str, float] = {}
        for _ in range(a.rounds):
            for label, method, params in chosen:
                t0 = time.perf_counter()
                _, st = optimize(prob, method, "placement", Budget(a.budget), 0, **params)
                seconds[label].append(time.perf_counter() - t0)
                steps[label] = st["step_time"]
        ratios = {label: statistics.median(s / b for s, b in zip(seconds[label], seconds["sa"]))
                  for label in seconds if label != "sa"}
        rows.append({"model": name, "ops": prob.num_nodes, "devices": prob.num_devices,
                     "seconds": seconds, "step_time": steps, "ratio_to_sa": ratios})
        print(name, {k: round(statistics.median(v), 2) for k, v in seconds.items()},
              {k: round(v, 2) for k, v in ratios.items()})
    res = {"benchmark": "go_finetune_cost", "budget": a.budget, "rounds": a.rounds,
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "python": platform.python_version(), "torch_threads": 1}, "rows": rows}
    save_json(res, a.out)
    labels = [v[0] for v in chosen]
    lines = ["## go-finetune's cost against sa", "",
             f"`.venv/bin/python bench/go_finetune_cost.py --rows {a.rows} --budget {a.budget} "
             f"--rounds {a.rounds}` — {a.budget} evaluations each, median wall seconds of "
             f"{a.rounds} alternating rounds (one torch thread, a 2-core machine shared with "
             "other jobs), step time in ms, and the median per-round ratio to sa's seconds "
             "(target <= 10x).", "",
             "| model | ops | " + " | ".join(f"{x} s" for x in labels) + " | "
             + " | ".join(f"{x} ms" for x in labels) + " | "
             + " | ".join(f"{x} / sa" for x in labels[1:]) + " |",
             "|" + "---|" * (2 + 2 * len(labels) + len(labels) - 1)]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ops']:,} | "
                     + " | ".join(f"{statistics.median(r['seconds'][x]):.1f}" for x in labels)
                     + " | " + " | ".join(f"{r['step_time'][x] * 1e3:.1f}" for x in labels)
                     + " | " + " | ".join(f"{r['ratio_to_sa'][x]:.1f}x" for x in labels[1:])
                     + " |")
    if a.docs:
        replace_section(a.docs, "go-finetune-cost", "\n".join(lines))


if __name__ == "__main__":
    main()
