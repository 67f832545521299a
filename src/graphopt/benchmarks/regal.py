"""REGAL's Table 1 on our graphs (``graphopt bench regal``): peak memory (then step time)
on held-out graphs, two devices, placement and scheduling, every method at equal
evaluations.

Rows are :data:`graphopt.optim.learned.regal.method.TEST_GRAPHS` (never trained on). Methods:

- **GP+DFS**: a METIS partition, then XLA's DFS memory schedule (a few simulations);
- **XLA memory schedulers**: the METIS partition, then the best of XLA's list, DFS and
  post-order schedulers by peak memory;
- **local search**, **BRKGA-5K** (uniform, the registry's ``brkga``), **tuned BRKGA**
  (population and fractions chosen on training graphs by :func:`tune_brkga`), **REGAL
  untrained** (uniform BRKGA on REGAL's chromosome), **layer-split BRKGA** (REGAL's
  chromosome with a hand-written prior, :func:`layer_split_prior`: the bar the policy must
  clear) and **REGAL** (the shipped policy), all at the same evaluations;
- **REGAL elite bias**: a policy trained with ``--elite-bias``, run with ``elite_bias``
  (REGAL's ablation), and **REGAL elite-bias policy (bias off)**: the same policy without
  it (its Beta distributions only); only when :func:`run` is given such a policy, since the
  shipped one was trained without elite bias (its offsets are zero: the rows would be
  REGAL's);
- **CP-SAT** (the registry's ``cpsat``, minimising the objective in its own model, which
  has no fusion; one seed), on graphs of at most :data:`CPSAT_MAX_OPS` ops only, with a
  time limit of :data:`CPSAT_SECONDS`: "-" elsewhere, and its means are over the graphs
  it ran.

Each search runs with ``seeds`` seeds; a row's value on a graph is the median over them.
Columns: mean % improvement over BRKGA-5K (positive: lower than BRKGA), mean % gap from
the best value any method found on the graph, and the median wall time of one run.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path

import numpy as np

from graphopt.benchmarks import replace_section, row_line, save_json
from graphopt.errors import BadFileError, UsageError
from graphopt.optim.base import Budget, optimize
from graphopt.optim.heuristics.schedulers import dfs_memory
from graphopt.optim.learned.regal.method import (TEST_GRAPHS, TRAIN_CORPUS, RegalSpace, _params, _prior,
                                          load_corpus, load_regal_policy, regal_value,
                                          trained_prior)
from graphopt.optim.learned.regal.train import RegalConfig, regal_inputs
from graphopt.sim import Problem, simulate

__all__ = ["ELITE_BIAS", "ELITE_BIAS_OFF", "ELITE_BIAS_ROWS", "METHODS", "TUNING_GRID", "run",
           "summary", "targets", "to_markdown", "train_check", "tune_brkga", "update_docs"]

TASK = "placement,scheduling"

#: Row label → (registered method, its parameters); ``None``: a two-step heuristic here.
METHODS: dict[str, tuple[str | None, dict]] = {
    "CP-SAT": ("cpsat", {}),
    "GP+DFS": (None, {}),
    "XLA memory schedulers": (None, {}),
    "local search": ("local-search", {}),
    "BRKGA-5K": ("brkga", {}),
    "tuned BRKGA": ("brkga", {}),
    "REGAL untrained": ("regal", {"checkpoint": "untrained"}),
    "layer-split BRKGA": ("regal", {"checkpoint": "untrained", "prior": "layer-split"}),
    "REGAL": ("regal", {}),
    "REGAL elite bias": ("regal", {"elite_bias": True}),
    "REGAL elite-bias policy (bias off)": ("regal", {"elite_bias": False}),
}

#: CP-SAT runs on graphs of at most this many ops (REGAL's Table 1: small graphs only), for
#: at most this many seconds each.
CPSAT_MAX_OPS, CPSAT_SECONDS = 200, 60.0

#: The rows that run the policy :func:`run` takes as ``elite_bias_policy``: with elite bias
#: (REGAL's ablation) and without (what its offsets add, the policy's Betas held fixed).
ELITE_BIAS, ELITE_BIAS_OFF = "REGAL elite bias", "REGAL elite-bias policy (bias off)"
ELITE_BIAS_ROWS = (ELITE_BIAS, ELITE_BIAS_OFF)

#: BRKGA settings tried by :func:`tune_brkga`: population, elite and mutant fractions,
#: inheritance (Gonçalves & Resende's recommended ranges).
TUNING_GRID = (
    {"population": 100, "elite_fraction": 0.2, "mutant_fraction": 0.1, "inheritance": 0.7},
    {"population": 50, "elite_fraction": 0.2, "mutant_fraction": 0.1, "inheritance": 0.7},
    {"population": 200, "elite_fraction": 0.2, "mutant_fraction": 0.1, "inheritance": 0.7},
    {"population": 100, "elite_fraction": 0.1, "mutant_fraction": 0.2, "inheritance": 0.7},
    {"population": 100, "elite_fraction": 0.25, "mutant_fraction": 0.15, "inheritance": 0.8},
    {"population": 100, "elite_fraction": 0.15, "mutant_fraction": 0.3, "inheritance": 0.6},
)

#: Training graphs :func:`tune_brkga` scores the grid on.
TUNING_GRAPHS = ("zoo:rnnlm-2-quick", "zoo:gpt2-small-quick", "layered:16x10:2",
                 "layered:24x8:3")


def _value(res, objective: str) -> float:
    return float(res.peak_memory.max() if objective == "memory" else res.step_time)


def tune_brkga(objective: str, evals: int, seed: int = 0) -> tuple[dict, list]:
    """The setting of :data:`TUNING_GRID` with the lowest mean value relative to the first
    (BRKGA's defaults) on :data:`TUNING_GRAPHS` (training graphs only), and every
    setting's mean ratio."""
    probs = load_corpus(TUNING_GRAPHS)
    scores = []
    for params in TUNING_GRID:
        scores.append([optimize(p, "brkga", TASK, Budget(evals, objective=objective), seed,
                                **params)[1]["value"] for p in probs])
    base = np.array(scores[0])
    ratios = [float(np.mean(np.array(s) / base)) for s in scores]
    return dict(TUNING_GRID[int(np.argmin(ratios))]), ratios


def _gp(problem: Problem, objective: str, dfs_only: bool, seed: int) -> tuple[float, int]:
    """GP+DFS or METIS + XLA's memory schedulers: (value, simulations)."""
    place, st = optimize(problem, "metis", "placement", Budget(50), seed)
    if dfs_only:
        res = simulate(problem, place.replace(priority=dfs_memory(problem, place.placement)))
        return _value(res, objective), st["evals"] + 1
    plan, st2 = optimize(problem, "xla-memory", "scheduling", Budget(3), seed, init=place)
    return _value(simulate(problem, plan), objective), st["evals"] + st2["evals"]


def run(objectives: tuple[str, ...] = ("memory", "runtime"), evals: int = 5000,
        seeds: int = 3, graphs: tuple[str, ...] = TEST_GRAPHS,
        methods: tuple[str, ...] = tuple(m for m in METHODS if m not in ELITE_BIAS_ROWS),
        out: Path | None = None, on_step=None, elite_bias_policy: Path | None = None,
        progress=None) -> dict:
    """Run every method of ``methods`` on ``graphs`` for each objective; write ``out``.
    ``on_step`` is told what starts; ``progress`` (e.g. :func:`graphopt.benchmarks.say`)
    is given a line after each graph's row (:func:`graphopt.benchmarks.row_line`).

    ``elite_bias_policy`` is the folder of a policy trained with ``--elite-bias``, which the
    :data:`ELITE_BIAS_ROWS` run (and need).

    Returns a JSON-ready dict: ``settings``, ``tuned`` (per objective, the chosen BRKGA
    setting and the grid's ratios) and ``results[objective][graph][method]`` with
    ``values`` (one per seed), ``value`` (their median), ``seconds`` (median per run) and
    ``evals``.

    Raises
    ------
    GraphoptError
        A row of :data:`ELITE_BIAS_ROWS` without ``elite_bias_policy``, or with a policy
        trained without elite bias.
    """
    eb_policy = (_elite_bias_policy(elite_bias_policy)
                 if any(m in ELITE_BIAS_ROWS for m in methods) else None)
    probs = load_corpus(list(graphs))
    result: dict = {"settings": {"objectives": list(objectives), "evals": evals, "seeds": seeds,
                                 "task": TASK, "cluster": probs[0].cluster.name,
                                 "graphs": {p.graph.name: p.num_nodes for p in probs},
                                 "train_corpus": list(TRAIN_CORPUS),
                                 "machine": f"{platform.machine()}, {platform.processor() or '?'}, "
                                            "2 cores shared with other jobs"},
                    "tuned": {}, "results": {}}
    if eb_policy:
        result["settings"]["elite_bias_policy"] = eb_policy
    for objective in objectives:
        tuned: dict = {}
        if "tuned BRKGA" in methods:
            if on_step:
                on_step(f"tuning BRKGA for {objective} on training graphs")
            tuned, ratios = tune_brkga(objective, evals)
            result["tuned"][objective] = {"params": tuned, "grid": list(TUNING_GRID),
                                          "mean_ratio_to_default": ratios}
        rows = result["results"][objective] = {}
        for p in probs:
            row_t0 = time.perf_counter()
            row = rows[p.graph.name] = {}
            for label in methods:
                name, params = METHODS[label]
                if on_step:
                    on_step(f"{objective}: {label} on {p.graph.name}")
                if name == "cpsat":
                    row[label] = _cpsat(p, objective) if p.num_nodes <= CPSAT_MAX_OPS else None
                    continue
                if name is None:
                    t0 = time.perf_counter()
                    v, n = _gp(p, objective, label == "GP+DFS", 0)
                    row[label] = {"values": [v], "value": v, "seconds": time.perf_counter() - t0,
                                  "evals": n}
                    continue
                params = {**params, **(tuned if label == "tuned BRKGA" else {}),
                          **({"checkpoint": eb_policy["path"]} if label in ELITE_BIAS_ROWS else {})}
                vals, secs = [], []
                for s in range(1 if name == "local-search" and seeds > 1 else seeds):
                    t0 = time.perf_counter()
                    plan, st = optimize(p, name, TASK, Budget(evals, objective=objective), s,
                                        **params)
                    secs.append(time.perf_counter() - t0)
                    vals.append(_value(simulate(p, plan), objective))
                row[label] = {"values": vals, "value": float(np.median(vals)),
                              "seconds": float(np.median(secs)), "evals": st["evals"]}
            if out:
                save_json(result, out)
            if progress:
                done = sum(len(r) for r in result["results"].values())
                progress(row_line(done, len(objectives) * len(probs),
                                  f"{objective} {p.graph.name}", time.perf_counter() - row_t0))
    return result


def _cpsat(problem: Problem, objective: str) -> dict:
    """CP-SAT on ``problem`` with :data:`CPSAT_SECONDS` of solving, one seed: a row of
    :func:`run`, with the solver's status."""
    t0 = time.perf_counter()
    plan, st = optimize(problem, "cpsat", TASK, Budget(10, objective=objective), 0,
                        time_limit=CPSAT_SECONDS)
    v = _value(simulate(problem, plan), objective)
    return {"values": [v], "value": v, "seconds": time.perf_counter() - t0, "evals": st["evals"],
            "status": st["status"]}


def _elite_bias_policy(folder: Path | None) -> dict:
    """Where the policy of :data:`ELITE_BIAS_ROWS` is and how it was made (its command and
    updates), refusing none or one trained without elite bias (its offsets are zero)."""
    if folder is None:
        raise UsageError(f"the rows {', '.join(ELITE_BIAS_ROWS)} need a policy trained with "
                         "--elite-bias (graphopt bench regal --elite-bias-policy FOLDER)")
    _, info = load_regal_policy(folder)
    if not info.get("config", {}).get("elite_bias"):
        raise BadFileError(f"{folder}: policy trained without --elite-bias (its elite-bias "
                           f"offsets are zero); the rows {', '.join(ELITE_BIAS_ROWS)} need one "
                           "trained with it")
    return {"path": str(folder), "command": info.get("command"), "updates": info.get("updates")}


def train_check(evals: int | None = None, seeds: int = 5, objective: str = "memory") -> dict:
    """Did training learn what it was rewarded for? On every training graph, at the
    training budget (``evals``; None: the shipped policy's), the shipped policy's BRKGA
    against uniform BRKGA on the same chromosome (the training reward's reference), medians
    over ``seeds`` seeds: per graph ``regal``, ``uniform`` (values per seed) and
    ``improvement_pct``."""
    import torch

    head, info = load_regal_policy(None)
    evals = evals or info.get("config", {}).get("evals", RegalConfig().evals)
    task = frozenset({"placement", "scheduling"})
    out = {}
    for spec, p in zip(TRAIN_CORPUS, load_corpus(TRAIN_CORPUS)):
        with torch.no_grad():
            space = RegalSpace(p, task)
            params = _params(head, head(*regal_inputs(p)), space, False,
                             _prior(space, trained_prior(info)))
        r = [regal_value(p, params, s, evals, objective, task) for s in range(seeds)]
        u = [regal_value(p, None, s, evals, objective, task) for s in range(seeds)]
        out[spec] = {"regal": r, "uniform": u, "improvement_pct": float(
            100 * (np.median(u) - np.median(r)) / np.median(u))}
    return {"evals": evals, "seeds": seeds, "objective": objective, "graphs": out}


def summary(result: dict, objective: str) -> dict[str, dict]:
    """Per method: mean % improvement over BRKGA-5K, mean % gap from the best known,
    median seconds, the median over graphs of its seconds over BRKGA-5K's, and wins against
    BRKGA-5K (graphs where its median is lower), over the ``graphs`` it ran on (CP-SAT:
    the small ones)."""
    rows = result["results"][objective]
    out: dict[str, dict] = {}
    methods = list(next(iter(rows.values())))
    for m in methods:
        imp, gap, sec, ratio, wins, ran = [], [], [], [], 0, 0
        for row in rows.values():
            if row[m] is None:
                continue
            ran += 1
            best = min(min(r["values"]) for r in row.values() if r is not None)
            base = row["BRKGA-5K"]["value"] if "BRKGA-5K" in row else None
            v = row[m]["value"]
            if base:
                imp.append(100 * (base - v) / base)
                ratio.append(row[m]["seconds"] / row["BRKGA-5K"]["seconds"])
                wins += v < base
            gap.append(100 * (v - best) / best)
            sec.append(row[m]["seconds"])
        if not ran:  # CP-SAT on graphs all larger than it takes
            out[m] = {"improvement_pct": None, "gap_pct": None, "seconds": None,
                      "time_vs_brkga": None, "wins": 0, "graphs": 0}
            continue
        out[m] = {"improvement_pct": float(np.mean(imp)) if imp else None,
                  "gap_pct": float(np.mean(gap)), "seconds": float(np.median(sec)),
                  "time_vs_brkga": float(np.median(ratio)) if ratio else None,
                  "wins": wins, "graphs": ran}
    return out


def to_markdown(result: dict) -> str:
    """The tables of ``result``: one per objective, then per-graph values."""
    s = result["settings"]
    parts = []
    for objective in s["objectives"]:
        if objective not in result["results"]:
            continue
        unit = "MiB peak" if objective == "memory" else "ms step"
        scale = 2**20 if objective == "memory" else 1e-3
        summ = summary(result, objective)
        lines = [f"**Objective {objective}** ({len(result['results'][objective])} held-out graphs, "
                 f"{s['evals']:,} evaluations, median of {s['seeds']} seeds):", "",
                 "| method | % improvement over BRKGA-5K | % gap from best known | "
                 "wins vs BRKGA-5K | s per run (median) | time / BRKGA-5K's (median) |",
                 "|---|---:|---:|---:|---:|---:|"]
        for m, r in summ.items():
            imp = "-" if r["improvement_pct"] is None else f"{r['improvement_pct']:+.2f}"
            tr = "-" if r["time_vs_brkga"] is None else f"{r['time_vs_brkga']:.2f}"
            if not r["graphs"]:
                lines.append(f"| {m} | - | - | - | - | - |")
                continue
            lines.append(f"| {m} | {imp} | {r['gap_pct']:.2f} | {r['wins']}/{r['graphs']} | "
                         f"{r['seconds']:.2f} | {tr} |")
        rows = result["results"][objective]
        for other, what in (("REGAL untrained", "the same chromosome and inheritance, uniform "
                                                "distributions"),
                            ("layer-split BRKGA", "the prior the policy's distributions multiply, "
                                                  "alone: what training added")):
            if all("REGAL" in r and other in r for r in rows.values()):
                d = [100 * (r[other]["value"] - r["REGAL"]["value"]) / r[other]["value"]
                     for r in rows.values()]
                lines += ["", f"REGAL against {other} ({what}): mean {np.mean(d):+.2f}%, better "
                              f"on {sum(x > 0 for x in d)} of {len(d)}."]
        if "CP-SAT" in summ:
            lines += ["", f"CP-SAT: on graphs of at most {CPSAT_MAX_OPS} ops only "
                          f"({summ['CP-SAT']['graphs']} of {len(rows)}), {CPSAT_SECONDS:g} s "
                          "each, one seed; its columns are over those graphs."]
        if all(ELITE_BIAS in r and "BRKGA-5K" in r for r in rows.values()):
            lines += ["", _elite_bias_markdown(result, objective)]
        if objective in result.get("tuned", {}):
            lines += ["", f"tuned BRKGA: {result['tuned'][objective]['params']}"]
        methods = list(summ)
        lines += ["", "| graph (ops) | " + " | ".join(methods) + " |",
                  "|---|" + "---:|" * len(methods)]
        for g, row in result["results"][objective].items():
            lines.append(f"| {g} ({s['graphs'][g]}) | " + " | ".join(
                "-" if row[m] is None else f"{row[m]['value'] / scale:.4g}" for m in methods)
                + " |")
        lines += ["", f"Values in {unit}."]
        parts.append("\n".join(lines))
    if "train_check" in result:
        tc = result["train_check"]
        imps = [g["improvement_pct"] for g in tc["graphs"].values()]
        lines = [f"**On the training graphs** (what the reward measured: the shipped policy "
                 f"against uniform BRKGA, Beta(1, 1) and inheritance 0.7, on REGAL's "
                 f"chromosome, {tc['evals']:,} evaluations, "
                 f"median of {tc['seeds']} seeds, objective {tc['objective']}): mean "
                 f"{np.mean(imps):+.2f}%, better on {sum(i > 0 for i in imps)} of {len(imps)}.",
                 "", "| training graph | % improvement |", "|---|---:|"]
        lines += [f"| {g} | {v['improvement_pct']:+.2f} |" for g, v in tc["graphs"].items()]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _elite_bias_markdown(result: dict, objective: str) -> str:
    """Per graph and on the mean, every row's % improvement over BRKGA-5K, and the
    elite-bias row against REGAL and against its own policy with elite bias off (REGAL's
    ablation)."""
    rows = result["results"][objective]
    pol = result["settings"]["elite_bias_policy"]
    methods = [m for m in next(iter(rows.values())) if m != "BRKGA-5K"]
    imp = {g: {m: 100 * (row["BRKGA-5K"]["value"] - row[m]["value"]) / row["BRKGA-5K"]["value"]
               for m in methods} for g, row in rows.items()}
    lines = [f"Elite bias ({ELITE_BIAS}: the policy in `{pol['path']}`, made by "
             f"`{pol['command']}`, {pol['updates']} updates, run with elite_bias=true; "
             f"{ELITE_BIAS_OFF}: the same policy without), "
             f"% improvement over BRKGA-5K (positive: lower than BRKGA-5K):", "",
             "| graph | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
    lines += [f"| {g} | " + " | ".join(f"{v[m]:+.2f}" for m in methods) + " |"
              for g, v in imp.items()]
    lines.append("| **mean** | " + " | ".join(
        f"**{np.mean([v[m] for v in imp.values()]):+.2f}**" for m in methods) + " |")
    for other, what in (("REGAL", "two policies, each run as it was trained, with and without "
                                  "elite bias"),
                        (ELITE_BIAS_OFF, "one policy, its elite bias on and off: what the "
                                         "offsets add")):
        if other in methods:
            d = [100 * (row[other]["value"] - row[ELITE_BIAS]["value"]) / row[other]["value"]
                 for row in rows.values()]
            lines += ["", f"{ELITE_BIAS} against {other}, {what} (positive: elite bias lowers "
                          f"the value): mean {np.mean(d):+.2f}%, better on "
                          f"{sum(x > 0 for x in d)} of {len(d)}, worse on {sum(x < 0 for x in d)}."]
    return "\n".join(lines)


def targets(result: dict) -> str:
    """The issue's targets against this result: REGAL at least 5% mean peak-memory
    improvement over BRKGA-5K on held-out graphs, at no more than 10% extra wall time."""
    if "memory" not in result["results"]:
        return ""
    r = summary(result, "memory").get("REGAL")
    if r is None or r["improvement_pct"] is None:
        return ""
    imp, tr = r["improvement_pct"], r["time_vs_brkga"]
    return (f"**Targets.** REGAL at least 5% mean peak-memory improvement over BRKGA-5K on "
            f"held-out graphs: **{'MET' if imp >= 5 else 'MISSED'}** ({imp:+.2f}%; REGAL's paper "
            f"reports 3.56% on its TensorFlow graphs). No more than 10% extra wall time over "
            f"BRKGA: **{'MET' if tr <= 1.10 else 'MISSED'}** ({tr:.2f}x BRKGA-5K's time, median "
            f"over graphs; timings on a shared machine are noisy).")


def update_docs(result: dict, docs: Path, command: str, section: str = "regal",
                out: Path = Path("bench/results/regal.json")) -> None:
    """Replace the ``section`` section of ``docs`` with this result (written to ``out``):
    ``regal`` is REGAL's Table 1; another section (an ablation, a few rows) is titled by
    its rows."""
    s = result["settings"]
    rows = list(next(iter(next(iter(result["results"].values())).values())))
    title = ("REGAL: learned BRKGA for peak memory" if section == "regal"
             else "REGAL: " + ", ".join(rows))
    replace_section(docs, section, f"## {title} (`graphopt bench regal`)\n\n`{command}` — "
                    f"cluster `{s['cluster']}`, task {s['task']}, "
                    f"{s['evals']:,} evaluations per search, {s['seeds']} seeds; machine: "
                    f"{s['machine']} (timings noisy; compare within a run); results in "
                    f"`{out}`.\n\n{targets(result)}\n\n{to_markdown(result)}")
