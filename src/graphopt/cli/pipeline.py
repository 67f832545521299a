"""The pipeline task of ``graphopt optimize`` and ``graphopt run --pipeline``: a model's
blocks (:class:`graphopt.frontends.model.Model`) split into contiguous stages by the
methods that serve the task (``graphopt methods``: even, params, exact, mcm), priced by
:mod:`graphopt.sim.pipeline` and, with ``--measure``, run on CPU processes."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt.cli._common import console
from graphopt.errors import ExecutionError, GraphoptError, UsageError
from graphopt.optim.partition.pipeline import DEFAULT_SPLIT_METHODS, FIRST_CHOICE, first_choice

#: ``--methods``' default for the pipeline task (``mcm`` is asked for by name).
DEFAULT_METHODS = ",".join(DEFAULT_SPLIT_METHODS)

#: The plan file each method's folder gets.
PLAN_FILE = "pipeline.json"

#: The step error of the pipeline model beyond which ``run --pipeline`` says why figures
#: disagree: above the medians ``bench/pipeline_real.py`` measured on profiled plans
#: (10.8% to 17.3%, docs/benchmarks.md).
STATED_ERROR = 0.20


def _bytes(values) -> str:
    from graphopt.ir.graph import format_bytes

    return " / ".join(format_bytes(float(x)) for x in values)


def _sizes(bounds) -> str:
    return "/".join(str(b - a) for a, b in zip(bounds, bounds[1:]))


def refuse_unused(given: dict[str, bool]) -> None:
    """Refuse, in one line, the first option given (True) that ``--task pipeline`` does
    not take: it would be ignored."""
    unused = [option for option, was_given in given.items() if was_given]
    if unused:
        raise UsageError(f"{unused[0]}: not an option of --task pipeline (its options: "
                         "--stages, --microbatches, --schedule, --virtual-stages, --methods, "
                         "--measure, --out)")


def optimize_pipeline(graph: str, cluster: str | None, stages: int, microbatches: str,
                      schedule: str, methods: list[str], out: Path | None, measure: bool,
                      steps: int, seed: int, virtual: int = 2) -> None:
    """``graphopt optimize MODEL --task pipeline``: each method's split, a table, and with
    ``out`` a plan file per method and ``report.json``; with ``measure``, each plan run
    for real. Ctrl-C (SIGTERM, SIGHUP) while measuring keeps the plans, without their
    measured figures, and exits 130."""
    from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
    from graphopt.exec.pipeline import (Stopped, measure_pipelines, pipeline_model,
                                        pipeline_problem, runtime_overhead, stage_cluster)
    from graphopt.exec.workers import host_cores
    from graphopt.hardware import load_cluster
    from graphopt.optim.base import PIPELINE, tasks_of
    from graphopt.optim.compare import write_all
    from graphopt.optim.partition.pipeline import (SPLIT_METHODS, microbatch_candidates,
                                                   plan_pipeline, plan_pipeline_auto)
    from graphopt.sim.pipeline import SCHEDULES, PipelinePlan

    if microbatches != "auto" and not (microbatches.isascii() and microbatches.isdigit()
                                       and int(microbatches) >= 1):
        raise UsageError(f"--microbatches {microbatches}: give a count of at least 1, or auto")
    if schedule not in (*SCHEDULES, "auto"):
        raise UsageError(f"--schedule {schedule!r}: give {', '.join(SCHEDULES)} or auto")
    for m in methods:
        try:
            serves = PIPELINE in tasks_of(m)
        except GraphoptError:  # an unknown name
            serves = False
        if not serves:
            raise UsageError(f"--methods: {m!r} is no pipeline method; give "
                             f"{', '.join(SPLIT_METHODS)} ('graphopt methods' lists each "
                             "method's tasks)")
    interrupted = False
    measured = None
    with stop_on_interrupt():  # from here a signal asks to stop: the plans are then kept
        if measure and "even" not in methods:  # what a user writes first: measured beside
            methods = ["even", *methods]
        model = pipeline_model(graph, seed)
        model.require_blocks(stages)
        c = stage_cluster(load_cluster(cluster or "cpu"), stages)
        # --measure prices what this host measures: each block profiled here, the runtime's
        # overhead, and the stages' processes sharing this host's cores
        overhead, cores = 0.0, host_cores() if measure else None
        if measure:
            with console.status(f"measuring the pipeline runtime's overhead on {stages} processes"):
                try:
                    overhead = runtime_overhead(stages, stages, stop=stop_requested)
                except Stopped:
                    interrupted = True
        with console.status(f"{'profiling' if measure else 'tracing'} one microbatch of {graph}"):
            problems: dict[int, tuple] = {}

            def problem(m: int):  # each microbatch count traced (and profiled) once
                if m not in problems:
                    problems[m] = pipeline_problem(model, m, c, profile=measure)
                return problems[m]

            if microbatches == "auto":
                results = plan_pipeline_auto(problem, microbatch_candidates(model.batch, stages),
                                             stages, schedule, methods, overhead, cores, virtual)
            else:
                model.check_microbatches(int(microbatches))
                results = plan_pipeline(*problem(int(microbatches)), stages, int(microbatches),
                                        schedule, methods, overhead, cores, virtual)
            results += first_choice(problem, stages, model.batch, overhead, cores)
        count = results[0].cost.microbatches
        plans = [PipelinePlan(graph, r.cost.bounds, r.cost.schedule, r.cost.microbatches,
                              r.method, _simulated(r.cost, model.batch, overhead, cores, measure),
                              r.cost.virtual, model.blocks)
                 for r in results]
        if measure and not interrupted:
            with console.status(f"running {len(plans)} plans in turns on cpu:{stages} "
                                "(Ctrl-C stops, keeping the plans)"):
                try:
                    measured = measure_pipelines(graph, plans, steps=steps, seed=seed,
                                                 stop=stop_requested)
                except Stopped:
                    interrupted = True
    even = next((r.cost.step_time for r in results if r.method == "even"), None)
    t = Table(title=f"{graph}: {len(model.blocks)} blocks ({model.blocks[0]} .. "
                    f"{model.blocks[-1]}) into {stages} stages on {c.name}, {count} "
                    f"microbatches of {model.batch // count}")
    chunked = any(r.cost.virtual > 1 for r in results)
    cols = ["method", f"blocks per {'chunk' if chunked else 'stage'}", "schedule, M", "step ms",
            "samples/s", "vs even", "peak per stage", "fits"]
    if measured:
        cols += ["measured ms", "measured vs even", "measured peak per stage"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("method", "schedule", "fits") else "right")
    measured_even = next((m.median for m, r in zip(measured or (), results)
                          if r.method == "even"), None)
    for i, r in enumerate(results):
        cst = r.cost
        sched = f"{cst.schedule} x{cst.virtual}" if cst.virtual > 1 else cst.schedule
        row = [r.method, _sizes(cst.bounds), f"{sched}, {cst.microbatches}",
               f"{cst.step_time * 1e3:.2f}",
               f"{cst.throughput(model.batch):,.1f}",
               f"{even / cst.step_time:.2f}x" if even else "-", _bytes(cst.memory),
               "yes" if cst.fits else "[red]no[/]"]
        if measured:
            m = measured[i]
            row += [f"{m.median * 1e3:.2f}",
                    f"{measured_even / m.median:.2f}x" if measured_even else "-",
                    _bytes(m.memory)]
        t.add_row(*row)
    if measured:
        t.caption = (f"measured: median of {steps} steps, plans in turns; simulated from blocks "
                     f"profiled here, the runtime's measured {overhead * 1e3:.2f} ms per stage "
                     f"and microbatch, and {cores} shared core(s)")
    console.print(t)
    rec = None
    if measured:
        from graphopt.exec.decide import recommend

        first = FIRST_CHOICE if any(p.method == FIRST_CHOICE for p in plans) else "even"
        rec = recommend({p.method: m.step_times for p, m in zip(plans, measured)}, first)
        console.print(rec.sentence("what a user writes first" if first == FIRST_CHOICE
                                   else "the even split"), highlight=False)
    if out is not None:
        report = {"task": "pipeline", "graph": graph, "cluster": c.name, "stages": stages,
                  "microbatches": count, "batch": model.batch, "seed": seed,
                  "blocks": list(model.blocks), "interrupted": interrupted,
                  "recommended": rec and rec.to_dict(),
                  "rows": [_row(p, measured[i] if measured else None, even, measured_even)
                           for i, p in enumerate(plans)]}
        files = {f"{p.method}/{PLAN_FILE}": (lambda path, p=p: p.save(path)) for p in plans}
        path = write_all(out, files, report)
        best = rec.method if rec else "exact" if "exact" in methods else methods[0]
        console.print(f"plans in {out}/<method>/{PLAN_FILE}, report {path}; run one with: "
                      f"graphopt run {graph} --pipeline {out}/{best}/{PLAN_FILE} "
                      f"--devices cpu:{stages}", highlight=False, soft_wrap=True)
    if interrupted:
        console.print("interrupted: the plans are kept, without measured figures")
        raise typer.Exit(130)


def _simulated(cost, batch: int, overhead: float, cores: int | None, profiled: bool) -> dict:
    return {"step_time": cost.step_time, "throughput": cost.throughput(batch),
            "stage_time": [float(x) for x in cost.stage_time],
            "memory": [float(x) for x in cost.memory], "fits": cost.fits, "overhead": overhead,
            "cores": cores, "profiled": profiled}


def _row(plan, measured, even: float | None, measured_even: float | None) -> dict:
    """One method's row of ``report.json``."""
    sim = plan.simulated
    row = {"method": plan.method, "bounds": list(plan.bounds), "split_spec": plan.split_spec(),
           "schedule": plan.schedule, "virtual": plan.virtual,
           "microbatches": plan.microbatches, "simulated": sim,
           "speedup_vs_even": even / sim["step_time"] if even else None}
    if measured is not None:
        row["measured"] = {"median": measured.median, "step_times": measured.step_times,
                           "throughput": measured.throughput, "memory": measured.memory,
                           "busy": measured.busy, "loss": measured.loss,
                           "speedup_vs_even": measured_even / measured.median
                           if measured_even else None}
    return row


