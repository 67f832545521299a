"""The ``graphopt`` command.

Every sub-command prints a table a person can read and writes files a program can;
a mistake in the input prints one line naming what is wrong and exits 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from graphopt.errors import GraphoptError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Optimize ML computation graphs: placement, scheduling and fusion.\n\n"
                       "Example: graphopt simulate graph.npz --cluster dgx1-v100:4 --gantt g.png")
# Tables are wide; when output goes to a file or a pipe, do not squeeze them to 80 columns.
console = Console(width=None if Console().is_terminal else 140)

GRAPH_HELP = ("Graph file (.npz or .json saved by graphopt), a zoo model 'zoo:NAME' (see "
              "'graphopt zoo list'), or a built-in example: 'example:mlp' (a 4-layer MLP "
              "training step) or 'example:layered-N' (a random layered graph of about N ops), "
              "or a model file to import: .pt2 (torch.export.save), .onnx, a TpuGraphs .npz or "
              "tuning .pb. Example: zoo:gnmt-4")


def _fail(err: Exception) -> None:
    console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def load_graph_arg(spec: str):
    """A graph from a file or a built-in example name (see GRAPH_HELP)."""
    from graphopt.ir.generate import layered_graph, mlp_training_graph

    if spec == "example:mlp":
        return mlp_training_graph()
    if spec.startswith("example:layered-"):
        try:
            size = int(spec.split("-", 1)[1])
        except ValueError:
            raise GraphoptError(f"graph {spec!r}: expected example:layered-N with an integer N") \
                from None
        width = max(1, min(20, size // 10))
        return layered_graph(max(1, size // width), width, seed=0)
    if spec.startswith("zoo:"):
        from graphopt.zoo import build

        return build(spec[4:])
    if spec.startswith("example:"):
        raise GraphoptError(f"unknown example graph {spec!r}; known: example:mlp, "
                            "example:layered-N")
    from graphopt.frontends import import_graph

    return import_graph(spec)


def _mib(x: float) -> str:
    return f"{x / 2**20:,.1f}"


@app.command()
def info(graph: str = typer.Argument(..., help=GRAPH_HELP)) -> None:
    """Show a graph's size, work and op mix.

    Example: graphopt info example:mlp
    """
    try:
        g = load_graph_arg(graph)
    except GraphoptError as err:
        _fail(err)
    s = g.summary()
    t = Table(title=f"graph {g.name}", show_header=False)
    t.add_row("ops", f"{s['nodes']:,}")
    t.add_row("edges", f"{s['edges']:,}")
    t.add_row("GFLOPs per step", f"{s['flops'] / 1e9:,.3f}")
    t.add_row("memory traffic (MiB)", _mib(s["bytes_moved"]))
    t.add_row("persistent (MiB)", _mib(s["persistent_bytes"]))
    t.add_row("longest path (ops)", f"{s['max_depth'] + 1:,}")
    t.add_row("colocation groups", f"{s['colocation_groups']:,}")
    t.add_row("op classes", ", ".join(f"{k} {v}" for k, v in s["op_classes"].items()))
    console.print(t)


@app.command("import")
def import_model(
    model: Path = typer.Argument(..., help="Model file: .pt2 (torch.export.save), .onnx, a "
                                           "TpuGraphs .npz or tuning .pb. Example: model.pt2"),
    output: Path = typer.Option(..., "--output", "-o", help="Graph file to write (.npz or "
                                                             ".json). Example: graph.npz"),
) -> None:
    """Read a model file into a graphopt graph and save it.

    Example: graphopt import model.onnx -o graph.npz
    """
    from graphopt.frontends import import_graph
    from graphopt.ir import save_graph

    try:
        g = import_graph(model)
        path = save_graph(g, output)
    except GraphoptError as err:
        _fail(err)
    s = g.summary()
    console.print(f"{g.name}: {s['nodes']:,} ops, {s['edges']:,} edges, "
                  f"{s['flops'] / 1e9:.3f} GFLOP, {s['persistent_bytes'] / 2**20:.1f} MiB "
                  f"persistent -> {path}")


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
def simulate(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    cluster: str = typer.Option("dgx1-v100:4", "--cluster", "-c",
                                help="Preset NAME[:COUNT] or a .toml file. Example: h100:8"),
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

    Example: graphopt simulate example:mlp --cluster dgx1-v100:2 --gantt g.png
    """
    from graphopt.hardware import load_cluster
    from graphopt.sim import Plan, Problem
    from graphopt.sim import simulate as run

    try:
        g = load_graph_arg(graph)
        c = load_cluster(cluster)
        prof = _load_profile_arg(profile) if profile else None
        p = Plan.load(plan) if plan else Plan()
        prob = Problem(g, c, profile=prof)
        r = run(prob, p, timeline=bool(trace or gantt))
    except GraphoptError as err:
        _fail(err)
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
        from graphopt.ir.io import atomic_write

        text = json.dumps({"graph": g.name, "cluster": c.name, **r.to_dict()}, indent=1)
        atomic_write(out, lambda f: f.write(text.encode()))
        console.print(f"result: {out}")


