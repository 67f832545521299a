"""``graphopt rewrite``: Tensat's equality saturation on a PyTorch program, saved as .pt2."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console
from graphopt.cli.params import options_from_fields
from graphopt.cli.options import out_option
from graphopt.errors import UsageError, check_fields
from graphopt.rewrite.config import RewriteConfig

app = typer.Typer()

MODEL_HELP = ("A program saved with torch.export.save (.pt2), or a benchmark model written "
              "here (see --size): Tensat's bert, resnext-50, inception-v3, squeezenet, vgg-19, "
              "nasrnn, or the zoo's resnet-50, amoebanet, wavenet-2x18, rnnlm-2, gnmt-2, "
              "transformer-xl-2, gpt2-small (forward pass and loss). Example: nasrnn")


@app.command("rewrite")
@options_from_fields(RewriteConfig)
def rewrite_command(
    model: str = typer.Argument(..., help=MODEL_HELP),
    out: Path = out_option(..., "Where to save the rewritten program (torch.export.save). "
                                "Example: out.pt2"),
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
    check_output(out, "--out")
    check_output(stats, "--stats")
    if out.suffix != ".pt2":
        raise UsageError(f"--out {out}: expected a .pt2 file name")
    cfg = RewriteConfig(**options)
    check_fields(cfg, lambda name: f"--{name.replace('_', '-')}")
    import torch

    from graphopt._files import atomic_write
    from graphopt.rewrite.api import load_model, rewrite, sequential_rewrite

    module, inputs = load_model(model, size)
    res = (sequential_rewrite if sequential else rewrite)(module, inputs, cfg)
    program = torch.export.export(res.module, tuple(inputs))
    atomic_write(out, lambda f: torch.export.save(program, f))
    if stats is not None:
        text = json.dumps(res.stats, indent=1)
        atomic_write(stats, lambda f: f.write(text.encode()))
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


def bench_rewrite(
    models: str = typer.Option("", help="Models, comma-separated (default: all, Tensat's "
                                        "six then the zoo's seven; see 'graphopt rewrite "
                                        "--help'). Example: nasrnn,bert"),
    size: str = typer.Option("bench", help="bench, or tiny (seconds; CI)."),
    repeats: int = typer.Option(30, min=1, help="Timed runs of each program (median kept)."),
    warmup: int = typer.Option(3, min=0, help="Untimed runs of each program first."),
    compile_: bool = typer.Option(False, "--compile", help="Also time each program compiled "
                                                            "with torch.compile (inductor)."),
    sequential_limit: float = typer.Option(600.0, min=1.0, help="Seconds the sequential "
                                                                 "rewriter may search per model."),
    cost: str = typer.Option("roofline", help="How both rewriters price ops: roofline (the "
                                              "cpu:1 preset) or measured (each timed on this "
                                              "CPU as the rewritten program runs it, as Tensat "
                                              "prices e-nodes). Example: measured"),
    out: Path | None = out_option(None, "Results JSON; default "
                                        "runs/bench/rewrite[-compile][-tiny].json. "
                                        "Example: /tmp/rewrite.json"),
    docs: Path | None = typer.Option(None, help="Markdown file whose rewrite section is rewritten "
                                                "(default: none). Example: docs/benchmarks.md"),
) -> None:
    """Tensat's comparison on this CPU: measured inference time of the original program,
    the sequential greedy rewriter (TASO-style) and saturation + ILP, with search times.

    Example: graphopt bench rewrite --models nasrnn,squeezenet --repeats 20
    """
    from graphopt.benchmarks import RESULTS, earlier_seconds, plan_line, say
    from graphopt.benchmarks import rewrite as bench
    from graphopt.rewrite.models import MODELS

    names = tuple(m.strip() for m in models.split(",") if m.strip()) or tuple(MODELS)
    out = out or RESULTS / (f"rewrite{'-compile' if compile_ else ''}"
                            f"{'-tiny' if size == 'tiny' else ''}.json")
    command = " ".join(["graphopt bench rewrite", *([f"--models {models}"] if models else []),
                        *([f"--size {size}"] if size != "bench" else []),
                        f"--repeats {repeats}", *(["--compile"] if compile_ else []),
                        *([f"--sequential-limit {sequential_limit:g}"]
                          if sequential_limit != 600.0 else []),
                        *([f"--cost {cost}"] if cost != "roofline" else []),
                        *([f"--out {out}"] if out != RESULTS / out.name else []),
                        *([f"--docs {docs}"] if docs else [])])
    check_output(out, "--out")
    check_output(docs, "--docs")
    cfg = RewriteConfig(cost=cost)
    check_fields(cfg, lambda name: f"--{name}")
    unknown = [m for m in names if m not in MODELS]
    if unknown or size not in ("bench", "tiny"):
        raise UsageError(f"--models {','.join(unknown)}: expected some of "
                         f"{', '.join(MODELS)}" if unknown else
                         f"--size {size}: expected bench or tiny")
    say(plan_line(f"bench rewrite: {len(names)} models ({size} size), {repeats} timed runs "
                  "of each program", out, docs,
                  earlier_seconds(out, size=size, repeats=repeats, compile=compile_)))
    res = bench.run(names, size, repeats, warmup, compile_, out, cfg=cfg,
                    seq_time_limit=sequential_limit, command=command,
                    progress=say)
    console.print(bench.to_markdown(res))
    if docs:
        bench.update_docs(res, docs)
    console.print(f"results: {out}" + (f"; table written into {docs}" if docs else ""))
