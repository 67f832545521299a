"""``graphopt run``: a plan executed for real, beside the simulator's prediction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console
from graphopt.cli.signals import interrupt_on_signals
from graphopt.cli.options import cluster_option, out_option, seed_option
from graphopt.errors import ClusterError, GraphoptError, UsageError

app = typer.Typer()


@app.command()
def run(
    graph: str = typer.Argument(..., help="A PyTorch program: zoo:NAME (a training step; "
                                          "zoo:NAME-quick at CPU size) or a torch.export .pt2 "
                                          "file. Example: zoo:rnnlm-2-quick"),
    plan: Path | None = typer.Option(None, "--plan", "-p",
                                        help="plan.json made for the same graph source (graphopt "
                                             "optimize ... --out DIR writes DIR/METHOD/plan.json); "
                                             "default: every op on device 0. "
                                             "Example: runs/rnnlm/sa/plan.json"),
    devices: str = typer.Option("cpu:2", "--devices", "-d",
                                help="cpu:N runs N worker processes, each pinned to its share "
                                     "of this machine's cores; cuda:N uses N GPUs. Example: cpu:2"),
    steps: int = typer.Option(5, "--steps", min=1, max=10_000,
                              help="Timed steps after one warm-up step. Example: 10"),
    cluster: str | None = cluster_option(
        what="The simulated step time is taken on it; with a file from 'graphopt calibrate', "
             "every op of the program is first timed on one worker, as a profile, then on "
             "every worker at once, for how much they slow each other, and with pauses, for "
             "what a wait costs the ops after it",
        default_help="default the 'cpu' preset with the same device count, or on GPUs the "
                     "preset of this GPU (h100 for an H100 or H200)", example="cluster.toml"),
    trace: Path | None = typer.Option(None, "--trace",
                                      help="Write a Chrome trace of the last real step, and the "
                                           "simulated one beside it as *.sim.json. "
                                           "Example: real.json"),
    seed: int = seed_option("Seed of the random ops (dropout)."),
    pipeline: Path | None = typer.Option(
        None, "--pipeline",
        help="A pipeline plan (graphopt optimize pipe:MODEL --task pipeline --out DIR writes "
             "DIR/METHOD/pipeline.json): the model's stages run by torch.distributed.pipelining "
             "on --devices cpu:K processes, measured beside the simulator, the loss checked "
             "against the unsplit model's. Example: runs/p/exact/pipeline.json"),
) -> None:
    """Run a plan for real and compare its measured step time and peak memory per device
    with the simulator's.

    Example: graphopt run zoo:rnnlm-2-quick --plan runs/r/sa/plan.json --devices cpu:2
    """
    from graphopt.exec.api import (PROGRAM_TIMING, apply_traced, default_cluster,
                                   load_program_timing, parse_devices, program_problem,
                                   save_trace, simulated_peak_memory, trace_source)
    from graphopt.hardware import load_cluster
    from graphopt.sim import Plan, simulate
    from graphopt.sim.plan import check_made_for

    if pipeline is not None:
        from graphopt.cli.pipeline import run_pipeline

        if plan is not None or trace is not None:
            raise UsageError("--pipeline runs a pipeline plan: leave out --plan and --trace")
        with interrupt_on_signals():
            run_pipeline(graph, pipeline, devices, cluster, steps, seed)
        return
    check_output(trace, "--trace")
    check_output(trace and trace.with_suffix(".sim.json"), "--trace (the simulated trace beside it)")
    kind, count = parse_devices(devices)
    p = Plan.load(plan) if plan else Plan()
    try:
        c = load_cluster(cluster or default_cluster(kind, count))
    except ClusterError as err:
        if cluster:
            raise
        hint = f" ('graphopt calibrate --devices {devices} -o FILE' writes one)" \
            if kind == "cpu" else ""
        raise ClusterError(f"--devices {devices}: {err} (the default --cluster); give a "
                           f"cluster of {count} devices{hint}") from None
    if c.num_devices != count:
        raise UsageError(f"--cluster {c.name} has {c.num_devices} devices; --devices "
                         f"{devices} has {count}")
    traced = trace_source(graph)
    if plan is not None:  # before a calibrated cluster's timing
        try:
            check_made_for(p, traced.graph)
            p.check(traced.graph.num_nodes, c.num_devices)
        except GraphoptError as err:
            raise type(err)(f"{plan}: {err}") from None
    with interrupt_on_signals():  # SIGTERM as Ctrl-C: the workers closed, exit 130
        # the op times `optimize --out` timed this program with, where it made the plan
        kept = plan.parent.parent / PROGRAM_TIMING if plan is not None else None
        prob = load_program_timing(kept, traced, c) if kept and c.calibration else None
        if prob is not None:
            console.print(f"op times of {kept} (as graphopt optimize predicted the plan)")
        else:
            with timing_status(c):
                prob = program_problem(traced, c)
        # the engine runs op by op: no fusion in the prediction
        sim = simulate(prob, p.replace(fusion=np.zeros(prob.num_nodes)), timeline=trace is not None)
        with console.status(f"starting {count} {kind} device(s)"):
            placed = apply_traced(traced, p, devices, seed=seed)
        with placed:
            with console.status(f"running {steps + 1} steps"):
                timing = placed.measure(steps=steps, warmup=1)
                last = placed()
            with console.status("one step measuring memory"):
                peaks = placed.peak_memory()
    t = Table(title=f"{traced.graph.name}: {traced.graph.num_nodes} ops on {devices}")
    for col in ("measured median", "spread (min-max)", "simulated", "simulated / measured",
                "in-place ops moved"):
        t.add_column(col, justify="right")
    t.add_row(f"{timing['median'] * 1e3:.2f} ms",
              f"{timing['min'] * 1e3:.2f}-{timing['max'] * 1e3:.2f} ms",
              f"{sim.step_time * 1e3:.2f} ms ({c.name})",
              f"{sim.step_time / timing['median']:.2f}x", str(placed.program.moved))
    console.print(t)
    if c.calibration is None and kind == "cpu":  # a preset's figures, not this machine's
        console.print(f"simulated on the preset {c.name}, not on this machine: "
                      f"'graphopt calibrate --devices {devices} -o cluster.toml', then "
                      "--cluster cluster.toml, prices the ops as this host runs them")
    m = Table(title="peak memory per device (measured: the CPU allocator's events in one step)")
    for col in ("device", "measured", "simulated", "simulated / measured"):
        m.add_column(col, justify="right")
    for d, (real, simulated) in enumerate(zip(peaks, simulated_peak_memory(prob, p, devices, traced))):
        m.add_row(f"{kind}:{d}", f"{real / 2**20:.2f} MiB", f"{simulated / 2**20:.2f} MiB",
                  f"{simulated / real:.2f}x" if real else "-")
    console.print(m)
    if trace is not None:
        from graphopt.sim.trace import save_chrome_trace

        save_trace(last, trace, count)
        sim_path = trace.with_suffix(".sim.json")
        save_chrome_trace(prob, sim, sim_path)
        console.print(f"real trace: {trace}\nsimulated trace: {sim_path}")


def timing_status(cluster):
    """A status line while :func:`~graphopt.exec.api.program_problem` times a program on
    a calibrated cluster's workers; nothing for any other cluster."""
    import contextlib

    if cluster.calibration is None:
        return contextlib.nullcontext()
    return console.status("timing every op on one worker, then on all at once")


