"""``graphopt export``: a plan as accelerate's device map or pipelining's split points."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import GRAPH_HELP, console
from graphopt.cli.options import cluster_option, out_option
from graphopt.errors import GraphoptError, PlanError, UsageError
from graphopt.frontends.source import Source

app = typer.Typer()

FORMATS = ("device-map", "pipeline")


@app.command()
def export(
    plan: Path = typer.Argument(..., help="plan.json (graphopt optimize ... --out DIR writes "
                                          "DIR/METHOD/plan.json), or a pipeline plan "
                                          "(optimize --task pipeline writes "
                                          "DIR/METHOD/pipeline.json). Example: runs/r/expert/plan.json"),
    graph: str | None = typer.Option(None, "--graph", "-g",
                                     help=f"The graph a plan.json was made for (a pipeline "
                                          f"plan names its own). {GRAPH_HELP}. A training "
                                          "step's pipeline needs its program: a model "
                                          "(zoo:, hf:, py:), not a graph file"),
    fmt: str = typer.Option(..., "--format", "-f",
                            help="device-map: accelerate's {module: device} JSON; pipeline: "
                                 "torch.distributed.pipelining's split_spec (JSON), or for a "
                                 "pipeline plan a script that runs it on the model with "
                                 "torch.distributed.pipelining (torchrun). Example: pipeline"),
    out: Path = out_option(..., "File to write: JSON, or the script (.py) of a pipeline "
                                "plan. Example: map.json"),
    cluster: str | None = cluster_option(
        what="It prices the ops a device map moves and names its devices",
        default_help="default cpu:N, N the plan's device count", example="cpu-v100:3"),
    max_memory: str | None = typer.Option(
        None, "--max-memory",
        help="device-map only: bytes per device as accelerate's max_memory, DEVICE=SIZE "
             "entries (a GPU index, cpu or disk; SIZE as 2GiB, 500MB or bytes). Where the "
             "plan's map does not fit (weights plus the simulated forward's peak), modules "
             "move to later devices in program order. Example: 0=2GiB,1=2GiB"),
) -> None:
    """Export a plan to the tools users run: a Hugging Face accelerate device_map where the
    plan places whole modules, or torch.distributed.pipelining split points where it is a
    sequence of contiguous stages.

    Example: graphopt export runs/r/expert/plan.json --graph zoo:rnnlm-2-quick
    --format device-map -o map.json
    """
    from graphopt.exec.export import (device_map, fit_device_map, parse_max_memory,
                                      pipeline_split)
    from graphopt.frontends import load_source
    from graphopt.hardware import load_cluster
    from graphopt.sim import Plan

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if _is_pipeline_plan(plan):
        _export_pipeline_plan(plan, graph, fmt, out, max_memory)
        return
    if max_memory is not None and fmt != "device-map":
        raise UsageError("--max-memory applies to --format device-map only")
    budget = parse_max_memory(max_memory) if max_memory is not None else None
    if graph is None:
        raise UsageError(f"--graph: give the graph {plan} was made for")
    check_output(out, "--out")
    p = Plan.load(plan)
    fit = None
    try:
        if fmt == "device-map":
            g = load_source(graph)
            c = load_cluster(cluster) if cluster else None
            dm = device_map(g, p, c)
            if budget is None:
                dm.save(out)
            else:
                fit = fit_device_map(_forward(g, graph), dm.device_map, budget)
                fit.save(out)
        else:
            from graphopt.exec.api import trace_source

            # a model's graph is a training step: only its program tells forward from backward
            program = trace_source(graph) if Source.parse(graph).has_model else load_source(graph)
            split = pipeline_split(program, p)
            split.save(out)
    except PlanError as err:  # the plan does not fit the graph or the cluster
        raise PlanError(f"{plan}: {err}") from None
    if fmt == "pipeline":
        console.print(f"{len(split.stages)} stage(s) on devices "
                      f"{', '.join(map(str, split.stages))}; split_spec {split.split_spec}; "
                      f"written to {out}", highlight=False)
        return
    if fit is not None:
        from graphopt.ir.graph import format_bytes

        console.print(f"{len(fit.device_map)} module(s) mapped within --max-memory"
                      f"{f', {len(fit.moved)} moved off the plan' if fit.moved else ''}; "
                      f"written to {out}", highlight=False)
        console.print("simulated peak per device: " + ", ".join(
            f"{d} {format_bytes(fit.memory[d])} of {format_bytes(fit.max_memory[d])}"
            for d in fit.memory), highlight=False)
        console.print("the plan's map, before fitting:", highlight=False)
    else:
        console.print(f"{len(dm.device_map)} module(s) mapped; written to {out}",
                      highlight=False)
    if not dm.disagree:
        console.print("every op sits where the map puts its module")
        return
    share = dm.disagree_seconds / dm.total_seconds if dm.total_seconds > 0 else 0.0
    t = Table(title=f"{len(dm.disagree)} op(s) the map moves: {dm.disagree_seconds * 1e3:.3f} ms "
                    f"simulated, {share:.1%} of all op time"
                    + (" (the slowest 10)" if len(dm.disagree) > 10 else ""))
    for col in ("op", "module", "plan device", "map device", "simulated ms"):
        t.add_column(col, justify="right" if col.endswith(("device", "ms")) else "left")
    for d in dm.disagree[:10]:
        t.add_row(d.node, d.module or "-", str(d.device), str(d.mapped), f"{d.seconds * 1e3:.4f}")
    console.print(t)


def _forward(g, source: str):
    """The forward pass of ``g``, what accelerate runs: a training step's forward ops (its
    program tells them apart: ``zoo:NAME``; a graph file of one is refused)."""
    if not g.meta.get("training"):
        return g
    import numpy as np

    from graphopt.exec.api import trace_source
    from graphopt.exec.export import forward_ops

    program = trace_source(source) if Source.parse(source).has_model else g
    return g.subgraph(np.flatnonzero(forward_ops(program)))


def _is_pipeline_plan(path: Path) -> bool:
    """Whether ``path`` names a pipeline plan by its ``format`` field (read again by its
    loader, which checks the rest)."""
    from graphopt._files import read_json
    from graphopt.sim.pipeline import PIPELINE_FORMAT

    try:
        doc = read_json(path)
    except GraphoptError:
        return False  # the plan's own loader names what is wrong
    return isinstance(doc, dict) and doc.get("format") == PIPELINE_FORMAT


def _export_pipeline_plan(path: Path, graph: str | None, fmt: str, out: Path,
                          max_memory: str | None) -> None:
    """A pipeline plan as the script that runs it (``--format pipeline``)."""
    from graphopt._files import atomic_write
    from graphopt.exec.pipeline import pipeline_script
    from graphopt.sim.pipeline import PipelinePlan

    if fmt != "pipeline":
        raise UsageError(f"--format {fmt}: {path} is a pipeline plan; give --format pipeline")
    if max_memory is not None:
        raise UsageError("--max-memory applies to --format device-map only")
    check_output(out, "--out")
    p = PipelinePlan.load(path)
    if graph is not None and graph != p.model:
        raise UsageError(f"--graph {graph}: {path} splits {p.model}")
    text = pipeline_script(p, out.name)
    atomic_write(out, lambda f: f.write(text.encode()))
    console.print(f"split_spec {p.split_spec()}; {p.stages} stage(s), {p.schedule}, "
                  f"{p.microbatches} microbatches; script written to {out} (run it with: "
                  f"torchrun --standalone --nproc-per-node {p.stages} {out})",
                  highlight=False, soft_wrap=True)
