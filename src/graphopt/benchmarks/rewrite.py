"""Tensat's comparison on this CPU: the original program, the sequential greedy rewriter
(TASO-style) and equality saturation with ILP extraction, on Tensat's models written in
PyTorch (:mod:`graphopt.rewrite.models`).

For each model the three programs are built (search time measured), checked to compute
the original's outputs, then timed side by side: one inference each in turn, rotating
the order, ``repeats`` rounds after ``warmup`` rounds, on one pinned thread; the median
is kept, and the speed-up of a program is the median over rounds of the original's time
over its time in the same round (the programs ran back to back, so bursts of load from
other processes mostly cancel). Optionally the same three programs are compiled with ``torch.compile``
(inductor) and timed the same way.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

import torch

from graphopt.benchmarks import replace_section, row_line, save_json
from graphopt.rewrite.api import rewrite, sequential_rewrite
from graphopt.rewrite.codegen import unfuse
from graphopt.rewrite.config import RewriteConfig
from graphopt.rewrite.models import MODELS, make_model

__all__ = ["TARGET_MODELS", "TARGET_SEARCH_S", "paired_speedup", "run", "targets", "time_programs",
           "to_markdown", "update_docs"]

#: The issue's targets: a measured speed-up on at least this many models, and saturation
#: search under this many seconds per model.
TARGET_MODELS = 5
TARGET_SEARCH_S = 10.0
#: "At least the sequential rewriter's" is judged on medians within this noise margin.
NOISE = 0.02
VARIANTS = ("original", "sequential", "saturation")


def time_programs(programs: dict, inputs: tuple, repeats: int, warmup: int) -> dict[str, list[float]]:
    """Seconds of one inference of each program, measured in turn (rotating the order)."""
    times: dict[str, list[float]] = {k: [] for k in programs}
    names = list(programs)
    with torch.no_grad():
        for r in range(warmup + repeats):
            for k in names[r % len(names):] + names[:r % len(names)]:
                start = time.perf_counter()
                programs[k](*inputs)
                if r >= warmup:
                    times[k].append(time.perf_counter() - start)
    return times


def paired_speedup(times: dict[str, list[float]]) -> dict[str, float]:
    """Median over rounds of the original's time over each program's in the same round:
    the three ran back to back, so load from other processes mostly cancels."""
    return {k: statistics.median(o / t for o, t in zip(times["original"], v))
            for k, v in times.items() if k != "original"}


def _max_error(ref, out) -> float:
    a = torch.utils._pytree.tree_leaves(ref)
    b = torch.utils._pytree.tree_leaves(out)
    return max(float((x - y).abs().max()) / max(float(x.abs().max()), 1e-12)
               for x, y in zip(a, b))


def run_model(name: str, size: str, repeats: int, warmup: int, compile_: bool,
              cfg: RewriteConfig, seq_time_limit: float) -> dict:
    """Search, check and time the three programs of one model."""
    model, inputs = make_model(name, size)
    sat = rewrite(model, inputs, cfg)
    seq = sequential_rewrite(model, inputs, RewriteConfig(**{**cfg.__dict__,
                                                             "time_limit": seq_time_limit}))
    programs = {"original": sat.original, "sequential": seq.module, "saturation": sat.module}
    with torch.no_grad():
        ref = sat.original(*inputs)
        errors = {k: _max_error(ref, p(*inputs)) for k, p in programs.items()}
    times = time_programs(programs, inputs, repeats, warmup)
    row = {
        "paired_speedup": paired_speedup(times),
        "model": name,
        "ops": {k: sum(n.op == "call_function" for n in p.graph.nodes) for k, p in programs.items()},
        "predicted_ms": {"original": sat.stats["cost_before"] * 1e3,
                         "sequential": seq.stats["cost_after"] * 1e3,
                         "saturation": sat.stats["cost_after"] * 1e3},
        "search_s": {"sequential": seq.stats["search_s"], "saturation": sat.stats["search_s"]},
        "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
        "max_error": errors,
        "saturation": {k: v for k, v in sat.stats.items() if k != "config"},
        "sequential_steps": seq.stats["steps"],
        # the same program twice is equal by construction, whatever the timer says
        "same_program": seq.module.code == sat.module.code,
    }
    if compile_:
        # inductor fuses activations itself and lowers oneDNN's fused kernels only for
        # frozen weights
        compiled = {k: torch.compile(unfuse(p)) for k, p in programs.items()}
        start = time.perf_counter()
        with torch.no_grad():
            for p in compiled.values():
                p(*inputs)
        row["compile_s"] = time.perf_counter() - start
        ctimes = time_programs(compiled, inputs, repeats, warmup)
        row["compiled_median_ms"] = {k: statistics.median(v) * 1e3 for k, v in ctimes.items()}
        row["compiled_paired_speedup"] = paired_speedup(ctimes)
    return row


def run(models: tuple[str, ...] = tuple(MODELS), size: str = "bench", repeats: int = 30,
        warmup: int = 3, compile_: bool = False, out: Path | None = None,
        cfg: RewriteConfig | None = None, seq_time_limit: float = 600.0,
        command: str = "graphopt bench rewrite", progress=None) -> dict:
    """Run the benchmark on ``models``; checkpoint ``out`` after each model; ``progress``
    (e.g. :func:`graphopt.benchmarks.say`) is given a line after each
    (:func:`graphopt.benchmarks.row_line`).

    Threads are pinned to one (``torch.set_num_threads(1)``) for the whole run.
    """
    cfg = cfg or RewriteConfig()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    result = {"command": command,
              "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count(), "torch": torch.__version__, "threads": 1,
                          # other jobs on the machine show here; the ratios are side by side
                          "load_average": [os.getloadavg()[0]]},
              "settings": {"size": size, "repeats": repeats, "warmup": warmup,
                           "compile": compile_, "config": cfg.__dict__,
                           "sequential_time_limit_s": seq_time_limit},
              "rows": []}
    try:
        for done, name in enumerate(models, 1):
            t0 = time.perf_counter()
            result["rows"].append(run_model(name, size, repeats, warmup, compile_, cfg,
                                            seq_time_limit))
            if progress:
                progress(row_line(done, len(models), name, time.perf_counter() - t0))
            if out is not None:
                save_json(result, out)
    finally:
        torch.set_num_threads(threads)
        result["machine"]["load_average"].append(os.getloadavg()[0])
    result["targets"] = targets(result)
    if out is not None:
        save_json(result, out)
    return result


def _speedup(row: dict, k: str, key: str = "paired_speedup") -> float:
    return row[key][k]


def targets(result: dict) -> dict:
    """The issue's targets, each with its figure: ``(met, text)``."""
    rows = result["rows"]
    # a program the rules left as it was cannot be faster: its ratio is the timer's noise
    # (so is a predicted gain in the last bits of a float sum: WaveNet's re-associated adds)
    changed = [r for r in rows
               if r["predicted_ms"]["saturation"] < r["predicted_ms"]["original"] * (1 - 1e-9)]
    faster = [r["model"] for r in changed if _speedup(r, "saturation") > 1.0 + NOISE]
    unchanged = [r["model"] for r in rows if r not in changed]
    behind = [r["model"] for r in rows if not r.get("same_program") and
              _speedup(r, "saturation") < _speedup(r, "sequential") * (1 - NOISE)]
    slow = [r["model"] for r in rows if r["search_s"]["saturation"] >= TARGET_SEARCH_S]
    worst = max((r["search_s"]["saturation"] for r in rows), default=0.0)
    err = max((max(r["max_error"].values()) for r in rows), default=0.0)
    return {
        "speedup_models": (len(faster) >= TARGET_MODELS,
                           f"speed-up over the original above the {NOISE:.0%} noise margin on "
                           f"{len(faster)} of {len(rows)} models ({', '.join(faster) or 'none'})"
                           + (f"; left unchanged by the rules: {', '.join(unchanged)}"
                              if unchanged else "") + f"; target {TARGET_MODELS}"),
        "at_least_sequential": (not behind, "saturation at least the sequential rewriter's "
                                "(within 2%) on every model" if not behind else
                                f"saturation slower than sequential on {', '.join(behind)}"),
        "search_under_10s": (not slow, f"saturation search at most {worst:.1f} s per model"
                             + (f" ({', '.join(slow)} over {TARGET_SEARCH_S:.0f} s)" if slow
                                else "")),
        "outputs_equal": (err < 1e-3, f"largest output difference {err:.1e} (relative)"),
    }


