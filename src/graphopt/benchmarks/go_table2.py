"""GO's Table 2 on our zoo: every placement baseline on the 14 models the paper used.

For each row (a zoo model with the device count GO placed it on) every method gets the
same problem and the same evaluation budget; plans are simulated on a GPU cluster of
the era. The result is a JSON file with every figure and a markdown table with step
times, speed-ups over the human-expert placement, ratios to the lower bound and the
geometric means — the numbers GO's headline claims are measured against.

The learned placers (``rl-lstm``, ``hdp``) are not in the default methods: their budget
fits only the smaller rows, so they are added to chosen rows of an existing results file
(``resume=True`` with ``methods`` and ``rows``), next to the baselines measured before.

The run checkpoints after each method into its JSON file; ``resume=True`` keeps what is
there and runs only what is missing.
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Callable
from pathlib import Path

from graphopt.benchmarks import geomean, replace_section, row_line, save_json, say
from graphopt.optim.base import Budget
from graphopt.optim.compare import compare
from graphopt.sim import Problem

__all__ = ["ROWS", "METHODS", "LEARNED", "run", "to_markdown", "update_docs"]

#: GO's Table 2 rows, in the paper's order.
ROWS = ("rnnlm-2", "rnnlm-4", "rnnlm-8", "gnmt-2", "gnmt-4", "gnmt-8", "transformer-xl-2",
        "transformer-xl-4", "transformer-xl-8", "inception-v3-b32", "inception-v3-b64",
        "amoebanet", "wavenet-2x18", "wavenet-4x36")
#: The non-learned methods the table compares; ``portfolio`` (every heuristic, then
#: ``sa`` from the best, in the same budget) is the bar a user sets without learning.
METHODS = ("single", "expert", "metis", "m-etf", "m-sct", "heft", "sa", "brkga", "portfolio")
#: The learned placers GO is compared with, run on the rows where their budget fits.
LEARNED = ("rl-lstm", "hdp")
def row_entry(name: str, quick: bool = False):
    """The zoo entry of row ``name``, resized to :data:`graphopt.zoo.registry.QUICK` when
    ``quick``."""
    from graphopt.zoo import get_entry

    return get_entry(f"{name}-quick" if quick else name)


def run(cluster: str = "p100", methods: tuple[str, ...] = METHODS, budget: int = 2000,
        seed: int = 0, quick: bool = False, rows: tuple[str, ...] = ROWS,
        out: Path | None = None, resume: bool = False, progress: bool = True,
        params: dict[str, dict] | None = None, redo: tuple[str, ...] = (),
        command: str | None = None, tasks: Callable | None = None) -> dict:
    """Run the benchmark; return (and, with ``out``, checkpoint after every row) its results.

    Parameters
    ----------
    methods, rows : tuple of str
        What to run: every method on every row.
    params : dict, optional
        Constructor arguments per method (``{"rl-lstm": {"lr": 0.01}}``), recorded with
        the method's results.
    resume : bool
        Extend the results already in ``out`` instead of replacing them, when they were
        run with the same cluster, budget, seed and sizes: every row there is kept, and on
        each of ``rows`` only the methods it lacks are run (and those whose ``params``
        differ, and those named in ``redo``). So learned methods can be added to some rows
        of an earlier run of the baselines, and an interrupted run continues.
    command : str, optional
        The command line that ran this, appended to the results' ``commands``.
    tasks : callable, optional
        ``tasks(fn, jobs)`` yields ``fn(*job)`` for each job in order: each row then runs
        as one job, e.g. a Ray task (:func:`graphopt.evaluate.ray.map_tasks`); default one
        row after another here.

    Notes
    -----
    Per row and method the results hold the step time, validity, wall seconds and
    evaluations; for methods that report their convergence (learned placers, searches
    with a ``history``) also the evaluations and seconds at which their best came within
    2% of its final value.
    """
    from rich.progress import Progress

    params = {m: p for m, p in (params or {}).items() if p}
    settings = {"cluster": cluster, "budget": budget, "seed": seed, "quick": quick}
    result = {"benchmark": "go-table2", "settings": {**settings, "methods": list(methods),
                                                     "params": params},
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "python": platform.python_version()},
              "commands": [], "rows": []}
    if resume and out and Path(out).is_file():
        old = json.loads(Path(out).read_text())
        if {k: old["settings"].get(k) for k in settings} == settings:
            have = old["settings"]["methods"]
            result["settings"] = {**settings,
                                  "methods": have + [m for m in methods if m not in have],
                                  "params": {**old["settings"].get("params", {}), **params}}
            result["commands"] = old.get("commands", [])
            result["rows"] = old["rows"]
    if command:
        result["commands"].append(command)
    by_name = {r["model"]: r for r in result["rows"]}

    def todo(name: str) -> list[str]:
        have = by_name.get(name, {"methods": {}})["methods"]
        return [m for m in methods if m not in have or m in redo
                or have[m].get("params", {}) != params.get(m, {})]

    jobs = [(name, todo(name), cluster, quick, budget, seed, params) for name in rows
            if todo(name)]
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("go-table2", total=sum(len(job[1]) for job in jobs))

        def on_method(name: str, method: str) -> None:
            bar.update(task, description=f"{name}: {method}")
            bar.advance(task)

        rows_done = (tasks(_run_row, jobs) if tasks else
                     (_run_row(*job, on_method=on_method) for job in jobs))
        t0 = time.perf_counter()
        for done, ((name, run_now, *_), (head, records)) in enumerate(zip(jobs, rows_done), 1):
            row = by_name.get(name)
            if row is None:
                row = by_name[name] = {**head, "methods": {}}
                result["rows"].append(row)
            row["methods"].update(records)
            if tasks:
                bar.advance(task, len(run_now))
            if out:
                save_json(result, out)
            if progress:
                say(row_line(done, len(jobs), f"{name} ({', '.join(run_now)})",
                             time.perf_counter() - t0))
            t0 = time.perf_counter()
    order = {n: i for i, n in enumerate(ROWS)}
    result["rows"].sort(key=lambda r: order.get(r["model"], len(order)))
    result["geomean_speedup_vs_expert"] = {m: geomean(_speedups(result, m))
                                           for m in result["settings"]["methods"]}
    if out:
        save_json(result, out)
    return result


def _run_row(name: str, methods: list[str], cluster: str, quick: bool, budget: int, seed: int,
             params: dict[str, dict], on_method: Callable[[str, str], None] | None = None
             ) -> tuple[dict, dict]:
    """Run ``methods`` on row ``name``: the row's figures without its methods, and each
    method's record. A job of its own (a Ray task with ``run(tasks=...)``): it builds its
    graph and problem where it runs."""
    from graphopt.hardware import load_cluster
    from graphopt.zoo import build

    entry = row_entry(name, quick)
    t0 = time.perf_counter()
    graph = build(entry)
    build_s = time.perf_counter() - t0
    prob = Problem(graph, load_cluster(f"{cluster}:{entry.num_devices}"))
    head = {"model": name, "ops": graph.num_nodes, "devices": entry.num_devices,
            "build_seconds": build_s, "lower_bound": prob.lower_bound,
            "reported": None if entry.reported is None else {
                "go_one": entry.reported.go_one, "human_expert": entry.reported.human_expert,
                "metis": entry.reported.metis, "hdp": entry.reported.hdp}}
    records = {}
    for m in methods:
        res = compare(prob, [m], "placement", Budget(budget), seed, params=params)[0]
        records[m] = _method_record(res, params.get(m, {}))
        if on_method:
            on_method(name, m)
    return head, records


def _method_record(res, params: dict) -> dict:
    """One method's figures on one row; convergence when the method reports it."""
    from graphopt.rl.reinforce import time_to_within

    st = res.stats
    rec = {"step_time": res.step_time, "valid": res.result.valid, "reason": res.result.reason,
           "seconds": st.get("seconds"), "evals": st.get("evals", 0)}
    if "evals_to_within_2pct" in st:
        rec["evals_to_within_2pct"] = st["evals_to_within_2pct"]
        rec["seconds_to_within_2pct"] = st["seconds_to_within_2pct"]
    elif st.get("history"):
        rec["evals_to_within_2pct"], rec["seconds_to_within_2pct"] = time_to_within(
            st["history"])
    if "initial_step_time" in st:
        rec["initial_step_time"] = st["initial_step_time"]
    if params:
        rec["params"] = params
    return rec