def _load_profile_arg(spec: Path):
    from graphopt.cost.profile import Profile

    path, _, kind = str(spec).partition("@")
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
    t.add_row("bytes moved", f"{_mib(r.bytes_moved)} MiB")
    console.print(t)
    d = Table(title="devices")
    for col in ("device", "kind", "busy ms", "utilization", "peak MiB", "capacity MiB"):
        d.add_column(col, justify="right" if col not in ("device", "kind") else "left")
    for j, dev in enumerate(prob.cluster.devices):
        util = r.busy[j] / r.step_time if r.step_time > 0 else 0.0
        style = "red" if r.peak_memory[j] > dev.memory else ""
        d.add_row(dev.name, dev.kind, f"{r.busy[j] * 1e3:.3f}", f"{util:.0%}",
                  f"[{style}]{_mib(r.peak_memory[j])}[/]" if style else _mib(r.peak_memory[j]),
                  _mib(dev.memory))
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

    try:
        g = load_graph_arg(graph)
        p = profile_graph(g, device=device, repeats=repeats, max_ops=max_ops,
                          time_limit=time_limit)
        p.save(output)
    except GraphoptError as err:
        _fail(err)
    console.print(f"measured {len(p.entries)} distinct ops on {p.device_kind}; wrote {output}")


PARAM_HELP = ("Set a method's hyperparameter, METHOD.KEY=VALUE (repeatable; the keys are the "
              "method class's fields, see docs/learned.md). Example: -p rl-lstm.lr=0.01 "
              "-p hdp.checkpoint_dir=runs/ckpt")


