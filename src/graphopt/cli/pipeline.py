"""The pipeline task of ``graphopt optimize`` and ``graphopt run --pipeline``: what
the two commands do with a ``pipe:`` model (see :mod:`graphopt.zoo.pipeline`)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console
from graphopt.errors import ExecutionError, GraphoptError
from graphopt.optim.partition.pipeline import DEFAULT_SPLIT_METHODS

#: ``--methods``' default for the pipeline task (``mcm`` is asked for by name).
DEFAULT_METHODS = ",".join(DEFAULT_SPLIT_METHODS)

#: The plan file each method's folder gets.
PLAN_FILE = "pipeline.json"


def _model(graph: str):
    from graphopt.zoo.pipeline import PIPELINE_MODELS, build_pipeline_model, is_pipeline_source

    if not is_pipeline_source(graph):
        raise GraphoptError(f"graph {graph!r}: the pipeline task splits a model of layers, "
                            f"pipe:NAME ({', '.join(PIPELINE_MODELS)}), e.g. pipe:gpt2:layers=6")
    return build_pipeline_model(graph)


def _bytes(values) -> str:
    from graphopt.ir.graph import format_bytes

    return " / ".join(format_bytes(float(x)) for x in values)


def optimize_pipeline(graph: str, cluster: str | None, stages: int, microbatches: str,
                      schedule: str, methods: list[str], out: Path | None, measure: bool,
                      steps: int, seed: int, virtual: int = 2) -> None:
    """``graphopt optimize MODEL --task pipeline``: each method's split, a table, and
    with ``out`` a plan file per method; with ``measure``, each plan run for real."""
    from graphopt.exec.pipeline import (measure_pipelines, pipeline_problem, runtime_overhead,
                                        stage_cluster)
    from graphopt.exec.workers import host_cores
    from graphopt.hardware import load_cluster
    from graphopt.optim.partition.pipeline import (SPLIT_METHODS, microbatch_candidates,
                                                   plan_pipeline, plan_pipeline_auto)
    from graphopt.sim.pipeline import SCHEDULES, PipelinePlan

    check_output(out, "--out", folder=True)
    if stages < 1:
        raise GraphoptError(f"--stages {stages}: give at least 1")
    if microbatches != "auto" and not (microbatches.isascii() and microbatches.isdigit()
                                       and int(microbatches) >= 1):
        raise GraphoptError(f"--microbatches {microbatches}: give a count of at least 1, or auto")
    if schedule not in (*SCHEDULES, "auto"):
        raise GraphoptError(f"--schedule {schedule!r}: give {', '.join(SCHEDULES)} or auto")
    unknown = [m for m in methods if m not in SPLIT_METHODS]
    if unknown:
        raise GraphoptError(f"--methods: {unknown[0]!r} is no pipeline method; give "
                            f"{', '.join(SPLIT_METHODS)}")
    model = _model(graph)
    if stages > len(model.layers):
        raise GraphoptError(f"--stages {stages}: {graph} has only {len(model.layers)} layers")
    c = stage_cluster(load_cluster(cluster or "cpu"), stages)
    # --measure prices what this host measures: each layer profiled here, the runtime's
    # overhead, and the stages' processes sharing this host's cores
    overhead, cores = 0.0, host_cores() if measure else None
    if measure:
        with console.status(f"measuring the pipeline runtime's overhead on {stages} processes"):
            overhead = runtime_overhead(stages, stages)
    with console.status(f"{'profiling' if measure else 'tracing'} one microbatch of {graph}"):
        if microbatches == "auto":
            results = plan_pipeline_auto(lambda m: pipeline_problem(model, m, c, profile=measure),
                                         microbatch_candidates(model.batch, stages), stages,
                                         schedule, methods, overhead, cores, virtual)
        else:
            prob, costs = pipeline_problem(model, int(microbatches), c, profile=measure)
            results = plan_pipeline(prob, costs, stages, int(microbatches), schedule, methods,
                                    overhead, cores, virtual)
    microbatches = str(results[0].cost.microbatches)
    plans = [PipelinePlan(graph, r.cost.bounds, r.cost.schedule, int(microbatches), r.method,
                          _simulated(r.cost, model.batch, overhead, cores, measure),
                          r.cost.virtual)
             for r in results]
    measured = None
    if measure:
        with console.status(f"running {len(plans)} plans in turns on cpu:{stages}"):
            measured = measure_pipelines(graph, plans, steps=steps, seed=seed)
    even = next((r.cost.step_time for r in results if r.method == "even"), None)
    t = Table(title=f"{graph}: {len(model.layers)} layers into {stages} stages on {c.name}, "
                    f"{microbatches} microbatches of {model.batch // int(microbatches)}")
    chunked = any(r.cost.virtual > 1 for r in results)
    cols = ["method", f"layers per {'chunk' if chunked else 'stage'}", "schedule", "step ms",
            "samples/s", "vs even", "peak per stage", "fits"]
    if measured:
        cols += ["measured ms", "measured samples/s", "measured peak per stage"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("method", "schedule", "fits") else "right")
    for i, r in enumerate(results):
        cst = r.cost
        sizes = "/".join(str(b - a) for a, b in zip(cst.bounds, cst.bounds[1:]))
        sched = f"{cst.schedule} x{cst.virtual}" if cst.virtual > 1 else cst.schedule
        row = [r.method, sizes, sched, f"{cst.step_time * 1e3:.2f}",
               f"{cst.throughput(model.batch):,.1f}",
               f"{even / cst.step_time:.2f}x" if even else "-", _bytes(cst.memory),
               "yes" if cst.fits else "[red]no[/]"]
        if measured:
            m = measured[i]
            row += [f"{m.median * 1e3:.2f}", f"{m.throughput:,.1f}", _bytes(m.memory)]
        t.add_row(*row)
    if measure:
        t.caption = (f"measured: median of {steps} steps, plans in turns; simulated from layers "
                     f"profiled here, the runtime's measured {overhead * 1e3:.2f} ms per stage "
                     f"and microbatch, and {cores} shared core(s)")
    console.print(t)
    if out is not None:
        for p in plans:
            path = out / p.method / PLAN_FILE
            check_output(path, "--out")
            path.parent.mkdir(parents=True, exist_ok=True)
            p.save(path)
        console.print(f"plans in {out}/<method>/{PLAN_FILE}; run one with: graphopt run {graph} "
                      f"--pipeline {out}/exact/{PLAN_FILE} --devices cpu:{stages}")


def _simulated(cost, batch: int, overhead: float, cores: int | None, profiled: bool) -> dict:
    return {"step_time": cost.step_time, "throughput": cost.throughput(batch),
            "stage_time": [float(x) for x in cost.stage_time],
            "memory": [float(x) for x in cost.memory], "fits": cost.fits, "overhead": overhead,
            "cores": cores, "profiled": profiled}


def run_pipeline(graph: str, plan_path: Path, devices: str, cluster: str | None, steps: int,
                 seed: int) -> None:
    """``graphopt run MODEL --pipeline plan.json``: the plan on K processes, measured
    beside the simulator, the loss beside the unsplit model's."""
    from graphopt.exec.api import parse_devices
    from graphopt.exec.pipeline import (measure_pipelines, pipeline_problem, reference_loss,
                                        stage_cluster)
    from graphopt.hardware import load_cluster
    from graphopt.sim.pipeline import PipelinePlan, split_cost

    kind, count = parse_devices(devices)
    if kind != "cpu":
        raise GraphoptError(f"--devices {devices}: pipelines run on CPU processes (cpu:K) here")
    plan = PipelinePlan.load(plan_path)
    if plan.model != graph:
        raise GraphoptError(f"{plan_path}: the plan splits {plan.model}, not {graph}")
    if plan.stages != count:
        raise GraphoptError(f"--devices {devices}: {plan_path} has {plan.stages} stages; give "
                            f"cpu:{plan.stages}")
    model = _model(graph)
    if plan.bounds[-1] != len(model.layers):
        raise GraphoptError(f"{plan_path}: bounds end at layer {plan.bounds[-1]}; {graph} has "
                            f"{len(model.layers)} layers")
    c = stage_cluster(load_cluster(cluster or "cpu"), count)
    # priced as the plan was made: profiled layers and shared cores where it was measured
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
    t = Table(title=f"{graph}: layers {'/'.join(str(b - a) for a, b in zip(plan.bounds, plan.bounds[1:]))} "
                    f"on {devices}, {sched}, {plan.microbatches} microbatches")
    for col in ("", "step ms", "samples/s", *(f"stage {s} peak" for s in range(count))):
        t.add_column(col, justify="left" if not col else "right")
    from graphopt.ir.graph import format_bytes

    t.add_row("measured", f"{m.median * 1e3:.2f}", f"{m.throughput:,.1f}",
              *(format_bytes(x) for x in m.memory))
    t.add_row(f"simulated ({c.name})", f"{sim.step_time * 1e3:.2f}",
              f"{sim.throughput(model.batch):,.1f}", *(format_bytes(x) for x in sim.memory))
    t.caption = (f"median of {steps} steps after a warm-up; first step's loss "
                 f"{m.loss:.6f}, unsplit model's {ref:.6f} (difference {abs(m.loss - ref):.2e})")
    console.print(t)
    if not abs(m.loss - ref) <= 1e-4 * max(1.0, abs(ref)):
        raise ExecutionError(f"the pipeline's loss {m.loss:.6f} differs from the unsplit "
                            f"model's {ref:.6f}")
