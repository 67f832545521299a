"""Pipeline splits run for real: ``torch.distributed.pipelining`` on CPU processes.

For each model (``pipe:`` sources, :mod:`graphopt.zoo.pipeline`: a
``torch.nn.TransformerEncoder``, an MLP whose blocks widen, ``transformers``' GPT-2,
BERT, T5's encoder and ViT, random weights) and each stage count, the pipeline task's three splits (``even``
layer counts, ``params``-balanced, the ``exact`` optimum of the simulator), each with
the schedule (GPipe, 1F1B, or interleaved 1F1B with two chunks a stage) and the
microbatches graphopt chose (``auto``: the count whose exact split is fastest, the same
count for all three, so that they differ in the split alone), plus what a user writes
first (``even``, 1F1B, as many microbatches as stages: ``even-first``), run
and graphopt's exact split at that count (``exact-first``), on ``K`` gloo processes, one
step of each plan in turn, ``steps`` timed rounds after a
warm-up; the median step of each.

The simulator prices the splits from each layer's forward, backward and update profiled
in one process of this machine at each microbatch size
(:func:`graphopt.exec.pipeline.profile_layers`, a few seconds before the row is run),
bytes and memory from the traced graph, the transfers on this machine's calibrated CPU
workers (:func:`graphopt.exec.calibrate.calibrate`, again before every row), the
pipeline runtime's overhead per stage and microbatch
(:func:`graphopt.exec.pipeline.runtime_overhead`, measured once per stage count), and the
stages' processes sharing this machine's cores; no figure is fitted to the rows. The
same plans priced by the calibrated roofline alone are kept beside (``roofline_step``).
Reported per plan: measured and simulated throughput, the
measured throughput over the even split's, the simulated step over the measured one, and
simulated against measured peak memory per stage; per row the load average before it.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time

from graphopt.benchmarks import geomean, say
from graphopt.errors import ExecutionError
from graphopt.exec.pipeline import (measure_pipelines, pipeline_model, pipeline_problem,
                                    reference_loss, runtime_overhead)
from graphopt.optim.partition.pipeline import (first_choice, microbatch_candidates,
                                               plan_pipeline, plan_pipeline_auto)
from graphopt.sim.pipeline import PipelinePlan, split_cost


__all__ = ["MODELS", "run", "to_markdown"]

#: The rows: ``pipe:`` models at sizes of a few hundred ms a step on two CPU processes,
#: their blocks wide enough (256) that the vocabulary's head weighs as much as a few of
#: them, as in GPT-2 small (at width 128 the head outweighs every block together, and
#: every split waits on it alike).
MODELS = (
    "pipe:transformer-encoder:layers=4,hidden=256,heads=4,seq=64,batch=16,vocab=8000",
    "pipe:mlp-uneven:layers=8,hidden=256,batch=64",
    "pipe:gpt2:layers=6,hidden=256,heads=4,seq=64,batch=8",
    "pipe:bert:layers=4,hidden=256,heads=4,seq=64,batch=8",
    "pipe:t5:layers=4,hidden=256,heads=4,seq=64,batch=8,vocab=32128",
    "pipe:vit:layers=6,hidden=256,heads=4,image=32,patch=4,batch=16,classes=10",
)


def _cluster(calibration, count: int):
    """The calibrated workers' figures on ``count`` devices, each with the memory this
    machine has over their number."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / count
    return dataclasses.replace(calibration, devices=count).cluster(float(memory))


