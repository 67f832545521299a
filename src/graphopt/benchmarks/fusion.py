"""Fusion and scheduling decisions that matter (``graphopt bench fusion``).

Three measurements, each run side by side in one process, same problems, same seed:

1. **GO's Table 3** (fusion): on the NMT, RNNLM and Transformer-XL rows, with the
   ``expert`` placement and first-ready-first-run order fixed, the step time with fusion
   off, with XLA's default fusion, with ``sa`` searching the fusion priorities from the
   default, and with GO (``go-one``: PPO on the graph, fusion head only, one decision
   per op: :data:`GO_FUSION`) at the same number of evaluations. Speed-ups: default
   over none, ``sa`` over default, GO over none and over default.
2. **Scheduling under tight memory**: the ``expert`` placement and XLA's default fusion
   fixed; every device given a fraction of the peak memory the first-ready-first-run
   order reaches there above the device's persistent bytes (weights and optimizer
   state, which no order changes). Against each
   other: that order (``fifo``), critical-path list scheduling, XLA's memory schedulers
   (``xla-memory``: the best of list, DFS and post-order by peak memory), ``sa`` and GO
   on the scheduling task, and ``sa`` started from XLA's schedule. Each row says whether
   the plan fits, its step time and peak.
3. **Multi-task**: placement, scheduling and fusion searched jointly against each alone
   and against the compiler defaults (one device, first ready first run, XLA's fusion),
   same method and evaluations for every task set.

GO (``go-one``) joins the first two with ``learned=True``; it is off by default since
PPO on every row takes far longer than the searches.

Results go to a JSON file (checkpointed after each row) and a section of
docs/benchmarks.md.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

import numpy as np

from graphopt.benchmarks import geomean, replace_section, row_line, save_json, say
from graphopt.benchmarks.go_table2 import row_entry
from graphopt.optim.base import Budget, optimize
from graphopt.sim import Plan, Problem, simulate

__all__ = ["GO_FUSION", "MEMORY_ROWS", "MULTITASK_ROWS", "TABLE3_ROWS", "bench_problem", "run", "to_markdown",
           "update_docs"]

#: GO's Table 3: NMT (GNMT), RNNLM and Transformer-XL on 2 to 8 devices.
TABLE3_ROWS = ("gnmt-2", "gnmt-4", "gnmt-8", "rnnlm-4", "rnnlm-8", "transformer-xl-2",
               "transformer-xl-4", "transformer-xl-8")
#: GO's settings on Table 3: a fusion priority per op rather than per colocation group,
#: which binds up to 28 fusion choices into one (a group at level 0 unfuses them all);
#: 1.03-1.11x over the default on three rows at 500 evaluations against 1.00-1.01x per
#: group (bench/go_fusion_ablation.py; docs/go.md, "The fusion head").
GO_FUSION = {"units": "ops"}
#: Rows of the tight-memory scheduling comparison.
MEMORY_ROWS = ("gnmt-2", "transformer-xl-2", "inception-v3-b32", "wavenet-2x18")
#: Memory fractions of the tight-memory comparison.
FRACTIONS = (0.95, 0.9)
#: Scheduling methods compared under tight memory (GO joins as ``go-one``);
#: ``xla-memory+sa`` is ``sa`` started from XLA's memory schedule.
SCHEDULERS = ("fifo", "critical-path", "xla-memory", "sa", "xla-memory+sa")
#: Rows of the multi-task comparison.
MULTITASK_ROWS = ("rnnlm-2", "gnmt-2", "transformer-xl-2", "transformer-xl-4",
                  "inception-v3-b32", "wavenet-2x18")
#: Task sets of the multi-task comparison: each alone, then all three.
TASKS = ("placement", "scheduling", "fusion", "placement,scheduling,fusion")


def bench_problem(name: str, cluster: str, quick: bool) -> Problem:
    from graphopt.hardware import load_cluster
    from graphopt.zoo import build

    entry = row_entry(name, quick)
    return Problem(build(entry), load_cluster(f"{cluster}:{entry.num_devices}"))


def _tight(prob: Problem, plan: Plan, fraction: float) -> Problem:
    """``prob`` with each device's memory cut to its persistent bytes under ``plan`` plus
    ``fraction`` of what the rest of ``plan``'s peak there is (what an order can change)."""
    from dataclasses import replace

    from graphopt.hardware import Cluster

    r = simulate(prob, plan)
    place = np.zeros(prob.num_nodes, np.int64) if plan.placement is None else plan.placement
    keep = np.bincount(place, weights=prob.persistent, minlength=prob.num_devices)
    cap = keep + fraction * (r.peak_memory - keep)
    c = prob.cluster
    devices = tuple(replace(d, memory=max(float(m), 1.0)) for d, m in zip(c.devices, cap))
    return Problem(prob.graph, Cluster(c.name, devices, c.bandwidth, c.latency, dict(c.meta),
                                          c.overlap_latency))