def run_pipeline(graph: str, plan_path: Path, devices: str, cluster: str | None, steps: int,
                 seed: int) -> None:
    """``graphopt run MODEL --pipeline plan.json``: the plan on K processes, measured
    beside the simulator, the loss beside the unsplit model's."""
    from graphopt.exec.api import parse_devices
    from graphopt.exec.pipeline import (measure_pipelines, pipeline_model, pipeline_problem,
                                        reference_loss, stage_cluster)
    from graphopt.hardware import load_cluster
    from graphopt.ir.graph import format_bytes
    from graphopt.sim.pipeline import PipelinePlan, split_cost

    kind, count = parse_devices(devices)
    if kind != "cpu":
        raise UsageError(f"--devices {devices}: pipelines run on CPU processes (cpu:K) here")
    plan = PipelinePlan.load(plan_path)
    if plan.model != graph:
        raise UsageError(f"{plan_path}: the plan splits {plan.model}, not {graph}")
    if plan.stages != count:
        raise UsageError(f"--devices {devices}: {plan_path} has {plan.stages} stages; give "
                         f"cpu:{plan.stages}")
    model = pipeline_model(graph, seed)
    if plan.bounds[-1] != len(model.blocks) or (plan.blocks and plan.blocks != model.blocks):
        raise UsageError(f"{plan_path}: the plan's blocks are not {graph}'s "
                         f"({len(model.blocks)} blocks, {model.blocks[0]} .. {model.blocks[-1]})")
    c = stage_cluster(load_cluster(cluster or "cpu"), count)
    # priced as the plan was made: profiled blocks and shared cores where it was measured
    prob, costs = pipeline_problem(model, plan.microbatches, c,
                                   profile=plan.simulated.get("profiled") is True)
    overhead = float(plan.simulated.get("overhead", 0.0) or 0.0)
    cores = plan.simulated.get("cores")
    sim = split_cost(prob, costs, plan.bounds, plan.microbatches, plan.schedule, overhead,
                     cores if type(cores) is int and 1 <= cores <= 1 << 16 else None,
                     plan.virtual)
    with console.status(f"running {steps + 1} steps on {count} processes"):
        m = measure_pipelines(graph, [plan], steps=steps, seed=seed)[0]
    ref = reference_loss(model, plan.microbatches)
    sched = f"{plan.schedule} x{plan.virtual}" if plan.virtual > 1 else plan.schedule
    t = Table(title=f"{graph}: blocks {_sizes(plan.bounds)} on {devices}, {sched}, "
                    f"{plan.microbatches} microbatches")
    for col in ("", "step ms", "samples/s", *(f"stage {s} peak" for s in range(count))):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("measured", f"{m.median * 1e3:.2f}", f"{m.throughput:,.1f}",
              *(format_bytes(x) for x in m.memory))
    t.add_row(f"simulated ({c.name})", f"{sim.step_time * 1e3:.2f}",
              f"{sim.throughput(model.batch):,.1f}", *(format_bytes(x) for x in sim.memory))
    t.caption = (f"median of {steps} steps after a warm-up; first step's loss "
                 f"{m.loss:.6g}, unsplit model's {ref:.6g} (difference {abs(m.loss - ref):.2e})")
    console.print(t)
    ratio = sim.step_time / m.median
    if abs(ratio - 1) > STATED_ERROR:
        how = ("from blocks profiled on this host" if plan.simulated.get("profiled") is True
               else f"by the {c.name} preset's roofline, not this host's measured figures")
        console.print(f"the simulated step is {ratio:.2f}x the measured one, beyond the "
                      f"model's stated {STATED_ERROR:.0%}: the plan was priced {how}, at "
                      f"{'its own load' if plan.simulated.get('profiled') is True else 'no load'};"
                      f" to price this host now: graphopt optimize {graph} --task pipeline "
                      f"--stages {count} --measure", highlight=False, soft_wrap=True)
    if not abs(m.loss - ref) <= 1e-5 * max(1.0, abs(ref)):
        raise ExecutionError(f"the pipeline's loss {m.loss:.6g} differs from the unsplit "
                            f"model's {ref:.6g}")
