"""Learned cost models on the two real TpuGraphs tuning records, against two baselines.

The benchmark is :mod:`graphopt.benchmarks.costmodel_real` (its docstring says what it measures
and how); this script parses the arguments and runs it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
import torch
from graphopt.benchmarks import replace_section
from graphopt.data import tpugraphs_dir
from graphopt.benchmarks import parse_bench_args
from graphopt.benchmarks.costmodel_real import docs_section, gst_bench, layout_bench, table, tile_bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny budget (the test's smoke run)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/costmodel_real.json"))
    ap.add_argument("--docs", type=Path, default=None,
                    help="markdown file whose costmodel-real section is rewritten (not with --quick)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the docs section from an existing --out file")
    args = parse_bench_args(ap)
    if args.render:
        if not args.docs:
            ap.error("--render rewrites --docs FILE's section: give --docs")
        replace_section(args.docs, "costmodel-real", docs_section(json.loads(args.out.read_text())))
        return
    torch.set_num_threads(1)
    data = tpugraphs_dir()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results = {
            "layout": layout_bench(data / "module_tuning_data_layout.pb", Path(tmp),
                                   seeds=[0] if args.quick else [0, 1, 2], epochs=2 if args.quick else 60),
            "tile": tile_bench(data / "op_tuning_data.pb", Path(tmp), epochs=1 if args.quick else 40,
                               folds=2 if args.quick else 5),
        }
    gst = gst_bench(data / "module_tuning_data_layout.pb", repeats=1 if args.quick else 5)
    seconds = time.perf_counter() - start
    print(table(results))
    print("\n| layout step (32 configs, 3,163 nodes) | seconds | saved for backward (MiB) | segments |")
    print("|---|---|---|---|")
    for k, v in gst.items():
        print(f"| {k} | {v['seconds']:.3f} | {v['saved_mib']:.1f} | {v['segments']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": " ".join([".venv/bin/python", *sys.argv]), "quick": args.quick,
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "python": platform.python_version(), "torch": torch.__version__, "threads": 1},
        "seconds": seconds, "results": results, "gst_step": gst}, indent=1))
    if args.docs and not args.quick:
        replace_section(args.docs, "costmodel-real", docs_section(json.loads(args.out.read_text())))
    print(f"\n{seconds:.0f} s; results: {args.out}")


if __name__ == "__main__":
    main()
