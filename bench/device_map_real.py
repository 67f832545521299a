"""Device maps under a --max-memory budget: graphopt's fitted map against accelerate's
infer_auto_device_map, memory measured per device and, with disk offload on the CPU,
both run under accelerate's dispatch_model and timed.

The benchmark is :mod:`graphopt.benchmarks.device_map` (its docstring says what it
measures and how); this script parses the arguments and runs it.

Example: OMP_NUM_THREADS=1 python bench/device_map_real.py --docs docs/benchmarks.md
"""

from __future__ import annotations

import argparse

from graphopt.benchmarks import parse_bench_args, plan_line, publish, say
from graphopt.benchmarks.device_map import MODELS, run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--fraction", type=float, default=0.75,
                    help="each device's budget, a fraction of the single-device map's "
                         "simulated memory")
    ap.add_argument("--rounds", type=int, default=9,
                    help="timed rounds after a warm-up, the two maps alternating in each")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--out", default="runs/bench/device_map_real.json", help="results (JSON)")
    ap.add_argument("--docs", default=None,
                    help="Markdown file whose device-map-real section is rewritten "
                         "(default: none)")
    a = parse_bench_args(ap)
    models = tuple(m for m in a.models.split(",") if m)
    say(plan_line(f"bench device_map_real: {len(models)} models, 2 budgets each", a.out, a.docs))
    res = run(models, a.fraction, a.rounds, a.threads)
    cmd = ("OMP_NUM_THREADS=1 python bench/device_map_real.py"
           + (f" --fraction {a.fraction:g}" if a.fraction != 0.75 else "")
           + (f" --rounds {a.rounds}" if a.rounds != 9 else "")
           + (f" --threads {a.threads}" if a.threads != 1 else "")
           + f" --out {a.out}")
    publish(res, to_markdown(res), a.out, a.docs, "device-map-real",
            "Device maps under a memory budget (accelerate, CPU)", cmd)

if __name__ == "__main__":
    main()