@app.command()
def calibrate(
    devices: str = typer.Option("cpu:2", "--devices", "-d",
                                help="CPU devices to measure, as graphopt run uses them: cpu:N "
                                     "worker processes, at most one per core this machine "
                                     "gives graphopt (cpu:2 always). "
                                     "Example: cpu:2"),
    out: Path = out_option(..., "Cluster file to write (TOML). Example: cluster.toml"),
) -> None:
    """Measure this machine's devices and links into a cluster file the simulator loads.

    Link latency and bandwidth come from ping-pong between two workers over message
    sizes, the per-op dispatch from a chain of tiny ops, what a wait costs the ops after
    it from that chain with pauses; per-op compute (and the program's own dispatch and
    wake costs) is measured per program when 'graphopt run --cluster FILE' uses the file.

    Example: graphopt calibrate --devices cpu:2 -o cluster.toml
    """
    from graphopt.exec.api import parse_devices
    from graphopt.exec.calibrate import calibrate as measure
    from graphopt.exec.workers import host_cores
    from graphopt.hardware import save_cluster

    check_output(out, "--out")
    kind, count = parse_devices(devices)
    if kind != "cpu":
        raise UsageError(f"--devices {devices}: calibration measures CPU workers (cpu:N)")
    cores = host_cores()
    if count > max(2, cores or 1):  # each worker a process of a few hundred MB, on its own core
        raise UsageError(f"--devices {devices}: this machine gives graphopt {cores} core(s); "
                         f"calibration measures one worker per core, so at most "
                         f"cpu:{max(2, cores or 1)}")
    with interrupt_on_signals(), console.status(f"measuring {count} CPU worker(s)"):
        measured = measure(count)
    save_cluster(measured, out)
    cal = measured.calibration
    t = Table(title=f"{count} CPU worker(s), {cal.cores_per_device} core(s) each")
    for col in ("link latency", "link bandwidth", "dispatch per op", "matmul", "copy",
                "waking: us after an idle of ms"):
        t.add_column(col, justify="right")
    t.add_row(f"{cal.latency * 1e6:.0f} us" if count > 1 else "-",
              f"{cal.bandwidth / 1e9:.2f} GB/s" if count > 1 else "-",
              f"{cal.dispatch * 1e6:.1f} us", f"{cal.matmul_flops / 1e9:.0f} GFLOP/s",
              f"{cal.copy_bandwidth / 1e9:.1f} GB/s",
              ", ".join(f"{c * 1e6:.0f} after {i * 1e3:.2g}" for i, c in cal.wake_cost) or "-")
    console.print(t)
    console.print(f"cluster file: {out}")
