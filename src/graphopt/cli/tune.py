"""``graphopt tune``: a search's hyperparameters tuned with Ray Tune, the best written as
a file ``-p`` reads."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console, evaluation_backend
from graphopt.cli.warmup import compile_simulator
from graphopt.cli.options import (address_option, budget_option, cluster_option, out_option,
                                  seed_option, split_item, trials_option)
from graphopt.errors import UsageError, MAX_SEED
from graphopt.frontends import load_source

app = typer.Typer()


@app.command()
def tune(
    graphs: str = typer.Argument(..., help="Graphs to tune on, comma-separated GRAPH@CLUSTER "
                                           "items, or GRAPH alone for one on --cluster (GRAPH "
                                           "as for 'optimize'). Example: "
                                           "zoo:gnmt-2@p100:2,example:mlp"),
    method: str = typer.Option("brkga", "--method", "-m",
                               help="The method whose hyperparameters to tune ('graphopt "
                                    "methods METHOD' lists them). Example: sa"),
    cluster: str | None = cluster_option(what="Cluster of the graphs given without "
                                              "@CLUSTER"),
    trials: int = trials_option(16),
    budget: int = budget_option(1000, "Evaluations the method gets in each run of a trial."),
    seeds: str = typer.Option("0", help="Seeds each setting runs with, comma-separated; its "
                                        "score is the geometric mean over graphs and seeds. "
                                        "Example: 0,1,2"),
    keys: str = typer.Option("", help="Only these hyperparameters, comma-separated (default: "
                                      "every numeric one). Example: population,elite_fraction"),
    task: str = typer.Option("placement", "--task", "-t",
                             help="What the method decides, comma-separated. "
                                  "Example: placement,scheduling"),
    seed: int = seed_option("Seed of the random search over settings."),
    out: Path = out_option(Path("tuned.json"), "The best setting, for -p; with every trial's "
                                               "score. Example: runs/brkga-tuned.json"),
    address: str | None = address_option(),
) -> None:
    """Tune a search's hyperparameters with Ray Tune (trials run as Ray tasks, on a local
    Ray or a cluster) and write the best setting as a file that -p reads: step time over
    the lower bound, geometric mean over the graphs and seeds, at the given budget.

    Example: graphopt tune zoo:gnmt-2@p100:2 --method brkga --trials 32 -o brkga.json, then
    graphopt optimize zoo:gnmt-4 -m brkga -p brkga.json
    """
    from graphopt.benchmarks import save_json
    from graphopt.hardware import load_cluster
    from graphopt.optim.tune import tune as run_tune
    from graphopt.sim import Problem

    check_output(out, "--out")
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds {seeds!r}: expected whole numbers, e.g. 0,1,2") from None
    if any(not 0 <= s <= MAX_SEED for s in seed_list):
        raise UsageError(f"--seeds {seeds!r}: expected whole numbers in 0..{MAX_SEED}, "
                         "e.g. 0,1,2")
    if not seed_list:
        raise UsageError(f"--seeds {seeds!r}: no seed")
    problems = []
    for item in (g.strip() for g in graphs.split(",") if g.strip()):
        graph, where = split_item(item, cluster)
        with console.status(f"loading {graph} ..."):
            problems.append(Problem(load_source(graph), load_cluster(where)))
    if not problems:
        raise UsageError(f"{graphs!r}: no graph")
    compile_simulator()
    with evaluation_backend("ray", address, pool=False), \
            console.status(f"tuning {method}: {trials} trials on Ray Tune ..."):
        res = run_tune(problems, method, trials=trials, budget=budget, seeds=seed_list,
                       task=task, keys=[k.strip() for k in keys.split(",") if k.strip()],
                       seed=seed)
    res["command"] = (f"graphopt tune {graphs} --method {method} "
                      + (f"--cluster {cluster} " if cluster else "")
                      + f"--trials {trials} --budget {budget} --seeds {seeds} --task {task} "
                      f"--seed {seed}" + (f" --keys {keys}" if keys else ""))
    save_json(res, out)
    t = Table(title=f"{method}: {trials} settings, step time / bound (geomean over "
                    f"{len(problems)} graph(s) x {len(seed_list)} seed(s), budget {budget})")
    names = list(res["space"])
    for col in ("rank", "score", *names):
        t.add_column(col, justify="right")
    for i, row in enumerate(res["trials"][:10]):
        t.add_row(str(i + 1), "refused" if row["ratio"] is None else f"{row['ratio']:.3f}",
                  *(f"{row['config'][k]:.4g}" for k in names))
    console.print(t)
    gain = res["default_ratio"] / res["ratio"]
    console.print(f"best {res['ratio']:.3f} vs defaults {res['default_ratio']:.3f} "
                  f"({gain:.2f}x); use it with -p {out}: "
                  f"{json.dumps(res['params'][method])}")