@app.command()
def optimize(
    graph: str = typer.Argument(..., help=GRAPH_HELP),
    cluster: str | None = typer.Option(None, "--cluster", "-c",
                                          help="Preset NAME[:COUNT] or a .toml file; default for "
                                               "a zoo model: dgx1-v100 with the device count of "
                                               "GO's Table 2, else dgx1-v100:4. Example: p100:4"),
    task: str = typer.Option("placement", "--task", "-t",
                             help="What to decide, comma-separated: placement, scheduling, "
                                  "fusion. Example: placement,scheduling"),
    methods: str = typer.Option("single,expert,metis,m-etf,heft,sa", "--methods", "-m",
                                help="Methods to compare, comma-separated ('graphopt methods' "
                                     "lists them). Example: metis,sa,brkga"),
    budget: int = typer.Option(2000, "--budget", "-b", min=1,
                               help="Simulator evaluations allowed to each search method. "
                                    "Example: 5000"),
    seconds: float | None = typer.Option(None, "--time", min=0.0,
                                            help="Wall-clock seconds allowed to each method. "
                                                 "Example: 60"),
    init: str | None = typer.Option(None, "--init",
                                       help="Start every method from this method's plan. "
                                            "Example: metis"),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    out: Path | None = typer.Option(None, "--out", "-o",
                                       help="Folder for plan.json, trace.json and gantt.png per "
                                            "method and report.json. Example: runs/gnmt4"),
    param: list[str] = typer.Option([], "--param", "-p", help=PARAM_HELP),
) -> None:
    """Compare optimization methods on a graph: a table of step time, speed-ups,
    memory and search cost, and a plan, Chrome trace and Gantt chart per method.

    Example: graphopt optimize zoo:gnmt-4 --methods single,expert,metis,sa --out runs/gnmt4
    """
    from graphopt.hardware import load_cluster
    from graphopt.optim import Budget
    from graphopt.optim.compare import compare, write_outputs
    from graphopt.sim import Problem

    try:
        names = [m.strip() for m in methods.split(",") if m.strip()]
        params = method_params(param, names)
        g = load_graph_arg(graph)
        c = load_cluster(cluster or _default_cluster(graph))
        prob = Problem(g, c)
        with console.status("") as status:
            results = compare(prob, names, task, Budget(budget, seconds), seed, init,
                              on_start=lambda m: status.update(f"running {m} on {g.name} ..."),
                              params=params)
    except GraphoptError as err:
        _fail(err)
    ref = {r.method: r.step_time for r in results if r.result.valid}
    t = Table(title=f"{g.name} ({g.num_nodes:,} ops) on {c.name}, task {task}, "
                    f"lower bound {prob.lower_bound * 1e3:.3f} ms")
    for col in ("method", "step ms", "vs single", "vs expert", "step/bound", "valid",
                "peak GiB per device", "search s", "evals"):
        t.add_column(col, justify="left" if col in ("method", "valid") else "right")
    for r in results:
        res, st = r.result, r.stats

        def vs(name, res=res):
            return f"{ref[name] / res.step_time:.2f}x" if name in ref and res.valid else "-"

        t.add_row(r.method, f"{res.step_time * 1e3:.3f}", vs("single"), vs("expert"),
                  f"{res.step_time / res.lower_bound:.2f}" if res.lower_bound > 0 else "-",
                  "yes" if res.valid else f"[red]{res.reason}[/]",
                  " / ".join(f"{x / 2**30:.1f}" for x in res.peak_memory),
                  f"{st.get('seconds', 0):.1f}", f"{st.get('evals', 0):,}")
    console.print(t)
    if out:
        path = write_outputs(prob, results, out, {"task": task, "budget": budget, "seed": seed,
                                                  "params": params})
        console.print(f"plans, traces and Gantt charts in {out}/<method>/; report: {path}")


def method_params(specs: list[str], methods: list[str]) -> dict[str, dict]:
    """``METHOD.KEY=VALUE`` options as constructor arguments per method.

    Each value is parsed by the type of the method's dataclass field: int, float, bool
    (true/false, yes/no, on/off, 1/0) or str; ``none`` sets an optional field to None.

    Raises
    ------
    GraphoptError
        A malformed option, a method not among ``methods`` or not known, a field the
        method does not have, or a value that does not parse as the field's type.

    Examples
    --------
    >>> method_params(["rl-lstm.lr=0.01", "rl-lstm.progress=false"], ["rl-lstm"])
    {'rl-lstm': {'lr': 0.01, 'progress': False}}
    """
    import dataclasses
    import types
    import typing

    from graphopt.optim import get_optimizer

    out: dict[str, dict] = {}
    for spec in specs:
        target, eq, text = spec.partition("=")
        method, dot, key = target.rpartition(".")
        if not (eq and dot and method and key):
            raise GraphoptError(f"--param {spec!r}: expected METHOD.KEY=VALUE, e.g. "
                                "rl-lstm.lr=0.01")
        if method not in methods:
            raise GraphoptError(f"--param {spec!r}: method {method!r} is not among the methods "
                                f"run ({', '.join(methods)})")
        cls = type(get_optimizer(method))
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) \
            else set()
        if key not in fields:
            raise GraphoptError(f"--param {spec!r}: {method} has no parameter {key!r}; it has "
                                f"{', '.join(sorted(fields)) or 'none'}")
        hint = typing.get_type_hints(cls)[key]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kind = next(k for k in kinds if k is not type(None))
        try:
            if text.lower() in ("none", "null") and type(None) in kinds:
                value = None
            elif kind is bool:
                value = {"true": True, "yes": True, "on": True, "1": True, "false": False,
                         "no": False, "off": False, "0": False}[text.lower()]
            else:
                value = kind(text)
        except (KeyError, ValueError):
            raise GraphoptError(f"--param {spec!r}: {method}.{key} expects "
                                f"{getattr(kind, '__name__', kind)}, got {text!r}") from None
        out.setdefault(method, {})[key] = value
    return out


