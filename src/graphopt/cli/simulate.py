"""Commands that simulate: ``simulate``, ``profile``, ``clusters`` and ``demo``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import GRAPH_HELP, check_plan, console
from graphopt.cli.options import cluster_option, default_cluster, out_option
from graphopt.errors import UsageError
from graphopt.frontends import load_source
from graphopt.ir.graph import format_bytes

app = typer.Typer()


@app.command()
def simulate(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    cluster: str | None = cluster_option(example="h100:8"),
    plan: Path | None = typer.Option(None, "--plan", "-p",
                                        help="plan.json to simulate; default: everything on "
                                             "device 0, FIFO order, compiler fusion. "
                                             "Example: runs/sa/plan.json"),
    profile: Path | None = typer.Option(None, "--profile",
                                           help="Measured op times (from 'graphopt profile') "
                                                "that replace the roofline for devices of the "
                                                "profile's kind, or of KIND with FILE@KIND. "
                                                "Example: prof.json@V100-SXM2-16GB"),
    trace: Path | None = typer.Option(None, "--trace",
                                         help="Write a Chrome trace (open in Perfetto). "
                                              "Example: trace.json"),
    gantt: Path | None = typer.Option(None, "--gantt", help="Write a Gantt chart PNG. "
                                                              "Example: gantt.png"),
    out: Path | None = typer.Option(None, "--json", help="Write the result as JSON. "
                                                           "Example: result.json"),
) -> None:
    """Simulate a plan of a graph on a cluster: step time, memory, validity.

    Exit status: 0 when the plan was simulated, valid or not;
    an invalid plan (e.g. out of memory) shows in red and as "valid": false in --json.
    2 for bad input: one line names the file or option at fault.

    Example: graphopt simulate example:mlp --cluster dgx1-v100:2 --gantt g.png
    """
    from graphopt.hardware import load_cluster
    from graphopt.sim import Plan, Problem
    from graphopt.sim import simulate as run

    for path, option in ((trace, "--trace"), (gantt, "--gantt"), (out, "--json")):
        check_output(path, option)
    g = load_source(graph)
    c = load_cluster(cluster or default_cluster(graph))
    prof = _load_profile_arg(profile) if profile else None
    p = Plan.load(plan) if plan else Plan()
    prob = Problem(g, c, profile=prof)
    check_plan(p, prob, plan, same_graph=True)
    r = run(prob, p, timeline=bool(trace or gantt))
    show_result(prob, r, title=f"{g.name} on {c.name}")
    if trace:
        from graphopt.sim.trace import save_chrome_trace

        save_chrome_trace(prob, r, trace)
        console.print(f"trace: {trace}")
    if gantt:
        from graphopt.viz import gantt as draw

        draw(prob, r, gantt)
        console.print(f"gantt: {gantt}")
    if out:
        from graphopt._files import atomic_write

        text = json.dumps({"graph": g.name, "cluster": c.name, **r.to_dict()}, indent=1)
        atomic_write(out, lambda f: f.write(text.encode()))
        console.print(f"result: {out}")


def _load_profile_arg(spec: Path):
    from graphopt.cost.profile import Profile

    path, _, kind = str(spec).partition("@")
    if not path:  # Path("") is the current folder: "cannot read ." would not say why
        raise UsageError(f"--profile {spec}: no file before '@'; expected FILE or FILE@KIND")
    p = Profile.load(path)
    return p.for_kind(kind) if kind else p


def show_result(prob, r, title: str) -> None:
    """Print a simulation result as a table."""
    t = Table(title=title, show_header=False)
    t.add_row("step time", f"{r.step_time * 1e3:.3f} ms")
    t.add_row("lower bound", f"{r.lower_bound * 1e3:.3f} ms  (step / bound = "
                             f"{r.step_time / r.lower_bound:.2f})" if r.lower_bound > 0 else "0")
    t.add_row("valid", "yes" if r.valid else f"[red]no: {r.reason}[/]")
    t.add_row("kernels", f"{r.num_kernels:,} (from {prob.num_nodes:,} ops)")
    t.add_row("bytes moved", format_bytes(r.bytes_moved))
    console.print(t)
    d = Table(title="devices")
    for col in ("device", "kind", "busy ms", "utilization", "peak", "capacity"):
        d.add_column(col, justify="right" if col not in ("device", "kind") else "left")
    for j, dev in enumerate(prob.cluster.devices):
        util = r.busy[j] / r.step_time if r.step_time > 0 else 0.0
        style = "red" if r.peak_memory[j] > dev.memory else ""
        d.add_row(dev.name, dev.kind, f"{r.busy[j] * 1e3:.3f}", f"{util:.0%}",
                  f"[{style}]{format_bytes(r.peak_memory[j])}[/]" if style
                  else format_bytes(r.peak_memory[j]), format_bytes(dev.memory))
    console.print(d)


@app.command()
def profile(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    output: Path = typer.Option(..., "--output", "-o", help="Profile JSON to write. "
                                                             "Example: profile.json"),
    device: str = typer.Option("cpu", help="PyTorch device to measure on: cpu or cuda. "
                                           "Example: cuda"),
    repeats: int = typer.Option(10, min=1, help="Timed runs per op (the median is kept)."),
    max_ops: int | None = typer.Option(None, min=1, help="Measure at most this many "
                                                            "distinct ops. Example: 200"),
    time_limit: float | None = typer.Option(None, min=0.0, help="Stop after this many "
                                                                    "seconds. Example: 60"),
) -> None:
    """Measure a graph's ops on this machine with PyTorch and write a profile.

    The profile replaces the roofline estimate for the ops it covers:
    graphopt simulate GRAPH --profile profile.json@KIND

    Example: graphopt profile example:mlp -o profile.json
    """
    from graphopt.cost.profile import profile_graph

    check_output(output, "--output")
    g = load_source(graph)
    p = profile_graph(g, device=device, repeats=repeats, max_ops=max_ops,
                      time_limit=time_limit)
    p.save(output)
    console.print(f"measured {len(p.entries)} distinct ops on {p.device_kind}; wrote {output}")
    if p.meta.get("repeats_cut"):
        console.print(f"--time-limit {time_limit:g} s reached: the last op kept the median of "
                      f"fewer than {repeats:,} runs; {p.meta['signatures'] - p.meta['measured']} "
                      "op(s) left to the roofline")
    if p.meta["too_large"]:
        console.print(f"{p.meta['too_large']} op(s) left to the roofline: their tensors would take "
                      "more than half this device's memory")


@app.command()
def clusters() -> None:
    """List the built-in cluster presets (use them as NAME or NAME:COUNT).

    Example: graphopt clusters
    """
    from graphopt.hardware import list_presets, load_cluster

    t = Table(title="cluster presets")
    for col in ("name", "devices", "kind", "peak TFLOP/s (fp32/16-bit)", "memory GiB",
                "mem GB/s", "link GB/s (min..max)"):
        t.add_column(col)
    for name in list_presets():
        c = load_cluster(name)
        kinds = sorted({d.kind for d in c.devices}, key=lambda k: [d.kind for d in c.devices].index(k))
        dev = [d for d in c.devices if d.kind == kinds[-1]][0]
        half = dev.peak_flops.get("bfloat16", dev.peak_flops.get("float16", 0))
        off = c.bandwidth[~np.eye(c.num_devices, dtype=bool)] if c.num_devices > 1 else np.array([0.0])
        t.add_row(name, str(c.num_devices), " + ".join(kinds),
                  f"{dev.matrix_flops('float32') / 1e12:.1f} / {half / 1e12:.1f}",
                  f"{dev.memory / 2**30:.0f}", f"{dev.mem_bw / 1e9:.0f}",
                  f"{off.min() / 1e9:.0f}..{off.max() / 1e9:.0f}")
    console.print(t)


@app.command()
def demo(out: Path = out_option(Path("runs/demo"), "Folder for the output files. "
                                                  "Example: runs/demo"),
         cluster: str = cluster_option("dgx1-v100:2", default_help="default dgx1-v100:2, "
                                                                   "where the demo's MLP fits",
                                       example="h100:4"),
         ) -> None:
    """The main job on built-in defaults: simulate an MLP training step on a cluster, on
    one device and split layer-wise across devices, and write traces and Gantt charts.

    Example: graphopt demo --out runs/demo --cluster dgx1-v100:2
    """
    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.sim import Plan, Problem
    from graphopt.sim import simulate as run
    from graphopt.sim.trace import save_chrome_trace
    from graphopt.viz import gantt as draw

    check_output(out, "--out", folder=True)
    c = load_cluster(cluster)
    g = mlp_training_graph(layers=8, hidden=4096, batch=256)
    prob = Problem(g, c)
    layer = np.array([int(m.split(".")[1]) if m.startswith("layers.") else -1 for m in g.module])
    layer[layer < 0] = layer.max()
    plans = {"single": Plan(), "layer-wise": Plan(placement=layer * c.num_devices // (layer.max() + 1)),
             "no-fusion": Plan(fusion=np.zeros(g.num_nodes))}
    t = Table(title=f"{g.name} ({g.num_nodes} ops) on {c.name}")
    for col in ("plan", "step ms", "vs single", "step/bound", "valid", "peak memory per device"):
        t.add_column(col)
    base = None
    for name, p in plans.items():
        r = run(prob, p, timeline=True)
        base = base or r.step_time
        t.add_row(name, f"{r.step_time * 1e3:.3f}", f"{base / r.step_time:.2f}x",
                  f"{r.step_time / r.lower_bound:.2f}", "yes" if r.valid else r.reason,
                  " / ".join(format_bytes(x) for x in r.peak_memory))
        d = out / name
        p.save(d / "plan.json")
        save_chrome_trace(prob, r, d / "trace.json")
        draw(prob, r, d / "gantt.png", title=f"{g.name} on {c.name}: {name}")
    console.print(t)
    console.print(f"plans, Chrome traces and Gantt charts in {out}/<plan>/")
