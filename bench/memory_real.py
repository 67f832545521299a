"""Peak memory per device, measured and simulated: placed plans of zoo and transformers
models run by graphopt.exec's CPU workers, the allocator's events against the simulator.

The benchmark is :mod:`graphopt.benchmarks.memory_real` (its docstring says what it
measures and how); this script parses the arguments and runs it.

Example: python bench/memory_real.py --out bench/results/memory_real.json --docs docs/benchmarks.md
"""

from __future__ import annotations

import argparse

from graphopt.benchmarks import parse_bench_args, plan_line, publish, say
from graphopt.benchmarks.memory_real import METHODS, MODELS, run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=";".join(MODELS),
                    help="graph sources (zoo:NAME, hf:TYPE:...), separated by ';' (hf: "
                         "overrides use ',')")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"plans, comma-separated, of {', '.join(METHODS)}")
    ap.add_argument("--repeats", type=int, default=3,
                    help="steps measuring memory per plan after a warm-up (their median)")
    ap.add_argument("--budget", type=int, default=50, help="evaluations per search method")
    ap.add_argument("--out", default="runs/bench/memory_real.json", help="results (JSON)")
    ap.add_argument("--docs", default=None,
                    help="Markdown file whose memory-real section is rewritten (default: none)")
    a = parse_bench_args(ap)
    models = tuple(m for m in a.models.split(";") if m)
    methods = tuple(m for m in a.methods.split(",") if m)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or a.repeats < 1:
        ap.error(f"--methods: expected some of {', '.join(METHODS)}, got {', '.join(unknown)}"
                 if unknown else f"--repeats {a.repeats}: expected at least 1")
    say(plan_line(f"bench memory_real: {len(models)} models, {len(methods)} plans each", a.out, a.docs))
    res = run(models, methods, a.repeats, a.budget)
    cmd = ("python bench/memory_real.py"
           + (f" --repeats {a.repeats}" if a.repeats != 3 else "")
           + (f" --budget {a.budget}" if a.budget != 50 else "")
           + f" --out {a.out}")
    publish(res, to_markdown(res), a.out, a.docs, "memory-real",
            "Peak memory per device, measured and simulated (graphopt.exec, CPU)", cmd)

if __name__ == "__main__":
    main()