def _speedups(result: dict, method: str) -> list[float]:
    out = []
    for row in result["rows"]:
        e, m = row["methods"].get("expert"), row["methods"].get(method)
        if e and m and e["valid"] and m["valid"]:
            out.append(e["step_time"] / m["step_time"])
    return out



def to_markdown(result: dict) -> str:
    """Step time (ms) per row and method, speed-up over ``expert`` in brackets, OOM where
    invalid and "-" where a method was not run; the ratio of the best method to the lower
    bound and the geomeans (each over the rows its method ran on). Then, for the methods
    that report convergence, a second table: evaluations and wall seconds used, and those
    needed to come within 2% of the final best."""
    methods = result["settings"]["methods"]
    head = "| model | ops | dev | " + " | ".join(methods) + " | best / bound |"
    lines = [head, "|" + "---|" * (len(methods) + 4)]
    for row in result["rows"]:
        e = row["methods"].get("expert")
        cells, best = [], math.inf
        for m in methods:
            r = row["methods"].get(m)
            if r is None:
                cells.append("-")
                continue
            if not r["valid"]:
                cells.append("OOM" if r["reason"].startswith("OOM") else "invalid")
                continue
            best = min(best, r["step_time"])
            cells.append(f"{r['step_time'] * 1e3:.2f}{_vs(e, r, m)}")
        ratio = f"{best / row['lower_bound']:.2f}" if row["lower_bound"] > 0 and best < math.inf \
            else "-"
        lines.append(f"| {row['model']} | {row['ops']:,} | {row['devices']} | "
                     + " | ".join(cells) + f" | {ratio} |")
    gm, rows = result.get("geomean_speedup_vs_expert") or {}, len(result["rows"])
    counts = {m: len(_speedups(result, m)) for m in methods}
    lines.append("| **geomean vs expert** | | | " + " | ".join(
        "-" if not gm.get(m) else f"{gm[m]:.3f}x" if counts[m] == rows
        else f"{gm[m]:.3f}x ({counts[m]} rows)" for m in methods) + " | |")
    conv = [m for m in methods
            if any("evals_to_within_2pct" in r["methods"].get(m, {}) for r in result["rows"])]
    if conv:
        lines += ["", "| model | method | step ms | evals | seconds | evals to 2% | "
                      "seconds to 2% |", "|---|---|---|---|---|---|---|"]
        for row in result["rows"]:
            e = row["methods"].get("expert")
            for m in conv:
                r = row["methods"].get(m)
                if r is None or "evals_to_within_2pct" not in r:
                    continue
                step = f"{r['step_time'] * 1e3:.2f}{_vs(e, r, m)}" if r["valid"] else "invalid"
                e2, s2 = r["evals_to_within_2pct"], r["seconds_to_within_2pct"]
                lines.append(f"| {row['model']} | {m} | {step} | {r['evals']:,} | "
                             f"{r['seconds']:.1f} | {'-' if e2 is None else f'{e2:,}'} | "
                             f"{'-' if s2 is None else f'{s2:.1f}'} |")
    return "\n".join(lines)


def _vs(expert: dict | None, r: dict, method: str) -> str:
    """`` (1.23x)``: the speed-up of ``r`` over a valid ``expert``; "" for expert itself."""
    if not expert or not expert["valid"] or method == "expert":
        return ""
    return f" ({expert['step_time'] / r['step_time']:.2f}x)"


def update_docs(result: dict, docs: Path) -> None:
    """Replace the go-table2 section of ``docs`` (between its markers) with this result,
    headed by the commands that produced it."""
    s = result["settings"]
    commands = "; then ".join(f"`{c}`" for c in result.get("commands", [])) or "`graphopt bench go-table2`"
    replace_section(docs, "go-table2-quick" if s["quick"] else "go-table2",
                    f"{commands} — cluster `{s['cluster']}`, budget {s['budget']} evaluations "
                    f"per search or learned method, seed {s['seed']}; step times in ms, speed-up "
                    f"over `expert` in brackets; \"-\": not run on that row.\n\n"
                    f"{to_markdown(result)}")
