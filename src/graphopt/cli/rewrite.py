"""``graphopt rewrite``: Tensat's equality saturation on a PyTorch program, saved as .pt2."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from graphopt.cli._common import check_output, console, fail, options_from_fields
from graphopt.errors import GraphoptError
from graphopt.rewrite.config import RewriteConfig

app = typer.Typer()

MODEL_HELP = ("A program saved with torch.export.save (.pt2), or one of Tensat's benchmark "
              "models written here: bert, resnext-50, inception-v3, squeezenet, vgg-19, nasrnn "
              "(see --size). Example: nasrnn")


@app.command("rewrite")
@options_from_fields(RewriteConfig)
def rewrite_command(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="Where to save the rewritten program "
                                                      "(torch.export.save). Example: out.pt2"),
    size: str = typer.Option("bench", help="Size of a named model: bench (the sizes of "
                                           "'graphopt bench rewrite') or tiny. Example: tiny"),
    sequential: bool = typer.Option(False, "--sequential", help="Use the sequential greedy "
                                                                "rewriter (TASO-style) instead "
                                                                "of saturation."),
    stats: Path | None = typer.Option(None, help="Also write the search's statistics as JSON. "
                                                  "Example: stats.json"),
    **options,
) -> None:
    """Rewrite a program by equality saturation over TASO's rules (Tensat): the cheapest
    equivalent program under graphopt's cost model, checked to compute the same outputs on
    the example inputs, saved as a torch.export program.

    Example: graphopt rewrite nasrnn --size tiny -o nasrnn.pt2 --extractor greedy
    """
    try:
        check_output(out, "--out")
        check_output(stats, "--stats")
        if out.suffix != ".pt2":
            raise GraphoptError(f"--out {out}: expected a .pt2 file name")
        cfg = RewriteConfig(**options)
        from graphopt.errors import check_fields

        check_fields(cfg, lambda name: f"--{name.replace('_', '-')}")
        import torch

        from graphopt.ir.io import atomic_write
        from graphopt.rewrite.api import load_model, rewrite, sequential_rewrite

        module, inputs = load_model(model, size)
        res = (sequential_rewrite if sequential else rewrite)(module, inputs, cfg)
        program = torch.export.export(res.module, tuple(inputs))
        atomic_write(out, lambda f: torch.export.save(program, f))
        if stats is not None:
            text = json.dumps(res.stats, indent=1)
            atomic_write(stats, lambda f: f.write(text.encode()))
    except GraphoptError as err:
        fail(err)
    s = res.stats
    t = Table(title=f"{model}: {'sequential greedy' if sequential else 'saturation'} rewrite")
    t.add_column("")
    t.add_column("original", justify="right")
    t.add_column("rewritten", justify="right")
    t.add_row("ops", str(s["ops_before"]), str(s["ops_after"]))
    t.add_row("predicted ms", f"{s['cost_before'] * 1e3:.4f}", f"{s['cost_after'] * 1e3:.4f}")
    console.print(t)
    search = (f"{s['steps']} rewrites kept" if sequential else
              f"{s['iterations']} iterations ({s['stop']}), {s['enodes']} e-nodes in "
              f"{s['eclasses']} e-classes" + (f", ILP {s['ilp']['status']}" if "ilp" in s else ""))
    console.print(f"search {s['search_s']:.2f} s: {search}; largest output difference "
                  f"{s.get('max_error', float('nan')):.2g} (relative); written to {out}",
                  highlight=False)
