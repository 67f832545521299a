"""Zoo sizes and build times: every entry built from scratch through the PyTorch frontend.

For each zoo entry, in a fresh subprocess (as ``graphopt zoo build NAME`` would run),
builds the training-step graph without the cache and records: build time (model
construction plus tracing and conversion; wall clock and this process's CPU time,
which other work on the machine disturbs less), ops, edges, parameters, FLOPs per
training step, persistent bytes (weights), the number of IR ops that are views or
aliases, and the device count and split from the registry.

Usage:  .venv/bin/python bench/zoo_sizes.py [NAME ...] [--out runs/bench/zoo_sizes.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from graphopt.benchmarks import replace_section
from graphopt.benchmarks import parse_bench_args


def measure(name: str) -> dict:
    """Build ``name`` once, uncached, in this process."""
    from graphopt import zoo
    from graphopt.ir.ops import op_class

    entry = zoo.get_entry(name)
    wall, cpu = time.perf_counter(), time.process_time()
    g = zoo.build(entry, cache=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    views = sum(op_class(str(o)) == "view" for o in g.op)
    return {"name": name, "family": entry.family, "devices": entry.num_devices,
            "train_split": entry.train_split, "ops": g.num_nodes, "view_ops": int(views),
            "edges": g.num_edges, "parameters": g.meta["zoo"]["parameters"],
            "tflops_per_step": float(g.flops.sum()) / 1e12,
            "weights_gib": float(g.persistent_bytes.sum()) / 2**30,
            "build_s": wall, "build_cpu_s": cpu}


def docs_table(result: dict) -> str:
    """The zoo table of docs/benchmarks.md."""
    lines = ["| model | devices | split | ops | of which views | edges | parameters | TFLOP / step "
             "| build (s) | build CPU (s) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['name']} | {r['devices']} | {'train' if r['train_split'] else 'held out'} "
                     f"| {r['ops']:,} | {r['view_ops']:,} | {r['edges']:,} | "
                     f"{r['parameters'] / 1e6:.1f} M | {r['tflops_per_step']:.2f} | "
                     f"{r['build_s']:.1f} | {r['build_cpu_s']:.1f} |")
    return f"`{result['command'].strip()}`:\n\n" + "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="entries to build (default: all)")
    ap.add_argument("--out", default="runs/bench/zoo_sizes.json")
    ap.add_argument("--docs", default=None,
                    help="Markdown file whose section is rewritten (default: none)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite the docs table from an existing --out file")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child mode: print one JSON row
    args = parse_bench_args(ap)
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    if args.render:
        if not args.docs:
            ap.error("--render rewrites --docs FILE's section: give --docs")
        replace_section(args.docs, "zoo-sizes", docs_table(json.loads(Path(args.out).read_text())))
        return

    from graphopt import zoo

    names = args.names or zoo.list_models()
    rows = []
    print(f"{'model':<18}{'dev':>4}{'ops':>8}{'views':>7}{'edges':>8}{'params':>9}"
          f"{'TFLOP':>8}{'build s':>9}{'cpu s':>7}{'proc s':>8}")
    for name in names:
        start = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True,
                             text=True, check=False)
        if out.returncode:
            sys.exit(f"{name}: build failed\n{out.stderr[-3000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["process_s"] = time.perf_counter() - start
        rows.append(row)
        print(f"{name:<18}{row['devices']:>4}{row['ops']:>8}{row['view_ops']:>7}{row['edges']:>8}"
              f"{row['parameters'] / 1e6:>8.1f}M{row['tflops_per_step']:>8.2f}"
              f"{row['build_s']:>9.1f}{row['build_cpu_s']:>7.1f}{row['process_s']:>8.1f}", flush=True)
    result = {"command": "python bench/zoo_sizes.py " + " ".join(args.names),
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__,
                          "load_average_after": os.getloadavg()},
              "date": time.strftime("%Y-%m-%d"), "rows": rows}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    if args.docs:
        replace_section(args.docs, "zoo-sizes", docs_table(result))
    print(f"largest: {max(rows, key=lambda r: r['ops'])['name']} "
          f"({max(r['ops'] for r in rows)} ops); slowest build "
          f"{max(r['build_s'] for r in rows):.1f} s; wrote {path}")


if __name__ == "__main__":
    main()
