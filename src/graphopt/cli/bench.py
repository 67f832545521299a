"""``graphopt bench``: benchmarks whose results go to --out (default under runs/bench/); a
Markdown file's tables change only with --docs FILE."""

from __future__ import annotations

from pathlib import Path

import typer

from graphopt._files import check_output
from graphopt.cli._common import console, evaluation_backend
from graphopt.cli.params import PARAM_HELP, method_params
from graphopt.cli.warmup import compile_simulator
from graphopt.cli.fusion import bench_fusion
from graphopt.cli.mcm import bench_mcm
from graphopt.cli.regal import bench_regal
from graphopt.cli.options import (address_option, backend_option, budget_option,
                                  cluster_option, methods_option, out_option, seed_option)
from graphopt.cli.rewrite import bench_rewrite
from graphopt.benchmarks import RESULTS, earlier_seconds, plan_line, say

app = typer.Typer(no_args_is_help=True, help="Benchmarks; results go to --out (default under "
                                             "runs/bench/); a Markdown file's tables change only "
                                             "with --docs FILE (e.g. docs/benchmarks.md).")
app.command("regal")(bench_regal)
app.command("mcm")(bench_mcm)
app.command("fusion")(bench_fusion)
app.command("rewrite")(bench_rewrite)


@app.command("go-table2")
def bench_go_table2(
    quick: bool = typer.Option(False, "--quick", help="Small versions of every model (CI)."),
    cluster: str = cluster_option("p100", what="Preset whose first N devices each row uses (N "
                                               "from GO's Table 2)", default_help="default p100",
                                  example="dgx1-v100"),
    methods: str = methods_option(",".join(["single", "expert", "metis", "m-etf", "m-sct",
                                            "heft", "sa", "brkga"]), "Methods, comma-separated.",
                                  example="expert,metis,sa"),
    budget: int = budget_option(2000, "Evaluations per search method."),
    rows: str = typer.Option("", help="Only these zoo models, comma-separated (default: "
                                      "all 14). Example: gnmt-2,rnnlm-4"),
    seed: int = seed_option("Seed of every method."),
    out: Path | None = out_option(None, "Results JSON; default runs/bench/go-table2[-quick].json. "
                                        "Example: /tmp/t2.json"),
    docs: Path | None = typer.Option(None, help="Markdown file whose go-table2 section is "
                                                "rewritten (default: none). Example: "
                                                "docs/benchmarks.md"),
    resume: bool = typer.Option(False, help="Extend --out instead of replacing it (same cluster, "
                                            "budget, seed): keep its rows and run only the "
                                            "methods a chosen row lacks. Example: --resume "
                                            "--methods rl-lstm,hdp --rows rnnlm-2"),
    redo: str = typer.Option("", help="With --resume, run these methods again even where "
                                      "present, comma-separated. Example: sa,brkga"),
    param: list[str] = typer.Option([], "--param", "-p", help=PARAM_HELP),
    backend: str = backend_option(
        help="Where the rows run: 'local' (one after another here) or 'ray' (each row a Ray "
             "task, on a local Ray started for the run or the cluster of --address; results "
             "gathered into the same file and table). Example: --backend ray"),
    address: str | None = address_option(),
) -> None:
    """GO's Table 2 on our zoo: every baseline on the 14 models, equal budgets; the learned
    placers (rl-lstm, hdp) added on chosen rows with --resume.

    Example: graphopt bench go-table2 --resume --methods rl-lstm,hdp --rows transformer-xl-2
    """
    from graphopt.benchmarks import go_table2

    out = out or RESULTS / f"go-table2{'-quick' if quick else ''}.json"
    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    chosen = tuple(r.strip() for r in rows.split(",") if r.strip()) or go_table2.ROWS
    command = " ".join(["graphopt bench go-table2", *(["--quick"] if quick else []),
                        *([f"--cluster {cluster}"] if cluster != "p100" else []),
                        f"--budget {budget}", *([f"--methods {methods}"] if methods !=
                                                 ",".join(go_table2.METHODS) else []),
                        *([f"--rows {rows}"] if rows else []), *(["--resume"] if resume else []),
                        *([f"--redo {redo}"] if redo else []), *(f"-p {p}" for p in param),
                        *([f"--out {out}"] if out != RESULTS / out.name else []),
                        *([f"--docs {docs}"] if docs else [])])
    check_output(out, "--out")
    check_output(docs, "--docs")
    params = method_params(param, list(names))
    say(plan_line(f"bench go-table2: {len(names)} methods on {len(chosen)} rows"
                  f"{' (quick sizes)' if quick else ''}, budget {budget}",
                  out, docs, earlier_seconds(out, cluster=cluster, budget=budget, seed=seed,
                                             quick=quick)))
    compile_simulator()
    with evaluation_backend(backend, address, pool=False):
        tasks = None
        if backend == "ray":
            from graphopt.evaluate.ray import map_tasks as tasks
        res = go_table2.run(cluster, names, budget, seed, quick, chosen, out, resume,
                            params=params, command=command, tasks=tasks,
                            redo=tuple(m.strip() for m in redo.split(",") if m.strip()))
    console.print(go_table2.to_markdown(res))
    if docs:
        go_table2.update_docs(res, docs)
    console.print(f"results: {out}" + (f"; table written into {docs}" if docs else ""))