def _row(spec: str, stages: int, microbatches: int | None, steps: int, cluster,
         overhead: float, cores: int) -> dict:
    model = pipeline_model(spec)
    profiled: dict[int, tuple] = {}

    def problem(m: int):  # each microbatch count profiled once per row
        if m not in profiled:
            profiled[m] = pipeline_problem(model, m, cluster, profile=True)
        return profiled[m]

    if microbatches is None:
        results = plan_pipeline_auto(problem, microbatch_candidates(model.batch, stages), stages,
                                     overhead=overhead, cores=cores)
    else:
        prob, costs = problem(microbatches)
        results = plan_pipeline(prob, costs, stages, microbatches, "auto", overhead=overhead,
                                cores=cores)
    plans = [PipelinePlan(spec, r.cost.bounds, r.cost.schedule, r.cost.microbatches, r.method,
                          virtual=r.cost.virtual) for r in results]
    sims = [r.cost for r in results]
    for first in first_choice(problem, stages, model.batch, overhead, cores):
        # what a user writes first (auto's even may interleave)
        plans.append(PipelinePlan(spec, first.cost.bounds, "1f1b", stages, first.method))
        sims.append(first.cost)
        # and graphopt's split at that count: the split's worth where M = K
        ex = plan_pipeline(*problem(stages), stages, stages, "1f1b", ("exact",),
                           overhead, cores)[0].cost
        plans.append(PipelinePlan(spec, ex.bounds, "1f1b", stages, "exact-first"))
        sims.append(ex)
    # the same plans priced by the calibrated roofline alone, as before layers were profiled
    roof = {m: pipeline_problem(model, m, cluster) for m in {p.microbatches for p in plans}}
    roofline = [split_cost(*roof[p.microbatches], p.bounds, p.microbatches, p.schedule,
                           overhead, virtual=p.virtual).step_time for p in plans]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    measured = measure_pipelines(spec, plans, steps=steps)
    # the first step's loss against the unsplit model's on the same microbatches
    ref = {m: reference_loss(model, m) for m in {p.microbatches for p in plans}}
    out = {"model": spec, "stages": stages, "layers": len(model.blocks), "batch": model.batch,
           "load_before": load, "load_after": os.getloadavg()[0],
           "seconds": time.perf_counter() - t0, "plans": []}
    for p, sim, m, r in zip(plans, sims, measured, roofline):
        out["plans"].append({
            "method": p.method, "bounds": list(p.bounds), "schedule": p.schedule,
            "virtual": p.virtual, "microbatches": p.microbatches, "measured_step": m.median,
            "measured_steps": m.step_times, "measured_throughput": m.throughput,
            "measured_min_step": min(m.step_times),
            "simulated_step": sim.step_time, "simulated_throughput": model.batch / sim.step_time,
            "roofline_step": r,
            "measured_busy": m.busy, "simulated_busy": [float(x) for x in sim.busy],
            "measured_memory": m.memory, "simulated_memory": [float(x) for x in sim.memory],
            "loss": m.loss, "loss_error": abs(m.loss - ref[p.microbatches])})
    even_m = out["plans"][0]["measured_throughput"]
    even_s = out["plans"][0]["simulated_throughput"]
    for p in out["plans"]:
        p["vs_even"] = p["measured_throughput"] / even_m
        p["simulated_vs_even"] = p["simulated_throughput"] / even_s
        p["step_error"] = p["simulated_step"] / p["measured_step"] - 1
        p["roofline_error"] = p["roofline_step"] / p["measured_step"] - 1
        p["busy_error"] = [s / m - 1 for s, m in zip(p["simulated_busy"], p["measured_busy"])]
        p["memory_error"] = [s / m - 1 for s, m in zip(p["simulated_memory"], p["measured_memory"])]
    return out


