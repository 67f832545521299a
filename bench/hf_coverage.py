"""Hugging Face coverage: every model type of graphopt.zoo.hf_models.TYPES built as a
training step (``hf:`` source) at both sizes of graphopt.zoo.hf_models.SIZES.

Each build runs in this process, one after another, from a fresh model with random
weights (no cache): model construction plus tracing and conversion, wall clock. A type
that fails is recorded with graphopt's one-line error. The load average of the machine
(``uptime``) is read before and after, since other work on it slows the builds.

Usage:  OMP_NUM_THREADS=1 python bench/hf_coverage.py [TYPE ...] [--out FILE] [--docs FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
import warnings

import torch

from graphopt.benchmarks import parse_bench_args, publish
from graphopt.errors import GraphoptError
from graphopt.frontends import load_source
from graphopt.ir.formulas import UnknownOpWarning
from graphopt.zoo.hf_models import SIZES, TYPES, HFType, spec


def uptime() -> str:
    """``uptime``'s line, or the load averages where the command is missing."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(model_type: str, size: str) -> dict:
    """Build ``model_type`` at ``size`` once; its ops and seconds, or the error's line."""
    source = spec(model_type, size)
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnknownOpWarning)  # a cost detail, not coverage
            graph = load_source(source)
    except GraphoptError as err:
        return {"spec": source, "ok": False, "seconds": time.perf_counter() - start,
                "reason": str(err)}
    return {"spec": source, "ok": True, "seconds": time.perf_counter() - start,
            "ops": graph.num_nodes, "parameters": graph.meta["hf"]["parameters"]}


def table(result: dict) -> str:
    """One row per type: its family, why it is listed, each size's ops and build seconds."""
    sizes = result["sizes"]
    head = "| type | family | why | " + " | ".join(f"{s} ops | {s} s" for s in sizes) + " |"
    lines = [head, "|---|---|---|" + "---:|---:|" * len(sizes)]
    failures = []
    for row in result["rows"]:
        cells = []
        for s in sizes:
            r = row["builds"][s]
            cells += [f"{r['ops']:,}", f"{r['seconds']:.1f}"] if r["ok"] else ["fails", "–"]
            if not r["ok"]:
                failures.append(f"- {r['reason']}")
        lines.append(f"| {row['type']} | {row['family']} | {row['why']} | " + " | ".join(cells) + " |")
    both = sum(all(b["ok"] for b in r["builds"].values()) for r in result["rows"])
    size_text = "; ".join(f"{k}: {v}" for k, v in result["size_settings"].items())
    summary = (f"{both} of {len(result['rows'])} types build at both sizes ({size_text}); "
               f"{result['seconds']:.0f} s in all on {result['machine']['cores']} cores. "
               f"`uptime` before: `{result['uptime_before']}`; after: `{result['uptime_after']}`.")
    return "\n".join([summary, "", *lines, *(["", "Failures:", ""] + failures if failures else [])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("types", nargs="*", help="model types to build (default: all of TYPES; "
                    "others are built at the same sizes)")
    ap.add_argument("--out", default="runs/bench/hf_coverage.json")
    ap.add_argument("--docs", default=None,
                    help="Markdown file whose hf-coverage section is rewritten (default: none)")
    args = parse_bench_args(ap)
    known = {t.model_type: t for t in TYPES}  # a type outside TYPES is tried as "other"
    chosen = ([known.get(t, HFType(t, "other", "not in TYPES")) for t in args.types]
              if args.types else list(TYPES))
    before, start, rows = uptime(), time.perf_counter(), []
    print(f"{'type':<22}{'family':<17}{'size':<7}{'ops':>7}{'build s':>9}  result", flush=True)
    for t in chosen:
        builds = {}
        for size in SIZES:
            r = builds[size] = measure(t.model_type, size)
            print(f"{t.model_type:<22}{t.family:<17}{size:<7}{r.get('ops', '–'):>7}"
                  f"{r['seconds']:>9.1f}  {'ok' if r['ok'] else r['reason']}", flush=True)
        rows.append({"type": t.model_type, "family": t.family, "why": t.why, "builds": builds})
    result = {"command": " ".join(["OMP_NUM_THREADS=1 python bench/hf_coverage.py", *args.types]),
              "sizes": list(SIZES),
              "size_settings": {k: f"hidden {v.hidden}, {v.heads} heads, {v.layers} blocks, "
                                   f"seq {v.seq}, image {v.image} px, {v.samples:,} samples"
                                for k, v in SIZES.items()},
              "machine": {"platform": platform.platform(), "cores": os.cpu_count(),
                          "python": platform.python_version(), "torch": torch.__version__,
                          "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
              "uptime_before": before, "uptime_after": uptime(),
              "seconds": time.perf_counter() - start, "date": time.strftime("%Y-%m-%d"),
              "rows": rows}
    import transformers

    result["machine"]["transformers"] = transformers.__version__
    print()
    publish(result, table(result), args.out, args.docs, "hf-coverage",
            "Hugging Face models: coverage at two sizes", result["command"])
    if any(not b["ok"] for r in rows for b in r["builds"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