def to_markdown(result: dict) -> str:
    """Medians (ms), speed-ups over the original (median of per-round ratios), search
    seconds, ops, whether both rewriters found the same program, then the targets."""
    compiled = result["settings"]["compile"]
    head = ("| model | original ms | sequential ms (speed-up) | saturation ms (speed-up) | "
            "search s seq / sat | ops orig / seq / sat | same program | e-nodes | ILP |")
    lines = [head, "|" + "---|" * 9]
    for r in result["rows"]:
        m, s = r["median_ms"], r["saturation"]
        lines.append(
            f"| {r['model']} | {m['original']:.2f} | {m['sequential']:.2f} "
            f"({_speedup(r, 'sequential'):.3f}x) | {m['saturation']:.2f} "
            f"({_speedup(r, 'saturation'):.3f}x) | {r['search_s']['sequential']:.1f} / "
            f"{r['search_s']['saturation']:.1f} | {r['ops']['original']} / "
            f"{r['ops']['sequential']} / {r['ops']['saturation']} | "
            f"{'yes' if r.get('same_program') else 'no'} | {s['enodes']} | "
            f"{s.get('ilp', {}).get('status', '-')} |")
    if compiled:
        lines += ["", "With `torch.compile` (inductor) on each program:", "",
                  "| model | original ms | sequential ms (speed-up) | saturation ms (speed-up) |",
                  "|---|---|---|---|"]
        for r in result["rows"]:
            c = r["compiled_median_ms"]
            lines.append(f"| {r['model']} | {c['original']:.2f} | {c['sequential']:.2f} "
                         f"({_speedup(r, 'sequential', 'compiled_paired_speedup'):.3f}x) | "
                         f"{c['saturation']:.2f} "
                         f"({_speedup(r, 'saturation', 'compiled_paired_speedup'):.3f}x) |")
    lines += ["", "Targets, from this run's eager timings:" if compiled else "Targets:", ""]
    for met, text in (result.get("targets") or targets(result)).values():
        lines.append(f"- **{'MET' if met else 'MISSED'}**: {text}")
    return "\n".join(lines)


