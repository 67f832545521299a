"""``graphopt costmodel``: learned cost models on TpuGraphs data."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console
from graphopt.cli.locks import check_run_folder
from graphopt.cli.params import options_from_fields
from graphopt.costmodel.config import TrainConfig
from graphopt.errors import UsageError

app = typer.Typer(no_args_is_help=True, help="Learned cost models on TpuGraphs data: "
                                             "train, evaluate, rank configurations.")


@app.command("train")
@options_from_fields(TrainConfig)
def costmodel_train(**options) -> None:
    """Train a cost model (TpuGraphs baselines, GST, cross-configuration attention); writes a
    run directory with safetensors checkpoints, log.csv and curve.png. --resume RUN continues.

    Example: graphopt costmodel train --data npz/tile/xla --epochs 20
    """
    from graphopt.costmodel.trainer import evaluate, train

    check_output(Path(options["out"]), "--out", folder=True)
    name = options["run_name"]
    if name:
        if name in (".", "..") or Path(name).name != name:
            raise UsageError(f"--run-name {name}: expected a folder name, not a path")
        run = Path(options["out"]) / name
        if (run / "config.json").exists():
            raise UsageError(f"--run-name {name}: {run} holds a run already (continue it "
                             "with --resume, or give another name)")
        check_run_folder(run, "--run-name")  # a folder where a file goes fails only after training
        check_output(run / "config.json", "--run-name")
    run = train(TrainConfig(**options))
    res = evaluate(run)
    _print_costmodel_metrics(res, f"held-out metrics ({run})")


def _print_costmodel_metrics(res: dict, title: str) -> None:
    from graphopt.costmodel.metrics import METRICS

    t = Table(title=title)
    for c in ("graph", "configs", *METRICS):
        t.add_column(c)
    for g in res["graphs"][:30]:
        t.add_row(g["graph"], str(g["configs"]), *(f"{g[c]:.4f}" for c in METRICS))
    n = len(res["graphs"])
    total = str(sum(g["configs"] for g in res["graphs"]))
    t.add_row(f"[bold]mean of {n} graph{'s' * (n != 1)}[/]", total,
              *(f"{res['overall'][c]:.4f}" for c in METRICS), end_section=True)
    for name, m in res.get("baselines", {}).items():
        t.add_row(f"baseline: {name}", total, *(f"{m[c]:.4f}" for c in METRICS))
    console.print(t)
    for note in res.get("notes", []):
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


@app.command("eval")
def costmodel_eval(
    run: Path = typer.Argument(..., help="Run directory written by 'graphopt costmodel train'."),
    data: Path | None = typer.Option(None, help="Graphs to score: a directory of TpuGraphs .npz, "
                                                "one .npz or a tuning .pb (default: the run's "
                                                "held-out split)."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the metrics here."),
    chunk: int | None = typer.Option(None, min=1, help="Configurations scored at once; a "
                                     "cross-configuration model compares those of one chunk, so "
                                     "scores are comparable within it (default: the run's "
                                     "--eval-chunk)."),
) -> None:
    """Kendall's tau, top-K error, tile score and pair accuracy per graph and overall,
    beside two baselines on the same graphs: random rankings and the analytical roofline
    proxy (left out, with a note, when the graphs were pruned or their config features
    are not as wide as TpuGraphs').

    Example: graphopt costmodel eval runs/costmodel/tile__tile_sage__0__1700000000
    """
    from graphopt.costmodel.trainer import evaluate
    from graphopt._files import atomic_write

    check_output(json_out, "--json")
    res = evaluate(run, data, chunk)
    _print_costmodel_metrics(res, f"metrics of {run}")
    if json_out is not None:
        text = json.dumps(res, indent=1)
        atomic_write(json_out, lambda f: f.write(text.encode()))


@app.command("rank")
def costmodel_rank(
    run: Path = typer.Argument(..., help="Run directory written by 'graphopt costmodel train'."),
    graph: Path = typer.Argument(..., help="A TpuGraphs .npz (or tuning .pb) whose "
                                           "configurations to rank."),
    top: int = typer.Option(5, min=1, help="How many configurations to list per graph."),
) -> None:
    """The configurations a compiler should try first, best first.

    Example: graphopt costmodel rank runs/costmodel/RUN npz/tile/xla/test/x.npz --top 5
    """
    from graphopt.costmodel.trainer import rank

    res = rank(run, graph, top)
    for g in res:
        t = Table(title=f"{g['graph']}: top {len(g['top'])} of {g['configs']} configurations")
        for c in ("try", "config", "predicted score", "measured runtime"):
            t.add_column(c)
        for i, c in enumerate(g["top"], 1):
            t.add_row(str(i), str(c["config"]), f"{c['score']:.4f}",
                      "-" if c["runtime"] is None else f"{c['runtime']:,.0f}")
        console.print(t)