def run(models=MODELS, stages=(2,), microbatches: int | None = None, steps: int = 7) -> dict:
    """Every model at every stage count (the module docstring says what is measured);
    ``microbatches`` None lets graphopt choose them (``--microbatches auto``)."""
    from graphopt.exec.calibrate import calibrate
    from graphopt.exec.workers import host_cores

    t0 = time.perf_counter()
    res = {"settings": {"models": list(models), "stages": list(stages),
                        "microbatches": microbatches, "steps": steps},
           "overhead": {}, "rows": [], "load_start": os.getloadavg()[0]}
    total = len(models) * len(stages)
    for k in stages:
        overhead = runtime_overhead(k, k)
        res["overhead"][str(k)] = overhead
        say(f"pipeline runtime overhead on {k} processes: {overhead * 1e3:.2f} ms per stage "
            "and microbatch")
        for spec in models:
            # the machine's speed drifts with the load others put on it: calibrated again
            # before every row, a few seconds before its measurement
            calibration = calibrate(2).calibration
            try:
                row = _row(spec, k, None if microbatches is None else max(microbatches, k),
                           steps, _cluster(calibration, k), overhead, host_cores())
            except ExecutionError as err:  # a model torch cannot pipeline so: said, not hidden
                res.setdefault("failed", []).append({"model": spec, "stages": k,
                                                     "error": str(err)})
                say(f"{spec} on {k} stages: {err}")
                continue
            row["calibration"] = dataclasses.asdict(calibration)
            res["rows"].append(row)
            say(f"[{len(res['rows'])}/{total}] {spec} on {k} stages: {row['seconds']:.1f} s, "
                f"load {row['load_before']:.2f}")
    res["summary"] = summary(res)
    res["seconds"] = time.perf_counter() - t0
    return res


def summary(res: dict) -> dict:
    """The claims: exact over even (geomean of measured throughput), the worst row
    against even and params, the median step and memory errors, and how often the
    simulator's first split is within 3% of the measured best."""
    best, worst, first, errors, mem, fastest, roof, busy, waits = ([] for _ in range(9))
    for row in res["rows"]:
        by = {p["method"]: p for p in row["plans"]}
        ex = by["exact"]
        best.append(ex["vs_even"])
        fastest.append(by["even"]["measured_min_step"] / ex["measured_min_step"])
        worst.append(min(ex["measured_throughput"] / by[m]["measured_throughput"]
                         for m in ("even", "params")))
        split = [p for p in row["plans"] if not p["method"].endswith("-first")]
        top_sim = max(split, key=lambda p: p["simulated_throughput"])
        top = max(p["measured_throughput"] for p in split)
        first.append(top_sim["measured_throughput"] >= 0.97 * top)
        errors += [abs(p["step_error"]) for p in row["plans"]]
        roof += [abs(p["roofline_error"]) for p in row["plans"] if "roofline_error" in p]
        busy += [abs(e) for p in row["plans"] for e in p.get("busy_error", ())]
        waits += [1 - max(p["measured_busy"]) / p["measured_step"] for p in row["plans"]
                  if "measured_busy" in p]
        mem += [abs(e) for p in row["plans"] for e in p["memory_error"]]
        if "even-first" in by:
            ex["vs_even_first"] = ex["measured_throughput"] / by["even-first"]["measured_throughput"]
            by["exact-first"]["vs_even_first"] = (by["exact-first"]["measured_throughput"]
                                                  / by["even-first"]["measured_throughput"])
    return {"exact_vs_even_geomean": geomean(best), "exact_vs_even_or_params_worst": min(worst),
            "exact_vs_even_fastest_step_geomean": geomean(fastest),
            "exact_vs_even_first_geomean": geomean([
                p["vs_even_first"] for row in res["rows"] for p in row["plans"]
                if p["method"] == "exact" and "vs_even_first" in p]),
            "exact_first_vs_even_first_geomean": geomean([
                p["vs_even_first"] for row in res["rows"] for p in row["plans"]
                if p["method"] == "exact-first" and "vs_even_first" in p]),
            "simulator_first_within_3pct": f"{sum(first)}/{len(first)}",
            "median_abs_step_error": statistics.median(errors) if errors else None,
            "median_abs_roofline_error": statistics.median(roof) if roof else None,
            "median_abs_busy_error": statistics.median(busy) if busy else None,
            "median_busiest_stage_idle": statistics.median(waits) if waits else None,
            "median_abs_memory_error": statistics.median(mem) if mem else None}


def _chunks(plan: dict) -> str:
    v = plan.get("virtual", 1)
    return f" x{v}" if v > 1 else ""


def _sizes(bounds) -> str:
    return "/".join(str(b - a) for a, b in zip(bounds, bounds[1:]))