@app.command("go")
def bench_go(
    quick: bool = typer.Option(False, "--quick", help="Small versions of every model (CI)."),
    cluster: str = cluster_option("p100", what="Preset whose first N devices each row uses",
                                  default_help="default p100", example="dgx1-v100"),
    budget: int = budget_option(2000, "Evaluations per method."),
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
    baselines: str = typer.Option("", help="Non-learned methods of the placement rows, "
                                           "comma-separated; expert among them (default: "
                                           "go-table2's, portfolio included). Example: "
                                           "expert,portfolio"),
    seed: int = seed_option("Seed of every method."),
    out: Path | None = out_option(None, "Results JSON; default runs/bench/go[-quick].json. "
                                        "Example: /tmp/go.json"),
    docs: Path | None = typer.Option(None, help="Markdown file whose go sections are rewritten "
                                                "(default: none). Example: docs/benchmarks.md"),
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

    out = out or RESULTS / f"go{'-quick' if quick else ''}.json"
    names = pick(learned, go_bench.LEARNED)
    command = " ".join(["graphopt bench go", *(["--quick"] if quick else []),
                        f"--budget {budget}", *([f"--learned-rows {learned_rows}"] if learned_rows
                                                else []),
                        *([f"--zero-shot-rows {zero_shot_rows}"] if zero_shot_rows else []),
                        *([f"--multitask-rows {multitask_rows}"] if multitask_rows else []),
                        *([f"--learned {learned}"] if learned != "go,go-finetune,go-one" else []),
                        *([f"--baselines {baselines}"] if baselines else []),
                        *(f"-p {p}" for p in param),
                        *([f"--out {out}"] if out != RESULTS / out.name else []),
                        *([f"--docs {docs}"] if docs else [])])
    check_output(out, "--out")
    check_output(docs, "--docs")
    from graphopt.benchmarks.go_table2 import METHODS

    params = method_params(param, list(METHODS) + list(names))
    rows = (pick(learned_rows, go_bench.LEARNED_ROWS), pick(zero_shot_rows, go_bench.ROWS),
            pick(multitask_rows, go_bench.MULTITASK_ROWS))
    say(plan_line(f"bench go{' --quick' if quick else ''}: {len(rows[0])} placement rows "
                  f"(every method), {len([r for r in rows[1] if r not in rows[0]])} "
                  f"zero-shot rows, {len(rows[2])} multi-task rows; budget {budget}",
                  out, docs, earlier_seconds(out, cluster=cluster, budget=budget, seed=seed,
                                             quick=quick)))
    compile_simulator()
    res = go_bench.run(cluster, budget, seed, quick, *rows, multitask_budget,
                       names, out, resume, params=params,
                       baselines=pick(baselines, METHODS))
    console.print(go_bench.to_markdown(res))
    if docs:
        go_bench.update_docs(res, docs, command)
    console.print(f"results: {out}" + (f"; tables written into {docs}" if docs else ""))
