"""Commands about optimization methods: ``optimize`` and ``methods``."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import GRAPH_HELP, console, evaluation_backend
from graphopt.cli.locks import lock_folder
from graphopt.cli.params import PARAM_HELP, field_help, method_params
from graphopt.cli.warmup import compile_simulator
from graphopt.cli.options import (address_option, backend_option, budget_option,
                                  cluster_option, default_cluster, methods_option, out_option,
                                  seed_option, split_methods)
from graphopt.errors import ClusterError, GraphoptError, UsageError
from graphopt.frontends.source import Source

#: :data:`graphopt.exec.api.PROGRAM_TIMING` (named here: that module imports torch)
PROGRAM_TIMING = "program_timing.json"

app = typer.Typer()

#: ``--methods``' default (the pipeline task has its own).
_DEFAULT_METHODS = "single,expert,metis,m-etf,heft,sa"


@app.command()
def optimize(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    cluster: str | None = cluster_option(
        what="With a PyTorch program (zoo:NAME, .pt2) and a calibrated file, the program's "
             "ops are first timed on one worker, as 'graphopt run' does"),
    task: str = typer.Option("placement", "--task", "-t",
                             help="What to decide, comma-separated: placement, scheduling, "
                                  "fusion; or pipeline (a model's blocks, e.g. a "
                                  "transformer's layers, split into --stages stages, methods "
                                  "even, params, exact; mcm, the learned chiplet policy, only "
                                  "when named in --methods; any source with PyTorch code: "
                                  "hf:, py:, zoo:, pipe:). Example: placement,scheduling"),
    methods: str = methods_option(_DEFAULT_METHODS),
    budget: int = budget_option(2000),
    seconds: float | None = typer.Option(None, "--time", min=0.0,
                                            help="Wall-clock seconds allowed to each method. "
                                                 "Example: 60"),
    objective: str = typer.Option("runtime", "--objective",
                                  help="What searches minimise: runtime (step time) or memory "
                                       "(the highest peak memory over devices); plans out of "
                                       "memory rank last for both. Example: memory"),
    init: str | None = typer.Option(None, "--init",
                                       help="Start every method from this method's plan. "
                                            "Example: metis"),
    seed: int = seed_option(),
    out: Path | None = out_option(None, "Folder for plan.json, trace.json and gantt.png per "
                                        "method and report.json. Example: runs/gnmt4"),
    param: list[str] = typer.Option([], "--param", "-p", help=PARAM_HELP),
    measure: bool = typer.Option(False, "--measure",
                                 help="Also run each method's final plan for real (graphopt "
                                      "run) and add its measured step time; only for PyTorch "
                                      "programs: zoo:NAME (zoo:NAME-quick at CPU size) or .pt2. "
                                      "With --task pipeline the splits are also planned from "
                                      "what this host measures (layers profiled here, the "
                                      "runtime's overhead, its cores)"),
    devices: str | None = typer.Option(None, "--devices", "-d",
                                          help="Devices --measure runs on: cpu:N (N worker "
                                               "processes) or cuda:N; default cpu:N, N the "
                                               "cluster's device count. Example: cpu:2"),
    measure_steps: int = typer.Option(3, "--measure-steps", min=1,
                                      help="Timed steps per plan with --measure, after one "
                                           "warm-up step; the plans run in turns, a step "
                                           "each, so that a machine whose speed drifts "
                                           "weighs on all alike. Example: 10"),
    backend: str = backend_option(),
    address: str | None = address_option(),
    stages: int = typer.Option(2, "--stages", min=1, max=4096,
                               help="With --task pipeline: pipeline stages (one process or "
                                    "device each). Example: 4"),
    microbatches: str = typer.Option("auto", "--microbatches",
                                     help="With --task pipeline: microbatches per step, a count "
                                          "that divides the batch, or auto (the count among "
                                          "the powers of two that divide it whose exact split "
                                          "is fastest). Example: 8"),
    schedule: str = typer.Option("auto", "--schedule",
                                 help="With --task pipeline: gpipe, 1f1b, interleaved (1F1B "
                                      "with --virtual-stages chunks a stage), or auto (the "
                                      "faster of gpipe and 1f1b that fits; 1f1b on a tie, as "
                                      "it holds fewer activations; interleaved only when "
                                      "asked: measured no faster on CPU processes). "
                                      "Example: interleaved"),
    virtual_stages: int = typer.Option(2, "--virtual-stages", min=1, max=64,
                                       help="With --task pipeline and --schedule "
                                            "interleaved: chunks of layers each stage runs, "
                                            "stages x chunks cut round-robin. Example: 2"),
    memory_fraction: float | None = typer.Option(
        None, "--memory-fraction", min=0.0,
        help="Give every device the persistent bytes (weights, optimizer state) of the "
             "compiler defaults (one device, first ready first run, XLA's fusion) plus only "
             "this fraction of the rest of their peak memory, so that below 1 the default "
             "plan no longer fits and the order decides what does. Example: 0.8"),
) -> None:
    """Compare optimization methods on a graph: a table of step time, speed-ups,
    memory and search cost, and a plan, Chrome trace and Gantt chart per method.

    Ctrl-C (or SIGTERM, SIGHUP) stops the running method with its best plan so far and
    skips the rest; the table and the files then hold what was done, and the exit code is
    130. A second run into the same --out is refused while the first one lasts.

    Example: graphopt optimize zoo:gnmt-4 --methods single,expert,metis,sa --out runs/gnmt4
    """
    from graphopt.hardware import load_cluster
    from graphopt.optim import Budget
    from graphopt.optim.compare import compare, output_paths, write_outputs
    from graphopt.sim import Problem

    if task == "pipeline":
        from graphopt.cli.pipeline import DEFAULT_METHODS, optimize_pipeline, refuse_unused

        chosen = split_methods(DEFAULT_METHODS if methods == _DEFAULT_METHODS else methods)
        refuse_unused({"--init": init is not None, "-p": bool(param),
                       "--objective": objective != "runtime", "--time": seconds is not None,
                       "--memory-fraction": memory_fraction is not None,
                       "--devices": devices is not None, "--backend": backend != "local",
                       "--virtual-stages": virtual_stages != 2 and schedule != "interleaved"})
        check_output(out, "--out", folder=True)
        _lock = lock_folder(out)  # held while the run lasts: a second run into --out is refused
        optimize_pipeline(graph, cluster, stages, microbatches, schedule, chosen, out,
                          measure, measure_steps, seed, virtual_stages)
        return
    names = split_methods(methods)
    if not names:
        raise UsageError(f"--methods {methods!r}: no method named; 'graphopt methods' "
                         "lists them")
    if measure and "single" not in names:  # what a user has without us: measured beside
        names = ["single", *names]
    check_output(out, "--out", folder=True)
    for path in output_paths(out, names) if out else ():  # a file where a method's folder goes
        check_output(path, "--out")
    check_output(out and out / PROGRAM_TIMING, "--out")  # a calibrated cluster's
    params = method_params(param, names)
    _lock = lock_folder(out)  # held while the run lasts: a second run into --out is refused
    c = load_cluster(cluster or default_cluster(graph))
    traced = _measurable(graph, c.num_devices, devices) if measure else None
    if devices and not measure:
        raise UsageError(f"--devices {devices}: only with --measure")
    source = Source.parse(graph)
    if traced is None and source.runs and c.calibration is not None:
        # a cluster of this machine's workers: search on the program's ops as the
        # engine runs them, as 'graphopt run' predicts
        from graphopt.exec.api import trace_source

        traced = trace_source(graph)
    g = traced.graph if traced is not None else source.graph()
    compile_simulator()
    if traced is not None:
        from graphopt.cli.run import timing_status
        from graphopt.exec.api import program_problem

        with timing_status(c):
            prob = timed = program_problem(traced, c)
    else:
        prob = Problem(g, c)
    if memory_fraction is not None:
        try:
            prob = prob.with_memory_fraction(memory_fraction)
        except ClusterError as err:  # a fraction so large a device's memory is inf
            raise ClusterError(f"--memory-fraction {memory_fraction:g}: {err}") from None
        c = prob.cluster
    with evaluation_backend(backend, address), console.status("") as status:
        results = compare(prob, names, task, Budget(budget, seconds, objective), seed, init,
                          on_start=lambda m: status.update(f"running {m} on {g.name} ..."),
                          params=params)
    if traced is not None:
        _measure(traced, results, devices or f"cpu:{c.num_devices}", measure_steps, seed)
    ref = {r.method: r.step_time for r in results if r.result.valid}
    t = Table(title=f"{g.name} ({g.num_nodes:,} ops) on {c.name}, task {task}, objective "
                    f"{objective}, lower bound {prob.lower_bound * 1e3:.3f} ms")
    for col in ("method", "step ms", "vs single", "vs expert", "step/bound", "valid",
                "peak per device", "search s", "evals"):
        t.add_column(col, justify="left" if col in ("method", "valid") else "right")
    if measure:
        for col in ("measured ms", "measured vs single"):
            t.add_column(col, justify="right")
        t.caption = (f"measured: median of {measure_steps} steps after a warm-up on "
                     f"{devices or f'cpu:{c.num_devices}'}, the plans in turns")
    from graphopt.ir.graph import format_bytes

    for r in results:
        res, st = r.result, r.stats

        def vs(name, res=res):
            return f"{ref[name] / res.step_time:.2f}x" if name in ref and res.valid else "-"

        t.add_row(r.method, f"{res.step_time * 1e3:.3f}", vs("single"), vs("expert"),
                  f"{res.step_time / res.lower_bound:.2f}" if res.lower_bound > 0 else "-",
                  "yes" if res.valid else f"[red]{res.reason}[/]",
                  " / ".join(format_bytes(x) for x in res.peak_memory),
                  f"{st.get('seconds', 0):.1f}", f"{st.get('evals', 0):,}",
                  *_measured_cells(r.measured) if measure else ())
    console.print(t)
    rec = _recommend(results, c) if measure and results and results[0].measured else None
    if measure and results and not results[0].measured:
        console.print("interrupted before a round was measured: the plans are kept, "
                      "without measured figures")
    interrupted = len(results) < len(names) or any(r.stats.get("interrupted") for r in results)
    if out and results:
        path = write_outputs(prob, results, out, {"task": task, "budget": budget, "seed": seed,
                                                  "objective": objective,
                                                  "params": params, "interrupted": interrupted,
                                                  "recommended": rec and rec.to_dict()})
        console.print(f"plans, traces and Gantt charts in {out}/<method>/; report: {path}")
        if traced is not None and c.calibration is not None:  # for `graphopt run --plan`
            from graphopt.exec.api import save_program_timing

            save_program_timing(timed, traced, c, out / PROGRAM_TIMING)
            console.print(f"op times (for graphopt run --plan): {out / PROGRAM_TIMING}")
    if interrupted:
        console.print(f"interrupted: {len(results)} of {len(names)} methods ran, the last one "
                      "with its best plan so far")
        raise typer.Exit(130)


def _measurable(graph: str, count: int, devices: str | None):
    """The PyTorch program of ``graph``, checked before any search so that --measure
    never fails after it: a source that runs for real, on one device per cluster device."""
    from graphopt.exec.api import parse_devices, trace_source

    _, n = parse_devices(devices or f"cpu:{count}")
    if n != count:
        raise UsageError(f"--devices {devices} has {n} device(s); the cluster has {count}, "
                         "and a plan needs one real device for each")
    try:
        return trace_source(graph)
    except GraphoptError as err:
        raise UsageError(f"--measure: {err}") from err


def _measure(traced, results: list, devices: str, steps: int, seed: int) -> None:
    """Run each result's plan for real, the plans in turns on one set of devices, and set
    its ``measured``. A signal (Ctrl-C, SIGTERM, SIGHUP) ends the rounds: those done are
    kept (none: ``measured`` stays None), and the last result says it was interrupted."""
    from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
    from graphopt.exec.api import PlacedProgram, measure_plans, parse_devices
    from graphopt.exec.workers import CPUWorkers

    kind, count = parse_devices(devices)
    with console.status(f"measuring {len(results)} plans in turns on {devices} ..."), \
            stop_on_interrupt():
        pool = CPUWorkers(count) if kind == "cpu" and count > 1 else None
        try:
            placed = [PlacedProgram(traced, r.plan, devices, seed=seed, pool=pool) for r in results]
            timings = measure_plans(placed, steps=steps, stop=stop_requested)
            if stop_requested() and results:
                results[-1].stats["interrupted"] = True
        finally:
            if pool is not None:
                pool.close()
    if not timings:
        return
    for r, timing in zip(results, timings):
        r.measured = {k: timing[k] for k in ("median", "min", "max", "steps", "times")} | {
            "devices": devices}
    single = next((r.measured["median"] for r in results if r.method == "single"), None)
    for r in results:
        r.measured["speedup_vs_single"] = single / r.measured["median"] if single else None


#: How far the simulated speed-up over one device may stray from the measured one before
#: ``optimize --measure`` says why (the placement simulator's stated error on calibrated
#: CPU workers is about 10%, docs/execution.md).
STATED_ERROR = 0.15


def _recommend(results: list, cluster):
    """Print and return what the measurement recommends (:func:`graphopt.exec.decide.recommend`)
    over one device, and say why where the simulator's speed-up and the measured one disagree."""
    from graphopt.exec.decide import recommend

    sim = {r.method: r.step_time for r in results}
    rec = recommend({r.method: r.measured["times"] for r in results}, "single")
    console.print(rec.sentence("one device"), highlight=False)
    for r in results:
        predicted = sim["single"] / sim[r.method]
        got = r.measured["speedup_vs_single"]
        if r.method != "single" and got and abs(predicted / got - 1) > STATED_ERROR:
            how = ("calibrated on a worker of this machine" if cluster.calibration is not None
                   else "a preset's datasheet figures, not this machine's")
            console.print(f"{r.method}: simulated {predicted:.2f}x one device, measured "
                          f"{got:.2f}x: the plan was priced on {cluster.name} ({how}); to "
                          f"price this host: graphopt calibrate --devices "
                          f"{r.measured['devices']} -o cluster.toml, then -c cluster.toml",
                          highlight=False, soft_wrap=True)
    return rec


