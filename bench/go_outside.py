"""GO's shipped zero-shot policy on models written elsewhere (test material, never trained on).

The benchmark is :mod:`graphopt.benchmarks.go_outside` (its docstring says what it measures
and how); this script parses the arguments and runs it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from graphopt.benchmarks import parse_bench_args
from graphopt.benchmarks.go_outside import MODELS, SECTION, run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, of: {', '.join(MODELS)}")
    ap.add_argument("--clusters", default="p100:2,p100:4", help="cluster presets, comma-separated")
    ap.add_argument("--budget", type=int, default=500,
                    help="evaluations for go-finetune and portfolio (and every search)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/go_outside.json"))
    ap.add_argument("--docs", type=Path, default=None,
                    help=f"Markdown file whose {SECTION} section is rewritten (default: none)")
    a = parse_bench_args(ap)
    models = a.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; models are {', '.join(MODELS)}")
    result = run(models, a.clusters.split(","), a.budget, a.seed, a.out)
    table = to_markdown(result)
    print(table)
    if a.docs:
        from graphopt.benchmarks import replace_section

        command = "nice -n 19 .venv/bin/python " + shlex.join(sys.argv)
        replace_section(a.docs, SECTION,
                        "## GO zero-shot on models written elsewhere\n\n"
                        f"`{command}` — one SGD training step per model, traced by the torch "
                        f"frontend; {a.budget} evaluations for the searches, seed {a.seed}; "
                        "step times in ms; ratios are the other method's step time over GO's "
                        "(above 1: GO faster). Models, sizes and why some PyG models are "
                        "missing: the script's docstring.\n\n" + table)


if __name__ == "__main__":
    main()
