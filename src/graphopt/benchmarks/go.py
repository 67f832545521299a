"""GO against the baselines on GO's Table 2 (``graphopt bench go``).

Four measurements, each run side by side in one process, same problems, same seed:

1. **Placement** on the rows where PPO fits the budget: every non-learned method of
   ``go-table2`` (``portfolio``, every heuristic and then annealing from the best, the
   strongest) and GO zero-shot (``go``), fine-tuned (``go-finetune``) and trained from
   scratch (``go-one``), all at the same evaluation budget; step times, speed-ups over
   ``expert``, geometric means. The portfolio runs a second time with go-finetune's wall
   seconds as its only bound (``portfolio@time``): GO against it at equal evaluations
   and at equal wall time. The learned placers before GO (``rl-lstm``, ``hdp``)
   join from go-table2's results file where it has them for the same settings.
2. **Search cost**: evaluations and seconds each search needed to come within 2% of
   its own final step time.
3. **Transfer**: the rows of the held-out families (never seen in pre-training) in the
   same table, and zero-shot GO on every other row, the largest graph included, with
   its inference time.
4. **Multi-task**: go-one deciding placement, scheduling and fusion jointly, against each
   task alone and against the compiler defaults (one device, FIFO, greedy fusion).

Results go to a JSON file (checkpointed after every row; ``resume=True`` keeps rows
already there with the same settings) and a markdown section of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

from graphopt.benchmarks import geomean, replace_section, row_line, save_json, say
from graphopt.benchmarks.go_table2 import ROWS, row_entry
from graphopt.benchmarks.go_table2 import METHODS as BASELINES
from graphopt.errors import UsageError
from graphopt.optim.base import Budget
from graphopt.optim.compare import compare
from graphopt.rl.reinforce import time_to_within
from graphopt.sim import Plan, Problem, simulate

__all__ = ["LEARNED_ROWS", "MULTITASK_ROWS", "run", "to_markdown", "update_docs"]

#: Rows where every method, PPO included, runs within the budget in minutes on a CPU.
LEARNED_ROWS = ("rnnlm-2", "transformer-xl-2", "transformer-xl-4", "transformer-xl-8",
                "inception-v3-b32", "inception-v3-b64", "amoebanet", "wavenet-2x18")
#: The learned methods run on those rows.
LEARNED = ("go", "go-finetune", "go-one")
#: The learned placers before GO: taken from go-table2's results where that run used the
#: same cluster, budget and seed (their runs take minutes; the simulator and the seeded
#: methods are deterministic, so the step times are those a run here would give).
PRIOR = ("rl-lstm", "hdp")
#: GO's methods compared with the best non-learned method of each row.
_VS = ("go", "go-finetune", "go-one")
#: Rows of the multi-task comparison.
MULTITASK_ROWS = ("transformer-xl-2", "inception-v3-b32", "wavenet-2x18")
#: The portfolio bounded by go-finetune's wall seconds on the row instead of evaluations.
AT_TIME = "portfolio@time"
#: Task sets of the multi-task comparison.
TASKS = ("placement", "scheduling", "fusion", "placement,scheduling,fusion")


def _problem(name: str, cluster: str, quick: bool) -> Problem:
    from graphopt.hardware import load_cluster
    from graphopt.zoo import build

    entry = row_entry(name, quick)
    return Problem(build(entry), load_cluster(f"{cluster}:{entry.num_devices}"))


def _figures(r) -> dict:
    st = r.stats
    e2, s2 = time_to_within(st["history"], 0.02) if st.get("history") else (None, None)
    return {"step_time": r.step_time if r.result.valid else None, "valid": r.result.valid,
            "reason": r.result.reason, "evals": st.get("evals", 0), "seconds": st.get("seconds"),
            "evals_to_within_2pct": e2, "seconds_to_within_2pct": s2,
            **{k: st[k] for k in ("inference_seconds", "greedy_step_time") if k in st}}


def run(cluster: str = "p100", budget: int = 2000, seed: int = 0, quick: bool = False,
        learned_rows: tuple[str, ...] = LEARNED_ROWS, zero_shot_rows: tuple[str, ...] = ROWS,
        multitask_rows: tuple[str, ...] = MULTITASK_ROWS, multitask_budget: int = 1000,
        learned: tuple[str, ...] = LEARNED, out: Path | None = None, resume: bool = False,
        progress: bool = True, params: dict[str, dict] | None = None,
        prior: Path | None = Path("bench/results/go-table2.json"),
        baselines: tuple[str, ...] = BASELINES) -> dict:
    """Run the benchmark; return (and, with ``out``, checkpoint after each row) its results.

    ``baselines``: the non-learned methods of the placement rows (default go-table2's,
    the portfolio among them); with both ``portfolio`` and ``go-finetune`` the portfolio
    also runs bounded by go-finetune's wall seconds (:data:`AT_TIME`)."""
    from rich.progress import Progress

    from graphopt.zoo import get_entry

    if "expert" not in baselines:
        raise UsageError(f"baselines {', '.join(baselines)}: expert must be among them "
                         "(every speed-up is over it)")
    settings = {"cluster": cluster, "budget": budget, "seed": seed, "quick": quick,
                "learned_rows": list(learned_rows), "learned": list(learned),
                "zero_shot_rows": list(zero_shot_rows), "multitask_rows": list(multitask_rows),
                "multitask_budget": multitask_budget, "params": params or {},
                "baselines": list(baselines)}
    result = {"benchmark": "go", "settings": settings,
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "python": platform.python_version()},
              "placement": [], "zero_shot": [], "multitask": []}
    if resume and out and Path(out).is_file():
        old = json.loads(Path(out).read_text())
        if old.get("settings") == settings:
            result = old

    def save() -> None:
        if out:
            save_json(result, out)

    methods = list(baselines) + list(learned)
    prior_rows = _prior_rows(prior, cluster, budget, seed, quick)
    jobs = ([("placement", r) for r in learned_rows]
            + [("zero_shot", r) for r in zero_shot_rows if r not in learned_rows]
            + [("multitask", r) for r in multitask_rows])
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("bench go", total=len(jobs))
        for done, (part, name) in enumerate(jobs, 1):
            if any(row["model"] == name for row in result[part]):
                bar.advance(task)
                continue
            t0 = time.perf_counter()
            prob = _problem(name, cluster, quick)
            row = {"model": name, "ops": prob.num_nodes, "devices": prob.num_devices,
                   "held_out": not get_entry(name).train_split, "lower_bound": prob.lower_bound}
            show = lambda m, name=name, part=part: bar.update(  # noqa: E731
                task, description=f"{part} {name}: {m}")
            if part == "placement":
                res = compare(prob, methods, "placement", Budget(budget), seed, on_start=show,
                              params=params)
                row["methods"] = {r.method: _figures(r) for r in res}
                tuned = row["methods"].get("go-finetune", {}).get("seconds")
                if "portfolio" in baselines and tuned:
                    show(AT_TIME)
                    (r,) = compare(prob, ["portfolio"], "placement", Budget(None, tuned), seed,
                                   params=params)
                    row["methods"][AT_TIME] = {**_figures(r), "seconds_budget": tuned}
                for m in PRIOR:
                    if m not in row["methods"] and m in prior_rows.get(name, {}):
                        row["methods"][m] = {**prior_rows[name][m], "from": "go-table2"}
            elif part == "zero_shot":
                res = compare(prob, ["expert", "go"], "placement", Budget(budget), seed,
                              on_start=show, params=params)
                row["methods"] = {r.method: _figures(r) for r in res}
            else:
                default = simulate(prob, Plan())
                row["default"] = default.step_time if default.valid else None
                row["tasks"] = {}
                for t in TASKS:
                    show(f"go-one {t}")
                    (r,) = compare(prob, ["go-one"], t, Budget(multitask_budget), seed,
                                   params=params)
                    row["tasks"][t] = _figures(r)
            result[part].append(row)
            save()
            bar.advance(task)
            if progress:
                say(row_line(done, len(jobs), f"{part} {name}", time.perf_counter() - t0))
    result["geomean_speedup_vs_expert"] = {
        m: geomean([r["methods"]["expert"]["step_time"] / r["methods"][m]["step_time"]
                     for r in result["placement"] if m in r["methods"]
                     and r["methods"][m]["valid"] and r["methods"]["expert"]["valid"]])
        for m in methods + list(PRIOR) + [AT_TIME]}
    save()
    return result


