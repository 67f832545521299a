"""Where a placed step loses time against the simulator: each op's real start beside its

The benchmark is :mod:`graphopt.benchmarks.exec_timeline` (its docstring says what it measures
and how); this script parses the arguments and runs it.
"""

from __future__ import annotations

import argparse
from graphopt.benchmarks import save_json
from graphopt.benchmarks import parse_bench_args
from graphopt.benchmarks.exec_timeline import run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gnmt-2", help="a model of bench/sim_vs_real.py")
    ap.add_argument("--methods", default="single,go,metis,expert", help="methods, comma-separated")
    ap.add_argument("--steps", type=int, default=9, help="steps per plan, the plans in turns")
    ap.add_argument("--size", default="cpu", choices=("quick", "cpu"),
                    help="the model's size, as bench/sim_vs_real.py's")
    ap.add_argument("--out", default="runs/bench/exec_timeline.json")
    a = parse_bench_args(ap)
    save_json(run(a.model, tuple(a.methods.split(",")), a.steps, size=a.size), a.out)


if __name__ == "__main__":
    main()