def _fig(prob: Problem, plan: Plan, stats: dict | None = None) -> dict:
    r = simulate(prob, plan)
    return {"step_time": r.step_time, "valid": r.valid, "reason": r.reason,
            "peak": float(r.peak_memory.max()), "kernels": r.num_kernels,
            "evals": (stats or {}).get("evals", 0), "seconds": (stats or {}).get("seconds", 0.0)}


def run(cluster: str = "p100", budget: int = 500, seed: int = 0, quick: bool = True,
        table3_rows: tuple[str, ...] = TABLE3_ROWS, memory_rows: tuple[str, ...] = MEMORY_ROWS,
        fractions: tuple[float, ...] = FRACTIONS, multitask_rows: tuple[str, ...] = MULTITASK_ROWS,
        method: str = "sa", learned: bool = False, out: Path | None = None,
        progress: bool = True) -> dict:
    """Run both measurements; return (and, with ``out``, checkpoint after each row) them."""
    from rich.progress import Progress

    result = {"benchmark": "fusion", "settings": {
        "cluster": cluster, "budget": budget, "seed": seed, "quick": quick,
        "table3_rows": list(table3_rows), "memory_rows": list(memory_rows),
        "fractions": list(fractions), "multitask_rows": list(multitask_rows),
        "method": method, "learned": learned},
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "python": platform.python_version()},
        "table3": [], "memory": [], "multitask": []}
    jobs = ([("table3", r) for r in table3_rows] + [("memory", r) for r in memory_rows]
            + [("multitask", r) for r in multitask_rows])
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("bench fusion", total=len(jobs))
        for done, (part, name) in enumerate(jobs, 1):
            bar.update(task, description=f"{part} {name}")
            t0 = time.perf_counter()
            prob = bench_problem(name, cluster, quick)
            expert, _ = optimize(prob, "expert", "placement", Budget(budget), seed)
            base = Plan(placement=expert.placement)
            row = {"model": name, "ops": prob.num_nodes, "devices": prob.num_devices}
            if part == "table3":
                n = prob.num_nodes
                row["none"] = _fig(prob, base.replace(fusion=np.zeros(n)))
                row["default"] = _fig(prob, base)
                row["choices"] = int(prob.fusion_choice.sum())
                for m in ("sa", *(("go-one",) if learned else ())):
                    plan, st = optimize(prob, m, "fusion", Budget(budget), seed, init=base,
                                        **(GO_FUSION if m == "go-one" else {}))
                    row[m] = _fig(prob, plan, st)
            elif part == "multitask":
                row["default"] = _fig(prob, Plan())
                row["tasks"] = {}
                for t in TASKS:
                    plan, st = optimize(prob, method, t, Budget(budget), seed)
                    row["tasks"][t] = _fig(prob, plan, st)
            else:
                row["peak_fifo"] = float(simulate(prob, base).peak_memory.max())
                row["fractions"] = {}
                for f in fractions:
                    tight = _tight(prob, base, f)
                    cells = {"fifo": _fig(tight, base)}
                    for m in SCHEDULERS[1:] + (("go-one",) if learned else ()):
                        first, _, m_run = m.partition("+")
                        init = base
                        if m_run:  # the search starts from the heuristic's plan
                            init, _ = optimize(tight, first, "scheduling", Budget(budget), seed,
                                               init=base)
                        plan, st = optimize(tight, m_run or m, "scheduling", Budget(budget),
                                            seed, init=init)
                        cells[m] = _fig(tight, plan, st)
                    row["fractions"][str(f)] = cells
            result[part].append(row)
            if out:
                save_json(result, out)
            bar.advance(task)
            if progress:
                say(row_line(done, len(jobs), f"{part} {name}", time.perf_counter() - t0))
    return result


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def to_markdown(result: dict) -> str:
    """The two tables of the benchmark."""
    s = result["settings"]
    go = "go-one" if s["learned"] else None
    out = [f"**GO's Table 3: fusion** (`expert` placement, first ready first run; step time "
           f"in ms; `sa` and GO with {s['budget']} evaluations each; GO is `go-one` on the "
           "fusion task, a fusion priority per op, from XLA's default):", "",
           "| model | ops | dev | fusion choices | none | XLA default | sa | GO | default vs "
           "none | sa vs default | GO vs none | GO vs default | GO vs sa |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {k: [] for k in ("dn", "sd", "gn", "gd", "gs")}
    for row in result["table3"]:
        n, d, sa = row["none"]["step_time"], row["default"]["step_time"], row["sa"]["step_time"]
        g = row[go]["step_time"] if go else None
        cells = {"dn": n / d, "sd": d / sa}
        if g:
            cells |= {"gn": n / g, "gd": d / g, "gs": sa / g}
        for k, v in cells.items():
            ratios[k].append(v)
        out.append(f"| {row['model']} | {row['ops']:,} | {row['devices']} | {row['choices']} | "
                   f"{_ms(n)} | {_ms(d)} | {_ms(sa)} | {_ms(g)} | "
                   + " | ".join(f"{cells[k]:.4f}x" if k in cells else "-"
                                for k in ("dn", "sd", "gn", "gd", "gs")) + " |")
    out.append("| **geomean** | | | | | | | | " + " | ".join(
        f"{geomean(v):.4f}x" if v else "-" for v in ratios.values()) + " |")
    methods = ["fifo", *SCHEDULERS[1:], *((go,) if go else ())]
    out += ["", "**Scheduling under tight memory** (`expert` placement and XLA's fusion fixed; "
            "every device keeps its persistent bytes plus the fraction of the rest of the peak "
            "the first-ready order reaches there; step time in ms, OOM where the plan does not "
            "fit, in brackets the highest peak as a fraction of the first-ready one):", "",
            "| model | dev | fraction | " + " | ".join(methods) + " |",
            "|---|---|---|" + "---|" * len(methods)]
    fits = dict.fromkeys(methods, 0)
    total = 0
    for row in result["memory"]:
        for f, cells in row["fractions"].items():
            total += 1
            shown = []
            for m in methods:
                c = cells[m]
                fits[m] += c["valid"]
                shown.append((_ms(c["step_time"]) if c["valid"] else "OOM")
                             + f" ({c['peak'] / row['peak_fifo']:.2f})")
            out.append(f"| {row['model']} | {row['devices']} | {f} | " + " | ".join(shown) + " |")
    out.append("| **plans that fit** | | | " + " | ".join(f"{fits[m]} / {total}" for m in methods)
               + " |")
    tasks = result["multitask"]
    if tasks:
        out += ["", f"**Multi-task** (`{s['method']}` with {s['budget']} evaluations per task "
                "set, from the compiler defaults: one device, first ready first run, XLA's "
                "fusion; step time in ms, speed-up over the defaults in brackets):", "",
                "| model | dev | defaults | " + " | ".join(TASKS) + " | joint vs best alone |",
                "|---|---|---|" + "---|" * (len(TASKS) + 1)]
        joint_vs_default, joint_vs_best = [], []
        for row in tasks:
            d = row["default"]["step_time"] if row["default"]["valid"] else None
            t = {k: (c["step_time"] if c["valid"] else None) for k, c in row["tasks"].items()}
            cells = [("OOM" if t[k] is None else _ms(t[k]) + (f" ({d / t[k]:.2f}x)" if d else ""))
                     for k in TASKS]
            alone = [t[k] for k in TASKS[:-1] if t[k]]
            j = t[TASKS[-1]]
            vs = f"{min(alone) / j:.3f}x" if alone and j else "-"
            if alone and j:
                joint_vs_best.append(min(alone) / j)
            if d and j:
                joint_vs_default.append(d / j)
            out.append(f"| {row['model']} | {row['devices']} | {_ms(d)} | " + " | ".join(cells)
                       + f" | {vs} |")
        gd, gb = geomean(joint_vs_default), geomean(joint_vs_best)
        out.append("| **geomean** | | | | | | " + (f"{gd:.3f}x" if gd else "-") + " | "
                   + (f"{gb:.3f}x" if gb else "-") + " |")
    return "\n".join(out)


def update_docs(result: dict, docs: Path, command: str) -> None:
    """Replace the ``fusion`` section of ``docs`` with this result."""
    s = result["settings"]
    replace_section(docs, "fusion", "## Fusion and scheduling decisions (`graphopt bench "
                    f"fusion`)\n\n`{command}` — cluster `{s['cluster']}`"
                    f"{' (quick models)' if s['quick'] else ''}, seed {s['seed']}; results in "
                    "`bench/results/fusion.json`. Simulated step times (deterministic: the "
                    "machine's load changes only how long the searches took). What each rule "
                    "of the fusion pass is: docs/simulator.md.\n\n" + to_markdown(result))
