"""The simulator against real execution: plans of zoo models run on this machine's CPU

The benchmark is :mod:`graphopt.benchmarks.sim_vs_real` (its docstring says what it measures
and how); this script parses the arguments and runs it.
"""

from __future__ import annotations

import argparse
from graphopt.benchmarks import replace_section, save_json
from graphopt.benchmarks import parse_bench_args
from graphopt.benchmarks.sim_vs_real import METHODS, MODELS, run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="zoo names, comma-separated")
    ap.add_argument("--methods", default=",".join(METHODS), help="methods, comma-separated")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per plan, the plans in turns")
    ap.add_argument("--budget", type=int, default=500, help="evaluations per search method")
    ap.add_argument("--size", choices=("quick", "cpu"), default="quick",
                    help="quick: the zoo's -quick entries; cpu: CPU_SIZES (the same six "
                         "families), ops of about a millisecond")
    ap.add_argument("--out", default=None, help="default runs/bench/sim_vs_real[-cpu].json")
    ap.add_argument("--docs", default=None,
                    help="Markdown file whose section is rewritten (default: none)")
    a = parse_bench_args(ap)
    res = run(tuple(a.models.split(",")), tuple(a.methods.split(",")), a.steps, a.budget, size=a.size)
    suffix = "" if a.size == "quick" else f"-{a.size}"
    save_json(res, a.out or f"runs/bench/sim_vs_real{suffix}.json")
    print(to_markdown(res))
    if a.docs:
        title = "## Simulator against real execution" + ("" if a.size == "quick" else
                                                          f", {a.size} sizes")
        replace_section(a.docs, f"sim-vs-real{suffix}", f"{title}\n\n" + to_markdown(res))


if __name__ == "__main__":
    main()
