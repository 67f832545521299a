"""Multi-chip-module partitioning (Xie et al., MLSys 2022) against its baselines
(``graphopt bench mcm``).

Every method partitions the same inference graphs (forward graphs of zoo models at batch
1: an MCM serves a stream of single inputs) onto the MCM presets' chips, side by side in
one process with the same seed; each evaluation is one repaired partition priced by
the pipeline cost (:mod:`graphopt.sim.pipeline`). Recorded per method: the best
throughput at the same number of evaluations, the seconds and evaluations it took to
come within 1% of its own best, and the fraction of proposals that were valid before
and after repair.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

from graphopt.benchmarks import geomean, replace_section, row_line, save_json
from graphopt.zoo import forward_graph

__all__ = ["GRAPHS", "METHODS", "PRESETS", "run", "time_to", "to_markdown", "update_docs"]

#: Graph names of :func:`graphopt.zoo.forward_graph`: zoo entries, and BERT-large (BERT-base's
#: family at 24 layers of 1,024).
GRAPHS = ("bert-base", "bert-large", "gpt2-small", "resnet-50", "transformer-xl-2",
          "inception-v3-b32", "rnnlm-2")
#: The MCM presets of 4, 8 and 16 chips.
PRESETS = ("mcm-ring4", "mcm-ring8", "mcm-ring16")
#: Methods compared, all at the same number of evaluations except the single-shot ones.
METHODS = ("mcm-greedy", "mcm-random", "mcm-sa", "mcm-cpsat", "mcm", "mcm-finetune")


#: Methods whose history ([evals, seconds, best interval]) gives a time to reach.
_SEARCHES = ("mcm-random", "mcm-sa", "mcm", "mcm-finetune", "mcm-one")


def time_to(history: list, target: float) -> tuple[int | None, float | None]:
    """Evaluations and seconds at which ``history``'s best interval first came within
    ``target`` (None when it never did)."""
    for evals, seconds, best in history:
        if best is not None and best <= target:
            return int(evals), float(seconds)
    return None, None


def _run_method(problem, method: str, budget: int, seed: int, params: dict) -> dict:
    from graphopt.optim.base import Budget, optimize

    kwargs = dict(params.get(method, {}))
    if method in ("mcm-finetune", "mcm-one"):
        kwargs.setdefault("progress", False)
    try:
        _, stats = optimize(problem, method, "placement", Budget(evals=budget), seed, **kwargs)
    except Exception as err:  # one failing method must not lose the rows already run
        from graphopt.errors import GraphoptError

        if not isinstance(err, GraphoptError):
            raise
        return {"error": str(err)}
    row = {k: stats.get(k) for k in ("interval", "throughput", "latency", "evals", "seconds",
                                     "valid_before_repair", "valid_after_repair", "status",
                                     "updates")}
    history = stats.get("history") or []
    if row["interval"] is not None and history:
        row["evals_to_within_1pct"], row["seconds_to_within_1pct"] = time_to(
            history, 1.01 * row["interval"])
    row["history"] = history
    return row


def run(graphs: tuple[str, ...], presets: tuple[str, ...], methods: tuple[str, ...],
        budget: int, seed: int, out: str | Path, *, params: dict | None = None,
        scratch_budget: int = 0, command: str = "", progress=None) -> dict:
    """Run every method on every graph and preset (module docstring), saving ``out`` after
    each row; with ``scratch_budget``, also train ``mcm-one`` from scratch and fine-tune
    ``mcm-finetune`` at that budget on each row, for the fine-tuning comparison. Returns
    the results dict. ``progress`` (e.g. :func:`graphopt.benchmarks.say`) is given a line
    after each row (:func:`graphopt.benchmarks.row_line`)."""
    import os

    from graphopt.hardware import load_cluster
    from graphopt.sim import Problem

    params = params or {}
    res = {"benchmark": "mcm", "command": command, "budget": budget, "seed": seed,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs)",
           "date": time.strftime("%Y-%m-%d"), "rows": []}
    # every graph and preset loaded first: a typo in the last fails before hours of rows
    loaded = [(graph, forward_graph(graph)) for graph in graphs]
    clusters = [(preset, load_cluster(preset)) for preset in presets]
    total = len(loaded) * len(clusters)
    for graph, g in loaded:
        for preset, cluster in clusters:
            row_t0 = time.perf_counter()
            problem = Problem(g, cluster)
            row = {"graph": graph, "preset": preset, "ops": g.num_nodes,
                   "chips": problem.num_devices, "methods": {}}
            for m in methods:
                t0 = time.perf_counter()
                row["methods"][m] = _run_method(problem, m, budget, seed, params)
                row["methods"][m]["wall_seconds"] = time.perf_counter() - t0
                save_json({**res, "rows": res["rows"] + [row]}, out)
            if scratch_budget:
                # the same budget for both: how soon does fine-tuning come within 1% of what
                # training from scratch ends with, against scratch's own time to get there?
                row["scratch"] = _run_method(problem, "mcm-one", scratch_budget, seed, params)
                ft = row["finetune_long"] = _run_method(problem, "mcm-finetune", scratch_budget,
                                                        seed, params)
                target = row["scratch"].get("interval")
                if target and ft.get("history"):
                    e, s = time_to(ft["history"], 1.01 * target)
                    first = row["scratch"]["history"][0]
                    row["finetune_to_scratch"] = {
                        "scratch_interval": target, "finetune_interval": ft.get("interval"),
                        "scratch_evals_to_within_1pct": row["scratch"].get("evals_to_within_1pct"),
                        "scratch_seconds_to_within_1pct": row["scratch"].get(
                            "seconds_to_within_1pct"),
                        "scratch_seconds": row["scratch"].get("seconds"),
                        # the start (first record) already within 1%: nothing to learn
                        "start_within_1pct": first[2] <= 1.01 * target,
                        "finetune_evals": e, "finetune_seconds": s}
            res["rows"].append(row)
            save_json(res, out)
            if progress:
                progress(row_line(len(res["rows"]), total, f"{graph} on {preset}",
                                  time.perf_counter() - row_t0))
    return res


def _ratio(row: dict, a: str, b: str) -> float | None:
    x, y = row["methods"].get(a, {}).get("throughput"), row["methods"].get(b, {}).get("throughput")
    return x / y if x and y else None


def to_markdown(res: dict) -> str:
    """The results as markdown tables: throughput per method, the learned policy against
    random search and SA, time to reach, valid proposals before and after repair."""
    rows = res["rows"]
    methods = [m for m in METHODS if any(m in r["methods"] for r in rows)]
    lines = [f"Command: `{res['command']}`; {res['budget']} evaluations per search method, "
             f"seed {res['seed']}; {res['machine']}, {res['date']}.", "",
             "Throughput in inputs per second (higher is better); `-`: no valid partition "
             "or not run.", "",
             "| graph | chips | " + " | ".join(methods) + " | mcm-finetune / random | "
             "mcm-finetune / sa |",
             "|---|---:|" + "---:|" * (len(methods) + 2)]
    for r in rows:
        cells = []
        for m in methods:
            t = r["methods"].get(m, {}).get("throughput")
            cells.append(f"{t:,.0f}" if t else "-")
        ratios = [_ratio(r, "mcm-finetune", b) for b in ("mcm-random", "mcm-sa")]
        lines.append(f"| {r['graph']} | {r['chips']} | " + " | ".join(cells) + " | " +
                     " | ".join(f"{x:.3f}" if x else "-" for x in ratios) + " |")
    for b in ("mcm-random", "mcm-sa"):
        xs = [x for r in rows if (x := _ratio(r, "mcm-finetune", b))]
        if xs:
            lines.append(f"\nGeometric mean of mcm-finetune / {b}: {geomean(xs):.3f} over "
                         f"{len(xs)} rows.")
    searches = [m for m in methods if m in _SEARCHES]
    if searches:
        lines += ["", "Evaluations and seconds to come within 1% of the method's own best, and "
                  "the fraction of proposals valid before → after repair:", "",
                  "| graph | chips | " + " | ".join(searches) + " |",
                  "|---|---:|" + "---|" * len(searches)]
    for r in rows if searches else ():
        cells = []
        for m in searches:
            x = r["methods"].get(m, {})
            vb, va = x.get("valid_before_repair"), x.get("valid_after_repair")
            cells.append(f"{x.get('evals_to_within_1pct', '-')} ev / "
                         f"{x.get('seconds_to_within_1pct') or 0:.1f} s; "
                         f"{vb if vb is None else f'{vb:.2f}'} → "
                         f"{va if va is None else f'{va:.2f}'}")
        lines.append(f"| {r['graph']} | {r['chips']} | " + " | ".join(cells) + " |")
    ft = [r for r in rows if "finetune_to_scratch" in r]
    if ft:
        lines += ["", "Fine-tuning against training from scratch (mcm-one), the same evaluations "
                  "each: the evaluations and seconds from-scratch training took to come within "
                  "1% of its final result, and those fine-tuning took to come within 1% of that "
                  "result; `start`: the first record (the contiguous start, or the first batch) "
                  "was already within 1%, so the row measures no learning.", "",
                  "| graph | chips | from scratch: final interval; evals, s to within 1% | "
                  "mcm-finetune: final interval; evals, s to within 1% of scratch's | "
                  "speed-up (s) | speed-up (evals) |", "|---|---:|---|---|---:|---:|"]
        for r in ft:
            f = r["finetune_to_scratch"]
            s0, s1 = f["scratch_seconds_to_within_1pct"], f["finetune_seconds"]
            e0, e1 = f.get("scratch_evals_to_within_1pct"), f["finetune_evals"]
            fi = f.get("finetune_interval")
            if f.get("start_within_1pct"):
                speed = ["start", "start"]
            else:
                speed = [f"{s0 / max(s1, 1e-9):.1f}x" if s0 and s1 is not None else "not reached",
                         f"{e0 / e1:.1f}x" if e0 and e1 else "not reached"]
            lines.append(f"| {r['graph']} | {r['chips']} | {f['scratch_interval'] * 1e3:.4f} ms; "
                         f"{e0 or '-'}, {s0 or 0:.1f} s | "
                         f"{'-' if fi is None else f'{fi * 1e3:.4f} ms'}; {e1 or '-'}, "
                         f"{'-' if s1 is None else f'{s1:.1f} s'} | " + " | ".join(speed) + " |")
    return "\n".join(lines)


def update_docs(res: dict, docs: str | Path) -> None:
    """Write :func:`to_markdown` into the ``mcm`` section of ``docs``."""
    replace_section(docs, "mcm", to_markdown(res))