def _prior_rows(path: Path | None, cluster: str, budget: int, seed: int,
                quick: bool) -> dict[str, dict]:
    """``{row: {method: figures}}`` of go-table2's results, if its settings match."""
    if path is None or not Path(path).is_file():
        return {}
    old = json.loads(Path(path).read_text())
    s = old.get("settings", {})
    if (s.get("cluster"), s.get("budget"), s.get("seed"), s.get("quick")) != (cluster, budget,
                                                                              seed, quick):
        return {}
    return {r["model"]: {m: f for m, f in r["methods"].items() if m in PRIOR}
            for r in old.get("rows", [])}


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def _name(row: dict) -> str:
    return row["model"] + ("\\*" if row["held_out"] else "")


def to_markdown(result: dict) -> str:
    """The four tables of the benchmark."""
    s = result["settings"]
    prior = [m for m in PRIOR if m not in s["learned"]
             and any(m in r["methods"] for r in result["placement"])]
    baselines = s.get("baselines", list(BASELINES))
    at_time = [AT_TIME] if any(AT_TIME in r["methods"] for r in result["placement"]) else []
    methods = baselines + prior + s["learned"] + at_time
    vs_cols = [m for m in _VS if m in s["learned"]]
    out = ["**Placement** (step time in ms, speed-up over `expert` in brackets; "
           "\\* held-out family" + ("; " + ", ".join(prior) + " from go-table2's run with the "
                                    "same settings, - where it has none" if prior else "")
           + "):", "",
           "| " + " | ".join(["model", "ops", "dev", *methods,
                               *(f"{m} vs best non-learned" for m in vs_cols)]) + " |",
           "|" + "---|" * (len(methods) + 3 + len(vs_cols))]
    vs_best: dict[str, list[float]] = {m: [] for m in vs_cols}
    for row in result["placement"]:
        ms = row["methods"]
        e = ms["expert"]["step_time"]
        cells = []
        for m in methods:
            t = ms[m]["step_time"] if m in ms else None
            cells.append("-" if m not in ms else "OOM" if t is None else
                         _ms(t) + (f" ({e / t:.2f}x)" if e and m != "expert" else ""))
        best = min((ms[m]["step_time"] for m in baselines if m in ms and ms[m]["step_time"]),
                   default=None)
        vs = []
        for m in vs_cols:
            t = ms.get(m, {}).get("step_time")
            if best and t:
                vs_best[m].append(best / t)
            vs.append(f"{best / t:.2f}x" if best and t else "-")
        out.append("| " + " | ".join([_name(row), f"{row['ops']:,}", str(row["devices"]),
                                      *cells, *vs]) + " |")
    gm = result.get("geomean_speedup_vs_expert", {})
    rows = len(result["placement"])

    def geo(m: str) -> str:
        n = sum(m in r["methods"] and r["methods"][m]["valid"] for r in result["placement"])
        return "-" if not gm.get(m) else f"{gm[m]:.3f}x" + (f" ({n} rows)" if n < rows else "")

    out.append("| " + " | ".join(["**geomean**", "", "", *(geo(m) for m in methods),
                                  *(f"{geomean(v):.3f}x" if v else "-" for v in vs_best.values())])
               + " |")

    out += _vs_portfolio(result["placement"])
    searches = [m for m in ("sa", "brkga", "portfolio", "rl-lstm", "hdp", "go-finetune", "go-one",
                            AT_TIME) if m in methods]
    out += ["", "**Search cost**: evaluations / seconds to come within 2% of the method's own "
            "final step time.", "",
            "| model | " + " | ".join(searches) + " |", "|" + "---|" * (len(searches) + 1)]
    for row in result["placement"]:
        cells = []
        for m in searches:
            r = row["methods"].get(m)
            cells.append("-" if r is None or r.get("evals_to_within_2pct") is None else
                         f"{r['evals_to_within_2pct']:,} / {r['seconds_to_within_2pct']:.1f} s")
        out.append(f"| {row['model']} | " + " | ".join(cells) + " |")

    out += ["", "**Zero-shot GO on the other rows** (pre-trained policy, no training on the "
            "graph; inference = features + one forward pass):", "",
            "| model | ops | dev | expert | go | go vs expert | inference s | go total s |",
            "|---|---|---|---|---|---|---|---|"]
    for row in result["zero_shot"]:
        e, g = row["methods"]["expert"], row["methods"]["go"]
        sp = f"{e['step_time'] / g['step_time']:.2f}x" if e["step_time"] and g["step_time"] else "-"
        out.append(f"| {_name(row)} | {row['ops']:,} | "
                   f"{row['devices']} | {_ms(e['step_time'])} | {_ms(g['step_time'])} | {sp} | "
                   f"{g.get('inference_seconds', 0):.2f} | {g['seconds']:.2f} |")

    out += ["", f"**Multi-task** (go-one, {s['multitask_budget']} evaluations per task set; "
            "speed-up over the compiler defaults: one device, FIFO, greedy fusion):", "",
            "| model | defaults | " + " | ".join(TASKS) + " |", "|" + "---|" * (len(TASKS) + 2)]
    for row in result["multitask"]:
        d = row["default"]
        cells = []
        for t in TASKS:
            x = row["tasks"][t]["step_time"]
            cells.append("OOM" if x is None else _ms(x) + (f" ({d / x:.2f}x)" if d else ""))
        out.append(f"| {row['model']} | {_ms(d)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _vs_portfolio(rows: list[dict]) -> list[str]:
    """The table of go-finetune against the portfolio at equal evaluations and at equal
    wall time (go-finetune's seconds), with geomeans and counts of rows won."""
    rows = [r for r in rows if {"go-finetune", "portfolio"} <= set(r["methods"])]
    if not rows:
        return []
    out = ["", "**go-finetune against the portfolio** (every heuristic, then `sa` from the "
           "best): at equal evaluations, and at equal wall time (the portfolio bounded only "
           "by go-finetune's seconds on the row); ratio > 1: GO faster.", "",
           "| model | go-finetune ms | go-finetune s | portfolio ms | ratio, equal evals | "
           "portfolio@time ms | ratio, equal time |", "|---|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {"portfolio": [], AT_TIME: []}
    for row in rows:
        ms = row["methods"]
        g = ms["go-finetune"]["step_time"]
        cells = []
        for m in ("portfolio", AT_TIME):
            t = ms.get(m, {}).get("step_time")
            if t and g:
                ratios[m].append(t / g)
            cells += [_ms(t), f"{t / g:.2f}x" if t and g else "-"]
        out.append(f"| {_name(row)} | {_ms(g)} | {ms['go-finetune']['seconds']:.1f} | "
                   + " | ".join(cells) + " |")

    def summary(m: str) -> str:
        v = ratios[m]
        return "-" if not v else (f"{geomean(v):.3f}x, ahead on {sum(x > 1 for x in v)} "
                                  f"of {len(v)}")

    out.append(f"| **geomean, rows won** | | | | {summary('portfolio')} | | "
               f"{summary(AT_TIME)} |")
    return out


def update_docs(result: dict, docs: Path, command: str) -> None:
    """Replace the ``go`` section of ``docs`` with this result."""
    s = result["settings"]
    replace_section(docs, "go-quick" if s["quick"] else "go",
                    f"`{command}` — cluster `{s['cluster']}`, budget {s['budget']} evaluations per "
                    f"method, seed {s['seed']}.\n\n{to_markdown(result)}")