def _default_cluster(graph: str) -> str:
    if graph.startswith("zoo:"):
        from graphopt.zoo import get_entry

        return f"dgx1-v100:{get_entry(graph[4:]).num_devices}"
    return "dgx1-v100:4"


bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks; results go to bench/results/ "
                                                  "and docs/benchmarks.md.")
app.add_typer(bench_app, name="bench")


@bench_app.command("go-table2")
def bench_go_table2(
    quick: bool = typer.Option(False, "--quick", help="Small versions of every model (CI)."),
    cluster: str = typer.Option("p100", help="Preset whose first N devices each row uses "
                                             "(N from GO's Table 2). Example: dgx1-v100"),
    methods: str = typer.Option(",".join(["single", "expert", "metis", "m-etf", "m-sct", "heft",
                                          "sa", "brkga"]),
                                help="Methods, comma-separated. Example: expert,metis,sa"),
    budget: int = typer.Option(2000, min=1, help="Evaluations per search method."),
    rows: str = typer.Option("", help="Only these zoo models, comma-separated (default: "
                                      "all 14). Example: gnmt-2,rnnlm-4"),
    seed: int = typer.Option(0, help="Seed of every method."),
    out: Path | None = typer.Option(None, help="Results JSON; default "
                                                "bench/results/go-table2[-quick].json"),
    docs: Path = typer.Option(Path("docs/benchmarks.md"), help="Markdown file whose "
                                                               "go-table2 section is rewritten."),
    resume: bool = typer.Option(False, help="Extend --out instead of replacing it (same cluster, "
                                            "budget, seed): keep its rows and run only the "
                                            "methods a chosen row lacks. Example: --resume "
                                            "--methods rl-lstm,hdp --rows rnnlm-2"),
    redo: str = typer.Option("", help="With --resume, run these methods again even where "
                                      "present, comma-separated. Example: sa,brkga"),
    param: list[str] = typer.Option([], "--param", "-p", help=PARAM_HELP),
) -> None:
    """GO's Table 2 on our zoo: every baseline on the 14 models, equal budgets; the learned
    placers (rl-lstm, hdp) added on chosen rows with --resume.

    Example: graphopt bench go-table2 --resume --methods rl-lstm,hdp --rows transformer-xl-2
    """
    from graphopt.benchmarks import go_table2

    out = out or Path(f"bench/results/go-table2{'-quick' if quick else ''}.json")
    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    chosen = tuple(r.strip() for r in rows.split(",") if r.strip()) or go_table2.ROWS
    command = " ".join(["graphopt bench go-table2", *(["--quick"] if quick else []),
                        *([f"--cluster {cluster}"] if cluster != "p100" else []),
                        f"--budget {budget}", *([f"--methods {methods}"] if methods !=
                                                 ",".join(go_table2.METHODS) else []),
                        *([f"--rows {rows}"] if rows else []), *(["--resume"] if resume else []),
                        *([f"--redo {redo}"] if redo else []), *(f"-p {p}" for p in param)])
    try:
        params = method_params(param, list(names))
        res = go_table2.run(cluster, names, budget, seed, quick, chosen, out, resume,
                            params=params, command=command,
                            redo=tuple(m.strip() for m in redo.split(",") if m.strip()))
    except GraphoptError as err:
        _fail(err)
    console.print(go_table2.to_markdown(res))
    go_table2.update_docs(res, docs)
    console.print(f"results: {out}; table written into {docs}")


zoo_app = typer.Typer(no_args_is_help=True, help="The benchmark zoo: the models of the placement "
                                                "papers, built as training-step graphs.")
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("list")
def zoo_list() -> None:
    """List the zoo's models: family, devices (GO's Table 2), split, reported step times.

    Example: graphopt zoo list
    """
    from graphopt.zoo import cache_path, get_entry, list_models

    t = Table(title="zoo models (build one with: graphopt zoo build NAME)")
    for col in ("model", "family", "devices", "split", "GO-one / expert (s)", "cached", "what"):
        t.add_column(col)
    for name in list_models():
        e = get_entry(name)
        r = e.reported
        t.add_row(name, e.family, str(e.num_devices), "train" if e.train_split else "held out",
                  f"{r.go_one:.3f} / {r.human_expert:.3f}" if r else "-",
                  "yes" if cache_path(e).is_file() else "no", e.description)
    console.print(t)


