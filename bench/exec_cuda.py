"""graphopt.exec on a GPU: placed training steps on CUDA devices, their numerics against

The benchmark is :mod:`graphopt.benchmarks.exec_cuda` (its docstring says what it measures
and how); this script parses the arguments and runs it.
"""

from __future__ import annotations

import argparse
import os
import torch
from graphopt.benchmarks import replace_section
from graphopt.benchmarks import parse_bench_args
from graphopt.benchmarks.exec_cuda import METHODS, MODELS, run, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="zoo names, comma-separated")
    ap.add_argument("--methods", default=",".join(METHODS), help="methods, comma-separated")
    ap.add_argument("--steps", type=int, default=6, help="training steps per plan")
    ap.add_argument("--randoms", type=int, default=3, help="random plans per model")
    ap.add_argument("--size", choices=("quick", "full"), default="quick",
                    help="the zoo's -quick sizes (checked against the CPU engine too) or its "
                         "full sizes (GPU only)")
    ap.add_argument("--budget", type=int, default=300, help="evaluations per search method")
    ap.add_argument("--out", default="runs/bench/exec_cuda.json", help="results (JSON)")
    ap.add_argument("--trace-dir", default=None, help="write each model's expert-plan trace here")
    ap.add_argument("--docs", default="", help="a Markdown file whose exec-cuda section gets the "
                                                "table, e.g. docs/benchmarks.md")
    ap.add_argument("--deterministic", action="store_true",
                    help="PyTorch's deterministic algorithms (cuBLAS workspace :4096:8); "
                         "ops without one run as before, with a warning naming them")
    a = parse_bench_args(ap)
    if a.deterministic:  # before cuBLAS starts
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.use_deterministic_algorithms(True, warn_only=True)  # warnings name the others
    if not torch.cuda.is_available():
        raise SystemExit("bench/exec_cuda.py: no CUDA device on this machine")
    res = run(tuple(a.models.split(",")), tuple(a.methods.split(",")), a.steps, a.randoms, a.budget,
              trace_dir=a.trace_dir, size=a.size, out=a.out)
    print(to_markdown(res))
    if a.docs:
        replace_section(a.docs, "exec-cuda", "## Real execution on a GPU\n\n" + to_markdown(res))


if __name__ == "__main__":
    main()
