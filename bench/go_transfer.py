"""GO's zero-shot transfer to held-out families, beside its controls (issue 35).

The benchmark is :mod:`graphopt.benchmarks.go_transfer` (its docstring says what it
measures); this script parses the arguments and runs it. It needs a corpus with its
held-out split built (``graphopt corpus build``) and a candidate policy (``graphopt
train imitate``).

Usage:  OMP_NUM_THREADS=1 .venv/bin/python bench/go_transfer.py --corpus runs/corpus \\
            --candidate runs/go-imitate [--cluster p100:4] [--budget 2000] [--docs FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphopt.benchmarks import parse_bench_args, plan_line, replace_section, say
from graphopt.benchmarks.go_transfer import run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("runs/corpus"), help="corpus folder")
    ap.add_argument("--candidate", type=Path, required=True, help="folder of the policy")
    ap.add_argument("--cluster", default="p100:4", help="cluster of every row")
    ap.add_argument("--budget", type=int, default=2000,
                    help="evaluations of portfolio, best and go-finetune per row")
    ap.add_argument("--per-family", type=int, default=2, help="largest items per family")
    ap.add_argument("--no-finetune", action="store_true", help="skip the go-finetune columns")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/go_transfer.json"))
    ap.add_argument("--docs", type=Path, help="markdown file to put the table in "
                                              "(section go-transfer)")
    a = parse_bench_args(ap)
    if not (a.candidate / "policy.json").is_file():
        ap.error(f"--candidate: no policy.json in {a.candidate}")
    if not (a.corpus / "manifest.json").is_file():
        ap.error(f"--corpus: no manifest.json in {a.corpus}")
    if a.budget < 1 or a.per_family < 1:
        ap.error("--budget and --per-family must be at least 1")
    say(plan_line("bench go-transfer", a.out, a.docs))
    result = run(a.corpus, a.candidate, cluster=a.cluster, budget=a.budget, seed=a.seed,
                 per_family=a.per_family, finetune=not a.no_finetune, out=a.out)
    table = to_markdown(result)
    print(table)
    if a.docs:
        command = (f"OMP_NUM_THREADS=1 .venv/bin/python bench/go_transfer.py --corpus {a.corpus} "
                   f"--candidate {a.candidate} --cluster {a.cluster} --budget {a.budget} "
                   f"--per-family {a.per_family} --seed {a.seed}")
        replace_section(a.docs, "go-transfer", f"`{command}`\n\n{table}")


if __name__ == "__main__":
    main()
