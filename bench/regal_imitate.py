"""REGAL learned from search on held-out families, beside its controls (issue 35).

The benchmark is :mod:`graphopt.benchmarks.regal_imitate` (its docstring says what it
measures); this script parses the arguments and runs it. It needs a corpus with its
held-out split built (``graphopt corpus build``) and a candidate policy (``graphopt
train regal-imitate``).

Usage:  OMP_NUM_THREADS=1 .venv/bin/python bench/regal_imitate.py --corpus runs/corpus \\
            --candidate runs/regal-imitate [--seeds 10] [--per-family 1] [--docs FILE]
            [--section regal-imitate]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphopt.benchmarks import parse_bench_args, plan_line, replace_section, say
from graphopt.benchmarks.regal_imitate import run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("runs/corpus"), help="corpus folder")
    ap.add_argument("--candidate", type=Path, required=True, help="folder of the policy")
    ap.add_argument("--evals", type=int, default=5000, help="evaluations of every search")
    ap.add_argument("--seeds", type=int, default=10, help="seeds per search; a graph's "
                                                           "figure is their mean")
    ap.add_argument("--per-family", type=int, default=1, help="items per held-out family")
    ap.add_argument("--cluster", default="p100:2", help="cluster of every row")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/regal_imitate.json"))
    ap.add_argument("--docs", type=Path, help="markdown file to put the table in")
    ap.add_argument("--section", default="regal-imitate", help="section of --docs the table "
                                                               "replaces (appended if missing)")
    a = parse_bench_args(ap)
    if not (a.candidate / "policy.json").is_file():
        ap.error(f"--candidate: no policy.json in {a.candidate}")
    if not (a.corpus / "manifest.json").is_file():
        ap.error(f"--corpus: no manifest.json in {a.corpus}")
    if a.evals < 1 or a.seeds < 1 or a.per_family < 1:
        ap.error("--evals, --seeds and --per-family must be at least 1")
    say(plan_line(f"bench regal-imitate: {a.per_family} graph(s) per held-out family x 5 rows "
                  f"x {a.seeds} seeds, {a.evals} evaluations each", a.out, a.docs))
    result = run(a.corpus, a.candidate, evals=a.evals, seeds=a.seeds, per_family=a.per_family,
                 cluster=a.cluster, out=a.out, on_step=lambda text: say(text + " ..."))
    table = to_markdown(result)
    print(table)
    if a.docs:
        command = (f"OMP_NUM_THREADS=1 .venv/bin/python bench/regal_imitate.py --corpus {a.corpus} "
                   f"--candidate {a.candidate} --evals {a.evals} --seeds {a.seeds} "
                   f"--per-family {a.per_family} --cluster {a.cluster} --out {a.out} "
                   f"--docs {a.docs} --section {a.section}")
        replace_section(a.docs, a.section, f"`{command}`\n\n{table}")


if __name__ == "__main__":
    main()