@zoo_app.command("build")
def zoo_build(
    name: str = typer.Argument(..., help="Zoo model (see 'graphopt zoo list'). Example: gnmt-8"),
    out: Path | None = typer.Option(None, "--out", "-o",
                                    help="Also save the graph here (.npz or .json)."),
    no_cache: bool = typer.Option(False, "--no-cache",
                                  help="Build from scratch; neither read nor write the cache."),
) -> None:
    """Build a zoo model's training-step graph (forward, backward, SGD update) and cache it
    under $GRAPHOPT_CACHE/zoo (default ~/.cache/graphopt/zoo).

    Example: graphopt zoo build gnmt-8 -o gnmt8.npz
    """
    import time

    from graphopt.ir import save_graph
    from graphopt.zoo import build, cache_path, get_entry

    try:
        entry = get_entry(name)
        start = time.perf_counter()
        with console.status(f"building {name} (up to a minute) ..."):
            g = build(entry, cache=not no_cache)
        seconds = time.perf_counter() - start
        if out is not None:
            save_graph(g, out)
    except GraphoptError as err:
        _fail(err)
    s = g.summary()
    t = Table(title=f"zoo model {name}: {entry.description}", show_header=False)
    t.add_row("ops", f"{s['nodes']:,}")
    t.add_row("edges", f"{s['edges']:,}")
    t.add_row("parameters", f"{g.meta['zoo']['parameters']:,}")
    t.add_row("TFLOPs per step", f"{s['flops'] / 1e12:,.3f}")
    t.add_row("weights (MiB)", _mib(s["persistent_bytes"]))
    t.add_row("devices (GO's Table 2)", str(entry.num_devices))
    t.add_row("split", "train" if entry.train_split else "held out")
    t.add_row("seconds", f"{seconds:.1f}")
    t.add_row("cache", "off" if no_cache else str(cache_path(entry)))
    if out is not None:
        t.add_row("saved to", str(out))
    console.print(t)


costmodel_app = typer.Typer(no_args_is_help=True, help="Learned cost models on TpuGraphs data: "
                                                      "train, evaluate, rank configurations.")
app.add_typer(costmodel_app, name="costmodel")


def _costmodel_train_command(fn):
    """Give ``fn(**options)`` one CLI option per TrainConfig field (type, default, help)."""
    import dataclasses
    import inspect

    from graphopt.costmodel.train import TrainConfig

    kinds = {"str": str, "int": int, "float": float, "bool": bool}
    params = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                annotation=kinds[f.type] if isinstance(f.type, str) else f.type,
                                default=typer.Option(f.default, help=f.metadata["help"]))
              for f in dataclasses.fields(TrainConfig)]
    fn.__signature__ = inspect.Signature(params)
    return fn


@costmodel_app.command("train")
@_costmodel_train_command
def costmodel_train(**options) -> None:
    """Train a cost model (TpuGraphs baselines, GST, cross-configuration attention); writes a
    run directory with safetensors checkpoints, log.csv and curve.png. --resume RUN continues.

    Example: graphopt costmodel train --data npz/tile/xla --epochs 20
    """
    from graphopt.costmodel.train import TrainConfig, evaluate, train

    try:
        run = train(TrainConfig(**options))
        res = evaluate(run)
    except GraphoptError as err:
        _fail(err)
    _print_costmodel_metrics(res, f"held-out metrics ({run})")


def _print_costmodel_metrics(res: dict, title: str) -> None:
    t = Table(title=title)
    cols = ("kendall_tau", "top1_error", "top5_error", "top10_error", "tile_score",
            "pair_accuracy")
    for c in ("graph", "configs", *cols):
        t.add_column(c)
    for g in res["graphs"][:30]:
        t.add_row(g["graph"], str(g["configs"]), *(f"{g[c]:.4f}" for c in cols))
    t.add_row("[bold]mean[/]", str(len(res["graphs"])),
              *(f"{res['overall'][c]:.4f}" for c in cols))
    console.print(t)


