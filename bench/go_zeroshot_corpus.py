"""Zero-shot GO from two pre-trained checkpoints, side by side, on GO's Table 2 rows.

The benchmark is :mod:`graphopt.benchmarks.go_zeroshot_corpus` (its docstring says what it measures
and how); this script parses the arguments and runs it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from graphopt.benchmarks.go_table2 import ROWS
from graphopt.optim.learned.go.method import SHIPPED
from graphopt.benchmarks import parse_bench_args
from graphopt.benchmarks.go_zeroshot_corpus import LABELS, run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidate", required=True, help="folder of the candidate's policy")
    ap.add_argument("--baseline", default=os.path.relpath(SHIPPED),
                    help="folder of the policy to compare with (default: the shipped one)")
    ap.add_argument("--rows", default=",".join(ROWS), help="GO's Table 2 rows, comma-separated")
    ap.add_argument("--budget", type=int, default=2000,
                    help="evaluations (go uses its 16 plans of them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/go_zeroshot_corpus.json"))
    a = parse_bench_args(ap)
    rows = tuple(a.rows.split(","))
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown row(s) {', '.join(unknown)}; rows are {', '.join(ROWS)}")
    for d in (a.baseline, a.candidate):
        if not (Path(d) / "policy.json").is_file():
            ap.error(f"no policy.json in {d}")
    result = run(dict(zip(LABELS, (a.baseline, a.candidate))), rows, a.budget, a.seed, a.out)
    print(to_markdown(result))


if __name__ == "__main__":
    main()
