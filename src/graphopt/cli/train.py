"""``graphopt train``: pre-train GO's policy with PPO on a corpus of graphs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt.cli._common import console, evaluation_backend
from graphopt.cli.locks import check_run_folder, lock_folder
from graphopt.cli.params import options_from_fields, ppo_options
from graphopt.cli.options import (address_option, backend_option, cluster_option, out_option,
                                  seed_option, split_item)
from graphopt.errors import UsageError, MAX_THREADS
from graphopt.frontends import load_source
from graphopt.cli.mcm import train_mcm, train_mcm_imitate
from graphopt.cli.regal import train_regal, train_regal_imitate
from graphopt.rl.config import PPOConfig

#: ``graphopt train`` itself pre-trains GO; ``graphopt train regal`` trains REGAL.
app = typer.Typer(invoke_without_command=True)
app.command("regal")(train_regal)
app.command("regal-imitate")(train_regal_imitate)
app.command("mcm")(train_mcm)
app.command("mcm-imitate")(train_mcm_imitate)


@app.command("imitate")
def train_imitate(
    corpus: Path = typer.Argument(..., help="Corpus folder whose train split has target plans "
                                            "('graphopt corpus search'). Example: corpus/"),
    out: Path = out_option(Path("runs/go-imitate"),
                           "Folder for the checkpoint (resumed when it exists) and the policy "
                           "(policy.safetensors + policy.json). Example: ckpt/go-imitate"),
    epochs: int = typer.Option(20, min=1, max=100_000, help="Passes over the targets."),
    lr: float = typer.Option(1e-3, min=1e-8, max=1.0, help="Adam's learning rate."),
    seed: int = seed_option("Seed of the policy's initialization and of each epoch's order."),
    init: Path | None = typer.Option(None, "--init", help="Start from a saved policy's weights. "
                                                         "Example: runs/go-imitate"),
    prior: bool = typer.Option(False, "--prior", help="Train a prior-aware policy: it reads "
                                                      "each graph's hand-written prior (the "
                                                      "fastest placement heuristic's plan, "
                                                      "computed once and kept in the corpus's "
                                                      "priors/ with the gain of every single "
                                                      "move off it) and learns to rank the "
                                                      "moves. 'go' with such a policy runs the "
                                                      "heuristics, then applies its best-ranked "
                                                      "moves to their plan."),
    threads: int = typer.Option(1, min=1, max=MAX_THREADS, help="torch CPU threads."),
) -> None:
    """Pre-train GO's policy by imitation: each train graph's nodes on the devices of its
    target plan, by a cross-entropy that does not care how devices are numbered (see
    docs/go.md). The policy is what 'go' loads with -p go.checkpoint=OUT, and what
    'graphopt train --init OUT' improves by PPO.

    Example: graphopt train imitate corpus --epochs 20 --out runs/go-imitate
    """
    import torch

    from graphopt.optim.learned.go.imitate import imitate
    from graphopt.optim.learned.targets import load_targets, prior_plans

    torch.set_num_threads(threads)
    command = (f"graphopt train imitate {corpus} --epochs {epochs} --lr {lr:g} --seed {seed}"
               + (f" --init {init}" if init else "") + (" --prior" if prior else ""))
    _lock = check_run_folder(out)  # held while the run lasts
    # --prior keeps the priors in the corpus's priors/: one writer of the corpus at a time
    # (a 'corpus search' or another 'train imitate --prior' there is refused)
    _corpus_lock = lock_folder(corpus, "CORPUS") if prior and (corpus / "manifest.json").is_file() \
        else None
    if init is not None:  # a bad or mismatched --init fails now, not after the priors
        from graphopt.optim.learned.go.method import load_go_policy, reads_prior

        if reads_prior(load_go_policy(str(init))[0]) != prior:
            raise UsageError(f"--init {init}: " + (
                "not a prior-aware policy; --prior continues only from one"
                if prior else "a prior-aware policy; continue it with --prior"))
    with console.status(f"loading the targets of {corpus} ..."):
        targets = load_targets(corpus)
    console.print(f"{len(targets)} target plans from "
                  f"{len({t.family for t in targets})} families")
    priors = moves = None
    if prior:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      console=console) as bar:
            job = bar.add_task("priors (every heuristic; kept in priors/)", total=len(targets))
            priors = prior_plans(corpus, targets, seed,
                                 lambda done, total, key: bar.update(job, completed=done))
            job = bar.add_task("every single move off each prior (kept)", total=len(targets))
            from graphopt.ir.coarsen import colocation_groups
            from graphopt.optim.learned.targets import prior_moves

            moves = prior_moves(corpus, targets, priors,
                                [colocation_groups(t.problem.graph) for t in targets],
                                lambda done, total, key: bar.update(job, completed=done))

    def progress(row: dict) -> None:
        console.print(f"epoch {row['epoch']}/{epochs}  loss {row['loss']:.4f}  "
                      f"accuracy {row['accuracy']:.3f}  {row['seconds']:.1f} s",
                      highlight=False)

    imitate(targets, out, epochs=epochs, lr=lr, seed=seed, init=init, command=command,
            priors=priors, moves=moves, progress=progress)
    console.print(f"policy and checkpoint in {out}/")


@app.callback()
@options_from_fields(PPOConfig, unset_default="pre-training's")
def train(
    ctx: typer.Context,
    corpus: str = typer.Option("default", help="Graphs to pre-train on, comma-separated "
                                               "GRAPH@CLUSTER items (GRAPH as for 'optimize'), "
                                               "or 'default': the zoo's train split and "
                                               "random layered graphs (see docs/go.md). An "
                                               "item may be a corpus folder: its train split "
                                               "on the clusters of its targets ('graphopt "
                                               "corpus search'). "
                                               "Example: zoo:rnnlm-2@p100:2,zoo:bert-base@p100:4"),
    cluster: str | None = cluster_option(what="Cluster of the --corpus items given without "
                                              "@CLUSTER"),
    out: Path = out_option(Path("runs/go-pretrain"),
                           "Folder for the checkpoint (resumed when it exists), log.csv, "
                           "curve.png and the policy (policy.safetensors + policy.json). "
                           "Example: ckpt/go"),
    updates: int = typer.Option(3000, min=1, help="PPO updates of the run, one graph each, in "
                                                  "turn (a resumed run stops at this total)."),
    minutes: float | None = typer.Option(None, min=0.0, help="Stop after this many minutes "
                                                            "(the checkpoint resumes later)."),
    task: str = typer.Option("placement", "--task", "-t",
                             help="What the policy learns to decide, comma-separated. "
                                  "Example: placement,scheduling,fusion"),
    seed: int = seed_option("Seed of the policy's initialization and sampling."),
    init: Path | None = typer.Option(None, "--init",
                                     help="Start from the weights of a saved policy (a folder "
                                          "with policy.json, as --out writes) instead of fresh "
                                          "ones: pre-training continued on another corpus or "
                                          "with other settings. Example: runs/go-pretrain"),
    threads: int = typer.Option(1, min=1, max=MAX_THREADS, help="torch CPU threads."),
    backend: str = backend_option(" (the rollouts' simulations go to the pool)"),
    address: str | None = address_option(),
    **ppo,
) -> None:
    """Pre-train GO's policy with PPO on a corpus of graphs; the result is what the 'go'
    and 'go-finetune' methods load with -p go.checkpoint=OUT. PPO options left unset take
    pre-training's settings (PRETRAIN_PPO in graphopt.optim.learned.go.method, see docs/go.md).

    Example: graphopt train --updates 3000 --out runs/go-pretrain
    """
    if ctx.invoked_subcommand:  # graphopt train regal ...: not GO's run
        return

    import torch

    from graphopt.hardware import load_cluster
    from graphopt.optim.base import parse_task
    from graphopt.optim.learned.go.method import (PRETRAIN_CORPUS, PRETRAIN_PPO, load_go_policy,
                                                  reads_prior)
    from graphopt.optim.learned.targets import prior_plan
    from graphopt.optim.learned.go.train import pretrain
    from graphopt.sim import Problem

    torch.set_num_threads(threads)
    items = PRETRAIN_CORPUS if corpus == "default" else tuple(
        c.strip() for c in corpus.split(",") if c.strip())
    _lock = check_run_folder(out)  # held while the run lasts
    aware = init is not None and reads_prior(load_go_policy(init)[0])  # a bad folder fails now
    tasks = parse_task(task)  # a bad --task fails now, not after the corpus is loaded
    ppo, flags = ppo_options(PRETRAIN_PPO, ppo)
    command = " ".join(["graphopt train",
                        *([f"--corpus {corpus}"] if corpus != "default" else []),
                        *([f"--cluster {cluster}"] if cluster else []),
                        f"--updates {updates}", *([f"--minutes {minutes:g}"] if minutes else []),
                        f"--task {task}", f"--seed {seed}",
                        *([f"--init {init}"] if init else []), *flags])
    if not items:
        raise UsageError(f"--corpus {corpus!r}: no GRAPH@CLUSTER item")
    problems, priors = [], []  # priors: a prior-aware policy's start plans
    for item in items:
        if (Path(item) / "manifest.json").is_file():  # a corpus: its train split
            from graphopt.optim.learned.targets import load_targets, prior_plans

            with console.status(f"loading the train split of {item} ..."):
                targets = load_targets(item)
                problems += [t.problem for t in targets]
                if aware:
                    priors += prior_plans(item, targets, seed)
            continue
        graph, where = split_item(item, cluster)
        with console.status(f"loading {graph} ..."):
            problems.append(Problem(load_source(graph), load_cluster(where)))
            if aware:
                priors.append(prior_plan(problems[-1], seed))
    with evaluation_backend(backend, address):
        res = pretrain(problems, out, task=tasks, updates=updates,
                       seconds=None if minutes is None else minutes * 60, seed=seed,
                       ppo=ppo, command=command, init=init, priors=priors if aware else None)
    t = Table(title=f"pre-training: {res['updates']} updates, {res['total_evals']:,} plans "
                    f"simulated ({res['seconds']:.0f} s this run)")
    for col in ("graph", "cluster", "first batch mean / bound", "last batch mean / bound",
                "best / bound"):
        t.add_column(col, justify="left" if col in ("graph", "cluster") else "right")
    for i, p in enumerate(problems):
        rows = [r for r in res["log"] if r["env"] == i and r["charts/mean_ratio"] is not None]
        t.add_row(p.graph.name, p.cluster.name,
                  *(f"{x:.2f}" if x is not None else "-" for x in (
                      rows[0]["charts/mean_ratio"] if rows else None,
                      rows[-1]["charts/mean_ratio"] if rows else None,
                      rows[-1]["charts/best_ratio"] if rows else None)))
    console.print(t)
    console.print(f"policy, checkpoint, log.csv and curve.png in {out}/")
    if res.get("interrupted"):
        console.print(f"interrupted after update {res['updates']}: the checkpoint in {out}/ "
                      "resumes the run (run the same command again)")
        raise typer.Exit(130)