@costmodel_app.command("eval")
def costmodel_eval(
    run: Path = typer.Argument(..., help="Run directory written by 'graphopt costmodel train'."),
    data: Path | None = typer.Option(None, help="Graphs to score: a directory of TpuGraphs .npz, "
                                                "one .npz or a tuning .pb (default: the run's "
                                                "held-out split)."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the metrics here."),
) -> None:
    """Kendall's tau, top-K error, tile score and pair accuracy per graph and overall.

    Example: graphopt costmodel eval runs/costmodel/tile__tile_sage__0__1700000000
    """
    from graphopt.costmodel.train import evaluate
    from graphopt.ir.io import atomic_write

    try:
        res = evaluate(run, data)
    except GraphoptError as err:
        _fail(err)
    _print_costmodel_metrics(res, f"metrics of {run}")
    if json_out is not None:
        text = json.dumps(res, indent=1)
        atomic_write(json_out, lambda f: f.write(text.encode()))


@costmodel_app.command("rank")
def costmodel_rank(
    run: Path = typer.Argument(..., help="Run directory written by 'graphopt costmodel train'."),
    graph: Path = typer.Argument(..., help="A TpuGraphs .npz (or tuning .pb) whose "
                                           "configurations to rank."),
    top: int = typer.Option(5, min=1, help="How many configurations to list per graph."),
) -> None:
    """The configurations a compiler should try first, best first.

    Example: graphopt costmodel rank runs/costmodel/RUN npz/tile/xla/test/x.npz --top 5
    """
    from graphopt.costmodel.train import rank

    try:
        res = rank(run, graph, top)
    except GraphoptError as err:
        _fail(err)
    for g in res:
        t = Table(title=f"{g['graph']}: top {len(g['top'])} of {g['configs']} configurations")
        for c in ("try", "config", "predicted score", "measured runtime"):
            t.add_column(c)
        for i, c in enumerate(g["top"], 1):
            t.add_row(str(i), str(c["config"]), f"{c['score']:.4f}",
                      "-" if c["runtime"] is None else f"{c['runtime']:,.0f}")
        console.print(t)


@app.command()
def train(
    corpus: str = typer.Option("default", help="Graphs to pre-train on, comma-separated "
                                               "GRAPH@CLUSTER items (GRAPH as for 'optimize'), "
                                               "or 'default': the zoo's train split and "
                                               "random layered graphs (see docs/go.md). "
                                               "Example: zoo:rnnlm-2@p100:2,zoo:bert-base@p100:4"),
    cluster: str | None = typer.Option(None, "--cluster", "-c",
                                       help="Cluster for --corpus items given without "
                                            "@CLUSTER. Example: p100:4"),
    out: Path = typer.Option(Path("runs/go-pretrain"), "--out", "-o",
                             help="Folder for the checkpoint (resumed when it exists), "
                                  "log.csv, curve.png and the policy (policy.safetensors + "
                                  "policy.json). Example: ckpt/go"),
    updates: int = typer.Option(3000, min=1, help="PPO updates of the run, one graph each, in "
                                                  "turn (a resumed run stops at this total)."),
    minutes: float | None = typer.Option(None, min=0.0, help="Stop after this many minutes "
                                                            "(the checkpoint resumes later)."),
    task: str = typer.Option("placement", "--task", "-t",
                             help="What the policy learns to decide, comma-separated. "
                                  "Example: placement,scheduling,fusion"),
    lr: float | None = typer.Option(None, help="Adam learning rate (default: PRETRAIN_PPO's, "
                                               "1e-3)."),
    num_samples: int | None = typer.Option(None, min=2, help="Plans per update (default: 16)."),
    ent_coef: float | None = typer.Option(None, min=0.0, help="Entropy bonus (default: "
                                                             "PRETRAIN_PPO's, 0.01)."),
    seed: int = typer.Option(0, help="Seed of the policy's initialization and sampling."),
    threads: int = typer.Option(1, min=1, help="torch CPU threads."),
) -> None:
    """Pre-train GO's policy with PPO on a corpus of graphs; the result is what the 'go'
    and 'go-finetune' methods load with -p go.checkpoint=OUT.

    Example: graphopt train --updates 3000 --out runs/go-pretrain
    """
    import dataclasses

    import torch

    from graphopt.hardware import load_cluster
    from graphopt.optim.base import parse_task
    from graphopt.optim.learned.go import PRETRAIN_CORPUS, PRETRAIN_PPO, pretrain
    from graphopt.sim import Problem

    torch.set_num_threads(threads)
    items = PRETRAIN_CORPUS if corpus == "default" else tuple(
        c.strip() for c in corpus.split(",") if c.strip())
    command = " ".join(["graphopt train", *([f"--corpus {corpus}"] if corpus != "default" else []),
                        *([f"--cluster {cluster}"] if cluster else []),
                        f"--updates {updates}", *([f"--minutes {minutes:g}"] if minutes else []),
                        f"--task {task}", f"--seed {seed}",
                        *([f"--lr {lr}"] if lr is not None else []),
                        *([f"--num-samples {num_samples}"] if num_samples is not None else []),
                        *([f"--ent-coef {ent_coef}"] if ent_coef is not None else [])])
    try:
        problems = []
        for item in items:
            graph, at, where = item.rpartition("@")
            if not at:
                graph, where = item, cluster
            if not graph or not where:
                raise GraphoptError(f"--corpus item {item!r}: expected GRAPH@CLUSTER, e.g. "
                                    "zoo:rnnlm-2@p100:2, or GRAPH with --cluster")
            with console.status(f"loading {graph} ..."):
                problems.append(Problem(load_graph_arg(graph), load_cluster(where)))
        ppo = dataclasses.replace(PRETRAIN_PPO, **{k: v for k, v in (
            ("lr", lr), ("num_samples", num_samples), ("ent_coef", ent_coef)) if v is not None})
        res = pretrain(problems, out, task=parse_task(task), updates=updates,
                       seconds=None if minutes is None else minutes * 60, seed=seed, ppo=ppo,
                       command=command)
    except GraphoptError as err:
        _fail(err)
    t = Table(title=f"pre-training: {res['updates']} updates, {res['total_evals']:,} plans "
                    f"simulated ({res['seconds']:.0f} s this run)")
    for col in ("graph", "cluster", "first batch mean / bound", "last batch mean / bound",
                "best / bound"):
        t.add_column(col, justify="left" if col in ("graph", "cluster") else "right")
    for i, p in enumerate(problems):
        rows = [r for r in res["log"] if r["env"] == i and r["mean_ratio"] is not None]
        t.add_row(p.graph.name, p.cluster.name,
                  *(f"{x:.2f}" if x is not None else "-" for x in (
                      rows[0]["mean_ratio"] if rows else None,
                      rows[-1]["mean_ratio"] if rows else None,
                      rows[-1]["best_ratio"] if rows else None)))
    console.print(t)
    console.print(f"policy, checkpoint, log.csv and curve.png in {out}/")


@bench_app.command("go")
def bench_go(
    quick: bool = typer.Option(False, "--quick", help="Small versions of every model (CI)."),
    cluster: str = typer.Option("p100", help="Preset whose first N devices each row uses."),
    budget: int = typer.Option(2000, min=1, help="Evaluations per method."),
    learned_rows: str = typer.Option("", help="Rows where every method runs, comma-separated "
                                              "(default: the rows where PPO fits the budget, "
                                              "see docs/go.md). Example: rnnlm-2,wavenet-2x18"),
    zero_shot_rows: str = typer.Option("", help="Rows where only expert and zero-shot go run "
                                                "(default: all of GO's Table 2; 'none': "
                                                "skip)."),
    multitask_rows: str = typer.Option("", help="Rows of the multi-task comparison ('none': "
                                                "skip it)."),
    multitask_budget: int = typer.Option(1000, min=1, help="Evaluations per task set there."),
    learned: str = typer.Option("go,go-finetune,go-one",
                                help="Learned methods run beside the baselines (rl-lstm and "
                                     "hdp join from go-table2's results with the same "
                                     "settings, or run here when listed)."),
    seed: int = typer.Option(0, help="Seed of every method."),
    out: Path | None = typer.Option(None, help="Results JSON; default bench/results/go[-quick].json"),
    docs: Path = typer.Option(Path("docs/benchmarks.md"), help="Markdown file whose go "
                                                               "section is rewritten."),
    resume: bool = typer.Option(False, help="Keep the rows already in --out (same settings)."),
    param: list[str] = typer.Option([], "--param", "-p", help=PARAM_HELP),
) -> None:
    """GO against every baseline on GO's Table 2: placement at equal budget, search cost,
    transfer to held-out families and zero-shot on the largest graphs, multi-task.

    Example: graphopt bench go --learned-rows rnnlm-2 --zero-shot-rows gnmt-8 --multitask-rows none
    """
    from graphopt.benchmarks import go as go_bench

    def pick(text: str, default: tuple[str, ...]) -> tuple[str, ...]:
        if text == "none":
            return ()
        return tuple(r.strip() for r in text.split(",") if r.strip()) if text else default

    out = out or Path(f"bench/results/go{'-quick' if quick else ''}.json")
    names = pick(learned, go_bench.LEARNED)
    command = " ".join(["graphopt bench go", *(["--quick"] if quick else []),
                        f"--budget {budget}", *([f"--learned-rows {learned_rows}"] if learned_rows
                                                else []),
                        *([f"--zero-shot-rows {zero_shot_rows}"] if zero_shot_rows else []),
                        *([f"--multitask-rows {multitask_rows}"] if multitask_rows else []),
                        *(f"-p {p}" for p in param)])
    try:
        from graphopt.benchmarks.go_table2 import METHODS

        params = method_params(param, list(METHODS) + list(names))
        res = go_bench.run(cluster, budget, seed, quick, pick(learned_rows, go_bench.LEARNED_ROWS),
                           pick(zero_shot_rows, go_bench.ROWS),
                           pick(multitask_rows, go_bench.MULTITASK_ROWS), multitask_budget,
                           names, out, resume, params=params)
    except GraphoptError as err:
        _fail(err)
    console.print(go_bench.to_markdown(res))
    go_bench.update_docs(res, docs, command)
    console.print(f"results: {out}; tables written into {docs}")


@app.command()
def methods() -> None:
    """List the optimization methods graphopt knows.

    Example: graphopt methods
    """
    from graphopt.optim import get_optimizer, list_optimizers

    t = Table(title="methods")
    t.add_column("name")
    t.add_column("what it is")
    for name in list_optimizers():
        doc = (type(get_optimizer(name)).__doc__ or "").strip().splitlines()
        t.add_row(name, doc[0] if doc else "")
    console.print(t)


@app.command()
def demo(out: Path = typer.Option(Path("runs/demo"), help="Folder for the output files."),
         cluster: str = typer.Option("dgx1-v100:2", help="Cluster preset NAME[:COUNT]."),
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

    try:
        c = load_cluster(cluster)
    except GraphoptError as err:
        _fail(err)
    g = mlp_training_graph(layers=8, hidden=4096, batch=256)
    prob = Problem(g, c)
    layer = np.array([int(m.split(".")[1]) if m.startswith("layers.") else -1 for m in g.module])
    layer[layer < 0] = layer.max()
    plans = {"single": Plan(), "layer-wise": Plan(placement=layer * c.num_devices // (layer.max() + 1)),
             "no-fusion": Plan(fusion=np.zeros(g.num_nodes))}
    t = Table(title=f"{g.name} ({g.num_nodes} ops) on {c.name}")
    for col in ("plan", "step ms", "vs single", "step/bound", "valid", "peak MiB per device"):
        t.add_column(col)
    base = None
    for name, p in plans.items():
        r = run(prob, p, timeline=True)
        base = base or r.step_time
        t.add_row(name, f"{r.step_time * 1e3:.3f}", f"{base / r.step_time:.2f}x",
                  f"{r.step_time / r.lower_bound:.2f}", "yes" if r.valid else r.reason,
                  " / ".join(_mib(x) for x in r.peak_memory))
        d = out / name
        p.save(d / "plan.json")
        save_chrome_trace(prob, r, d / "trace.json")
        draw(prob, r, d / "gantt.png", title=f"{g.name} on {c.name}: {name}")
    console.print(t)
    console.print(f"plans, Chrome traces and Gantt charts in {out}/<plan>/")


if __name__ == "__main__":  # pragma: no cover
    app()
