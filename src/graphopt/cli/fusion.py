"""``graphopt bench fusion``: fusion and scheduling decisions (docs/simulator.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from graphopt._files import check_output
from graphopt.cli._common import console
from graphopt.cli.warmup import compile_simulator
from graphopt.cli.options import budget_option, cluster_option, out_option, seed_option
from graphopt.errors import UsageError


def _rows(text: str, default: tuple[str, ...]) -> tuple[str, ...]:
    if text == "none":
        return ()
    return tuple(r.strip() for r in text.split(",") if r.strip()) if text else default


def bench_fusion(
    cluster: str = cluster_option("p100", what="Preset whose first N devices each row uses",
                                  default_help="default p100", example="dgx1-v100"),
    budget: int = budget_option(500, "Evaluations of every search."),
    full: bool = typer.Option(False, "--full", help="The full-size models (default: their "
                                                    "quick versions, minutes in all)."),
    table3_rows: str = typer.Option("", help="Rows of GO's Table 3 (default: GNMT, RNNLM and "
                                             "Transformer-XL on 2-8 devices; 'none': skip). "
                                             "Example: gnmt-2,rnnlm-4"),
    memory_rows: str = typer.Option("", help="Rows of the tight-memory scheduling table "
                                             "('none': skip). Example: gnmt-2"),
    fractions: str = typer.Option("0.95,0.9", help="Memory fractions there: each device keeps "
                                                   "its persistent bytes and this fraction of "
                                                   "the rest of the first-ready peak. "
                                                   "Example: 0.9,0.8"),
    multitask_rows: str = typer.Option("", help="Rows of the multi-task table ('none': skip). "
                                                "Example: rnnlm-2"),
    method: str = typer.Option("sa", help="Search of the multi-task table. Example: brkga"),
    learned: bool = typer.Option(False, help="Also GO (go-one: PPO on each graph, far slower "
                                             "than the searches) on the first two tables."),
    seed: int = seed_option("Seed of every method."),
    out: Path = out_option(Path("runs/bench/fusion.json"), "Results JSON. "
                                                           "Example: /tmp/fusion.json"),
    docs: Path | None = typer.Option(None, help="Markdown file whose fusion section is rewritten "
                                                "(default: none). Example: docs/benchmarks.md"),
) -> None:
    """GO's Table 3 (fusion: none, XLA's default, sa, GO), scheduling under tight memory
    against XLA's memory schedulers, and placement + scheduling + fusion jointly.

    Example: graphopt bench fusion --table3-rows rnnlm-4 --memory-rows gnmt-2 --multitask-rows none
    """
    from graphopt.benchmarks import RESULTS, earlier_seconds, plan_line, say
    from graphopt.benchmarks import fusion as bench

    command = " ".join(["graphopt bench fusion", f"--budget {budget}",
                        *(["--full"] if full else []),
                        *([f"--table3-rows {table3_rows}"] if table3_rows else []),
                        *([f"--memory-rows {memory_rows}"] if memory_rows else []),
                        *([f"--fractions {fractions}"] if fractions != "0.95,0.9" else []),
                        *([f"--multitask-rows {multitask_rows}"] if multitask_rows else []),
                        *([f"--method {method}"] if method != "sa" else []),
                        *(["--learned"] if learned else []),
                        *([f"--out {out}"] if out != RESULTS / "fusion.json" else []),
                        *([f"--docs {docs}"] if docs else [])])
    check_output(out, "--out")
    check_output(docs, "--docs")
    try:
        fr = tuple(float(f) for f in fractions.split(",") if f.strip())
    except ValueError:
        raise UsageError(f"--fractions {fractions!r}: expected numbers, e.g. 0.9,0.8") \
            from None
    if not fr or not all(0 < f <= 1 for f in fr):
        raise UsageError(f"--fractions {fractions!r}: expected numbers in (0, 1], "
                         "e.g. 0.9,0.8")
    rows = (_rows(table3_rows, bench.TABLE3_ROWS), _rows(memory_rows, bench.MEMORY_ROWS),
            _rows(multitask_rows, bench.MULTITASK_ROWS))
    say(plan_line(f"bench fusion: {sum(map(len, rows))} rows ({len(rows[0])} fusion, "
                  f"{len(rows[1])} tight-memory, {len(rows[2])} multi-task), budget {budget}"
                  f"{'' if full else ', quick models'}", out, docs,
                  earlier_seconds(out, cluster=cluster, budget=budget, seed=seed,
                                  quick=not full, learned=learned)))
    compile_simulator()
    res = bench.run(cluster, budget, seed, not full, rows[0], rows[1], fr, rows[2], method,
                    learned, out)
    console.print(bench.to_markdown(res))
    if docs:
        bench.update_docs(res, docs, command)
    console.print(f"results: {out}" + (f"; tables written into {docs}" if docs else ""))