def _measured_cells(measured: dict | None) -> tuple[str, str]:
    if measured is None:
        return "-", "-"
    speedup = measured["speedup_vs_single"]
    return f"{measured['median'] * 1e3:.2f}", f"{speedup:.2f}x" if speedup else "-"


@app.command()
def methods(
    name: str | None = typer.Argument(None, help="A method whose hyperparameters to list "
                                                 "(the KEYs of -p METHOD.KEY=VALUE). "
                                                 "Example: sa"),
) -> None:
    """List the optimization methods graphopt knows, or one method's hyperparameters.

    Example: graphopt methods rl-lstm
    """
    import dataclasses
    import typing

    if name is None:  # read from the sources: importing the methods takes seconds
        from graphopt.optim.catalog import catalog, catalog_tasks

        t = Table(title="methods (graphopt methods NAME lists a method's hyperparameters)")
        t.add_column("name")
        t.add_column("tasks (--task)")
        t.add_column("what it is")
        tasks = catalog_tasks()
        for method, what in catalog().items():
            t.add_row(method, tasks[method], what)
        console.print(t)
        return
    from graphopt.optim import get_optimizer
    cls = type(get_optimizer(name))
    hints = typing.get_type_hints(cls)
    t = Table(title=f"{name}: hyperparameters, set with -p {name}.KEY=VALUE")
    for col in ("key", "type", "default", "what it is"):
        t.add_column(col)
    for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
        kind = hints[f.name]
        t.add_row(f.name, getattr(kind, "__name__", str(kind)), repr(f.default), field_help(f))
    console.print(t)