def _name(source: str) -> str:
    """A table's short name of a source: ``gpt2`` for ``pipe:gpt2:...``, ``hf:llama``,
    ``py:user_model.py``."""
    scheme, _, rest = source.partition(":")
    if scheme == "pipe":
        return rest.split(":")[0]
    if scheme == "py":
        return "py:" + rest.split(".py:")[0].rsplit("/", 1)[-1] + ".py"
    return f"{scheme}:{rest.split(':')[0]}"


def to_markdown(res: dict) -> str:
    """The results as Markdown: one table of every plan, then the summary."""
    lines = ["| model | K | method | layers | schedule, M | measured samples/s | simulated "
             "samples/s | measured vs even | simulated / measured step | CPU ms per stage, measured "
             "(simulated) | peak MiB per stage, measured (simulated) | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in res["rows"]:
        name = _name(row["model"])
        for p in row["plans"]:
            mem = " / ".join(f"{m / 2**20:.1f} ({s / 2**20:.1f})"
                             for m, s in zip(p["measured_memory"], p["simulated_memory"]))
            busy = " / ".join(f"{m * 1e3:.0f} ({s * 1e3:.0f})" for m, s in
                              zip(p.get("measured_busy", ()), p.get("simulated_busy", ())))
            lines.append(f"| {name} | {row['stages']} | {p['method']} | {_sizes(p['bounds'])} | "
                         f"{p['schedule']}{_chunks(p)}, {p['microbatches']} | "
                         f"{p['measured_throughput']:,.1f} | "
                         f"{p['simulated_throughput']:,.1f} | {p['vs_even']:.2f}x | "
                         f"{p['simulated_step'] / p['measured_step']:.2f} | {busy or '-'} | {mem} | "
                         f"{row['load_before']:.2f} |")
    s = res["summary"]

    def pct(x):
        return "-" if x is None else f"{100 * x:.1f}%"

    lines += ["", f"exact over even, measured throughput, geomean: "
                  f"{s['exact_vs_even_geomean']:.3f}x; worst row against the better of even and "
                  f"params: {s['exact_vs_even_or_params_worst']:.3f}x; against even with 1F1B and "
                  f"M = K (what a user writes first): "
                  + (f"{s['exact_vs_even_first_geomean']:.3f}x" if s["exact_vs_even_first_geomean"]
                     else "-")
              + "; graphopt's split at M = K against even at M = K: "
              + (f"{s['exact_first_vs_even_first_geomean']:.3f}x"
                 if s["exact_first_vs_even_first_geomean"] else "-")
              + f"; by each plan's fastest step instead of its median: "
                f"{s['exact_vs_even_fastest_step_geomean']:.3f}x",
              f"simulated step against measured: median error {pct(s['median_abs_step_error'])} "
              f"(priced by the calibrated roofline instead of profiled layers: "
              f"{pct(s.get('median_abs_roofline_error'))}); "
              f"each stage's CPU time in a step: median error {pct(s.get('median_abs_busy_error'))}"
              f" (the busiest stage idle {pct(s.get('median_busiest_stage_idle'))} of the step, "
              f"median); peak memory per stage: median error "
              f"{pct(s['median_abs_memory_error'])}; the "
              f"simulator's first split within 3% of the measured best in "
              f"{s['simulator_first_within_3pct']} rows; the first step's loss against the "
              f"unsplit model's: largest difference "
              f"{max(p.get('loss_error', 0.0) for r in res['rows'] for p in r['plans']):.1e}",
              "runtime overhead per stage and microbatch (ms): "
              + ", ".join(f"K={k}: {v * 1e3:.2f}" for k, v in res["overhead"].items())
              + "; calibrated before each row: matmul "
              + ", ".join(f"{r['calibration']['matmul_flops'] / 1e9:.0f}" for r in res["rows"])
              + " GFLOP/s, copy "
              + ", ".join(f"{r['calibration']['copy_bandwidth'] / 1e9:.1f}" for r in res["rows"])
              + " GB/s"]
    lines += [f"failed: {_name(f['model'])} on {f['stages']} stages: {f['error']}"
              for f in res.get("failed", ())]
    return "\n".join(lines)

