"""Commands about graphs: ``info``, ``import`` and the ``zoo`` group."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import GRAPH_HELP, console
from graphopt.cli.options import out_option
from graphopt.errors import UsageError
from graphopt.frontends import load_source
from graphopt.ir.graph import format_bytes

app = typer.Typer()


@app.command()
def info(graph: str = typer.Argument(..., help=GRAPH_HELP)) -> None:
    """Show a graph's size, work and op mix.

    Example: graphopt info example:mlp
    """
    g = load_source(graph)
    s = g.summary()
    t = Table(title=f"graph {g.name}", show_header=False)
    t.add_row("ops", f"{s['nodes']:,}")
    t.add_row("edges", f"{s['edges']:,}")
    t.add_row("GFLOPs per step", f"{s['flops'] / 1e9:,.3f}")
    t.add_row("memory traffic", format_bytes(s["bytes_moved"]))
    t.add_row("persistent", format_bytes(s["persistent_bytes"]))
    t.add_row("longest path (ops)", f"{s['max_depth'] + 1:,}")
    t.add_row("colocation groups", f"{s['colocation_groups']:,}")
    t.add_row("op classes", ", ".join(f"{k} {v}" for k, v in s["op_classes"].items()))
    console.print(t)
    if s["nodes"] > 0 and not g.rank.any():
        console.print(f"[yellow]warning:[/] {graph}: no op has a shape (a TpuGraphs file with "
                      "pruned node features keeps none), so FLOPs and bytes count one element "
                      "per op: the figures above are not the program's work")


@app.command("import")
def import_model(
    model: Path = typer.Argument(..., help="Model file: .pt2 (torch.export.save), .onnx, a "
                                           "TpuGraphs .npz or tuning .pb. Example: model.pt2"),
    output: Path = typer.Option(..., "--output", "-o", help="Graph file to write (.npz or "
                                                             ".json). Example: graph.npz"),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", help="ONNX only: the static shape of a graph input whose dimensions "
                                  "are symbolic (a dynamic batch), as NAME=D1xD2x...; repeat it "
                                  "for several inputs. Example: --input-shape input=8x3x224x224"),
) -> None:
    """Read a model file into a graphopt graph and save it.

    Example: graphopt import model.onnx --input-shape input=8x3x224x224 -o graph.npz
    """
    from graphopt.ir import save_graph

    check_output(output, "--output")
    if output.suffix not in (".npz", ".json"):
        raise UsageError(f"--output {output}: expected a .npz or .json file name")
    if input_shape:
        if model.suffix.lower() != ".onnx":
            raise UsageError(f"--input-shape: only for .onnx models, not {model.name}")
        from graphopt.frontends.onnx import from_onnx

        g = from_onnx(model, input_shapes=dict(_input_shape(s) for s in input_shape))
    else:
        g = load_source(str(model))  # as every command reads a graph: empty files refused
    path = save_graph(g, output)
    s = g.summary()
    console.print(f"{g.name}: {s['nodes']:,} ops, {s['edges']:,} edges, "
                  f"{s['flops'] / 1e9:.3f} GFLOP, {s['persistent_bytes'] / 2**20:.1f} MiB "
                  f"persistent -> {path}")


def _input_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=2x3x224`` -> ``("NAME", (2, 3, 224))``."""
    name, eq, dims = spec.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not eq or not name or not shape or min(shape) < 0:
        raise UsageError(f"--input-shape {spec!r}: expected NAME=D1xD2x... with whole sizes >= 0, "
                         "e.g. input=8x3x224x224")
    return name, shape


zoo_app = typer.Typer(no_args_is_help=True, help="The benchmark zoo: the models of the placement "
                                                "papers, built as training-step graphs.")


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
    quick = ", ".join(f"{name}-quick" for name in list_models())
    console.print(f"Quick sizes (same structure, small tensors and short unrolls: built in "
                  f"seconds, one training step in about a second on a CPU core): {quick}",
                  highlight=False)


@zoo_app.command("build")
def zoo_build(
    name: str = typer.Argument(..., help="Zoo model (see 'graphopt zoo list'). Example: gnmt-8"),
    out: Path | None = out_option(None, "Also save the graph here (.npz or .json). "
                                        "Example: gnmt-8.npz"),
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

    check_output(out, "--out")
    if out is not None and out.suffix not in (".npz", ".json"):
        raise UsageError(f"--out {out}: expected a .npz or .json file name")
    entry = get_entry(name)
    start = time.perf_counter()
    with console.status(f"building {name} (up to a minute) ..."):
        g = build(entry, cache=not no_cache)
    seconds = time.perf_counter() - start
    if out is not None:
        save_graph(g, out)
    s = g.summary()
    t = Table(title=f"zoo model {name}: {entry.description}", show_header=False)
    t.add_row("ops", f"{s['nodes']:,}")
    t.add_row("edges", f"{s['edges']:,}")
    t.add_row("parameters", f"{g.meta['zoo']['parameters']:,}")
    t.add_row("TFLOPs per step", f"{s['flops'] / 1e12:,.3f}")
    t.add_row("weights", format_bytes(s["persistent_bytes"]))
    t.add_row("devices (GO's Table 2)", str(entry.num_devices))
    t.add_row("split", "train" if entry.train_split else "held out")
    t.add_row("seconds", f"{seconds:.1f}")
    t.add_row("cache", "off" if no_cache else str(cache_path(entry)))
    if out is not None:
        t.add_row("saved to", str(out))
    console.print(t)