def update_docs(result: dict, docs: Path) -> None:
    """Replace the rewrite section of ``docs`` with this result and its command."""
    s, mach = result["settings"], result["machine"]
    tag = "rewrite" + ("-compile" if s["compile"] else "") + ("-tiny" if s["size"] == "tiny" else "")
    title = ("## Tensat: equality saturation against sequential rewriting, measured on this "
             "CPU" + (", under torch.compile" if s["compile"] else "")
             + (" (tiny sizes)" if s["size"] == "tiny" else ""))
    replace_section(docs, tag,
                    f"{title}\n\n`{result['command']}` — {mach['cores']} cores ({mach['cpu']}), one pinned "
                    f"thread, torch {mach['torch']}; median of {s['repeats']} runs after "
                    f"{s['warmup']} warm-up runs, the three programs timed in turn; speed-up = "
                    f"median over rounds of the original's time over the program's in the "
                    f"same round. {_load(mach)}\n\n{to_markdown(result)}")


def _load(mach: dict) -> str:
    """What the machine's load was, as far as the run recorded it."""
    load = mach.get("load_average", [])
    if len(load) != 2:
        return "The machine's load was not recorded: compare the ratios, not the times."
    return (f"Load average (1 min) {load[0]:.1f} at the start and {load[1]:.1f} at the end of the "
            f"run, on {mach['cores']} cores: other jobs slow every program alike within a round, "
            "so compare the ratios.")
