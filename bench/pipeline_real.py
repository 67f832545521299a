"""Pipeline splits run for real on CPU processes: even, parameter-balanced and
graphopt's exact split under torch.distributed.pipelining, measured beside the simulator.

The benchmark is :mod:`graphopt.benchmarks.pipeline` (its docstring says what it measures
and how); this script parses the arguments and runs it.

Example: python bench/pipeline_real.py --stages 2,4 --docs docs/benchmarks.md
"""

from __future__ import annotations

import argparse

from graphopt.benchmarks import parse_bench_args, plan_line, publish, say
from graphopt.benchmarks.pipeline import MODELS, run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=";".join(MODELS),
                    help="model sources (pipe:, hf:, py:, zoo:), separated by ';' (their "
                         "overrides use ',')")
    ap.add_argument("--stages", default="2", help="stage counts, comma-separated, e.g. 2,4")
    ap.add_argument("--microbatches", default="auto",
                    help="microbatches per step (at least the stage count), or auto: "
                         "graphopt's choice")
    ap.add_argument("--steps", type=int, default=7,
                    help="timed rounds after a warm-up, one step of each plan per round")
    ap.add_argument("--out", default="runs/bench/pipeline_real.json", help="results (JSON)")
    ap.add_argument("--docs", default=None,
                    help="Markdown file whose section --section is rewritten (default: none)")
    ap.add_argument("--section", default="pipeline-real",
                    help="the section of --docs to rewrite, e.g. pipeline-any for other models")
    a = parse_bench_args(ap)
    models = tuple(m for m in a.models.split(";") if m)
    stages = tuple(int(k) for k in a.stages.split(","))
    say(plan_line(f"bench pipeline_real: {len(models)} models on {a.stages} stages", a.out, a.docs))
    res = run(models, stages, None if a.microbatches == "auto" else int(a.microbatches), a.steps)
    cmd = ("python bench/pipeline_real.py"
           + (f" --models '{a.models}'" if models != MODELS else "")
           + (f" --section {a.section}" if a.section != "pipeline-real" else "")
           + (f" --stages {a.stages}" if a.stages != "2" else "")
           + (f" --steps {a.steps}" if a.steps != 7 else "")
           + (f" --microbatches {a.microbatches}" if a.microbatches != "auto" else "")
           + f" --out {a.out}")
    title = "Pipeline splits run for real (torch.distributed.pipelining, CPU)"
    publish(res, to_markdown(res), a.out, a.docs, a.section,
            title if a.section == "pipeline-real" else f"{title}: any model", cmd)

if __name__ == "__main__":
    main()
