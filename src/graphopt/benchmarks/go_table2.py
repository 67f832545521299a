"""GO's Table 2 on our zoo: every placement baseline on the 14 models the paper used.

For each row (a zoo model with the device count GO placed it on) every method gets the
same problem and the same evaluation budget; plans are simulated on a GPU cluster of
the era. The result is a JSON file with every figure and a markdown table with step
times, speed-ups over the human-expert placement, ratios to the lower bound and the
geometric means — the numbers GO's headline claims are measured against.

The run checkpoints after each row into its JSON file; ``resume=True`` skips rows
already there with the same settings.
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

from graphopt.benchmarks import replace_section
from graphopt.ir.io import atomic_write
from graphopt.optim.base import Budget
from graphopt.optim.compare import compare
from graphopt.sim import Problem

__all__ = ["ROWS", "METHODS", "QUICK", "run", "to_markdown", "update_docs"]

#: GO's Table 2 rows, in the paper's order.
ROWS = ("rnnlm-2", "rnnlm-4", "rnnlm-8", "gnmt-2", "gnmt-4", "gnmt-8", "transformer-xl-2",
        "transformer-xl-4", "transformer-xl-8", "inception-v3-b32", "inception-v3-b64",
        "amoebanet", "wavenet-2x18", "wavenet-4x36")
#: The non-learned methods the table compares.
METHODS = ("single", "expert", "metis", "m-etf", "m-sct", "heft", "sa", "brkga")
#: Size overrides per family for ``quick`` runs (CI): same structure, small tensors and
#: short unrolls, so every row builds and optimizes in seconds.
QUICK = {
    "rnnlm": {"hidden": 128, "vocab": 500, "seq_len": 3, "batch": 4},
    "gnmt": {"hidden": 64, "vocab": 500, "src_len": 3, "tgt_len": 3, "batch": 4},
    "transformer_xl": {"d_model": 32, "heads": 2, "d_head": 16, "d_inner": 64, "vocab": 500,
                       "seg_len": 8, "mem_len": 8, "batch": 2},
    "inception_v3": {"image_size": 75, "batch": 2, "classes": 10},
    "amoebanet": {"normal_cells": 1, "filters": 8, "image_size": 32, "batch": 2, "classes": 10},
    "wavenet": {"layers": 3, "residual": 8, "dilation_channels": 8, "skip": 16, "classes": 16,
                "length": 64, "batch": 1},
}


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def run(cluster: str = "p100", methods: tuple[str, ...] = METHODS, budget: int = 2000,
        seed: int = 0, quick: bool = False, rows: tuple[str, ...] = ROWS,
        out: Path | None = None, resume: bool = False, progress: bool = True) -> dict:
    """Run the benchmark; return (and, with ``out``, checkpoint after every row) its results."""
    from rich.progress import Progress

    from graphopt.hardware import load_cluster
    from graphopt.zoo import build, get_entry

    settings = {"cluster": cluster, "methods": list(methods), "budget": budget, "seed": seed,
                "quick": quick}
    done: dict[str, dict] = {}
    if resume and out and Path(out).is_file():
        old = json.loads(Path(out).read_text())
        if old.get("settings") == settings:
            done = {r["model"]: r for r in old["rows"]}
    result = {"benchmark": "go-table2", "settings": settings,
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "python": platform.python_version()},
              "rows": []}
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("go-table2", total=len(rows) * len(methods))
        for name in rows:
            if name in done:
                result["rows"].append(done[name])
                bar.advance(task, len(methods))
                continue
            entry = get_entry(name)
            if quick:
                entry = entry.with_config(f"{name}-quick", **QUICK[entry.family])
            t0 = time.perf_counter()
            graph = build(entry)
            build_s = time.perf_counter() - t0
            prob = Problem(graph, load_cluster(f"{cluster}:{entry.num_devices}"))
            res = compare(prob, list(methods), "placement", Budget(budget), seed,
                          on_start=lambda m, name=name: bar.update(task,
                                                                   description=f"{name}: {m}"))
            for _ in methods:
                bar.advance(task)
            row = {"model": name, "ops": graph.num_nodes, "devices": entry.num_devices,
                   "build_seconds": build_s, "lower_bound": prob.lower_bound,
                   "reported": None if entry.reported is None else {
                       "go_one": entry.reported.go_one, "human_expert": entry.reported.human_expert,
                       "metis": entry.reported.metis, "hdp": entry.reported.hdp},
                   "methods": {r.method: {"step_time": r.step_time, "valid": r.result.valid,
                                          "reason": r.result.reason,
                                          "seconds": r.stats.get("seconds"),
                                          "evals": r.stats.get("evals", 0)} for r in res}}
            result["rows"].append(row)
            if out:
                _save(result, out)
    result["geomean_speedup_vs_expert"] = {m: _geomean(_speedups(result, m)) for m in methods}
    if out:
        _save(result, out)
    return result


def _speedups(result: dict, method: str) -> list[float]:
    out = []
    for row in result["rows"]:
        e, m = row["methods"].get("expert"), row["methods"].get(method)
        if e and m and e["valid"] and m["valid"]:
            out.append(e["step_time"] / m["step_time"])
    return out


def _save(result: dict, path: Path) -> None:
    text = json.dumps(result, indent=1)
    atomic_write(path, lambda f: f.write(text.encode()))


def to_markdown(result: dict) -> str:
    """Step time (ms) per row and method, speed-up over ``expert`` in brackets, OOM where
    invalid; then the ratio of the best method to the lower bound and the geomeans."""
    methods = result["settings"]["methods"]
    head = "| model | ops | dev | " + " | ".join(methods) + " | best / bound |"
    lines = [head, "|" + "---|" * (len(methods) + 4)]
    for row in result["rows"]:
        e = row["methods"].get("expert")
        cells, best = [], math.inf
        for m in methods:
            r = row["methods"][m]
            if not r["valid"]:
                cells.append("OOM" if r["reason"].startswith("OOM") else "invalid")
                continue
            best = min(best, r["step_time"])
            sp = (f" ({e['step_time'] / r['step_time']:.2f}x)"
                  if e and e["valid"] and m != "expert" else "")
            cells.append(f"{r['step_time'] * 1e3:.2f}{sp}")
        ratio = f"{best / row['lower_bound']:.2f}" if row["lower_bound"] > 0 and best < math.inf \
            else "-"
        lines.append(f"| {row['model']} | {row['ops']:,} | {row['devices']} | "
                     + " | ".join(cells) + f" | {ratio} |")
    gm = result.get("geomean_speedup_vs_expert") or {}
    lines.append("| **geomean vs expert** | | | " + " | ".join(
        f"{gm[m]:.3f}x" if gm.get(m) else "-" for m in methods) + " | |")
    return "\n".join(lines)


def update_docs(result: dict, docs: Path, command: str) -> None:
    """Replace the go-table2 section of ``docs`` (between its markers) with this result."""
    s = result["settings"]
    replace_section(docs, "go-table2-quick" if s["quick"] else "go-table2",
                    f"`{command}` — cluster `{s['cluster']}`, budget {s['budget']} evaluations "
                    f"per search method, seed {s['seed']}; step times in ms, speed-up over "
                    f"`expert` in brackets.\n\n{to_markdown(result)}")
