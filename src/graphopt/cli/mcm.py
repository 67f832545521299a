"""``graphopt train mcm`` and ``graphopt bench mcm``: multi-chip partitioning's policy
pre-training and its benchmark (docs/mcm.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console, evaluation_backend
from graphopt.cli.locks import check_run_folder, lock_folder
from graphopt.cli.params import PARAM_HELP, method_params, options_from_fields, ppo_options
from graphopt.cli.warmup import compile_simulator
from graphopt.cli.options import (address_option, backend_option, budget_option,
                                  methods_option, out_option, seed_option)
from graphopt.errors import UsageError, MAX_THREADS
from graphopt.rl.config import PPOConfig

__all__ = ["bench_mcm", "corpus_mcm_targets", "train_mcm", "train_mcm_imitate"]


@options_from_fields(PPOConfig, unset_default="pre-training's")
def train_mcm(
    out: Path = out_option(Path("runs/mcm-pretrain"),
                           "Folder for the checkpoint (resumed when it exists), log.csv, "
                           "curve.png and the policy (policy.safetensors + policy.json). "
                           "Example: runs/mcm"),
    corpus: str = typer.Option("default", help="Graphs to pre-train on, comma-separated "
                                               "GRAPH@PRESET items, GRAPH a name of "
                                               "graphopt.benchmarks.mcm.GRAPHS, or 'default' "
                                               "(no BERT; see docs/mcm.md); an item may be "
                                               "an MCM targets folder ('graphopt corpus "
                                               "mcm-targets'): its graphs on their presets. "
                                               "Example: "
                                               "resnet-50@mcm-ring4,rnnlm-2@mcm-ring8"),
    updates: int = typer.Option(300, min=1, help="PPO updates, one graph each, in turn (a "
                                                 "resumed run stops at this total)."),
    minutes: float | None = typer.Option(None, min=0.0, help="Stop after this many minutes "
                                                            "(the checkpoint resumes later). "
                                                            "Example: 15"),
    repair_seconds: float = typer.Option(0.1, min=0.001, help="CP-SAT seconds per repaired "
                                                              "proposal. Example: 0.5"),
    seed: int = seed_option("Seed of the policy's initialization and sampling."),
    init: Path | None = typer.Option(None, "--init", help="Start from a saved MCM policy "
                                                         "('graphopt train mcm-imitate'). "
                                                         "Example: runs/mcm-imitate"),
    threads: int = typer.Option(1, min=1, max=MAX_THREADS, help="torch CPU threads."),
    backend: str = backend_option(" (the rollouts' simulations go to the pool)"),
    address: str | None = address_option(),
    **ppo,
) -> None:
    """Pre-train the MCM policy (GO's network with a chiplet head) with PPO on repaired
    partitions' pipelined throughput; the result is what 'mcm' and 'mcm-finetune' load
    with -p mcm.checkpoint=OUT. Ctrl-C stops after the current update, saved.

    Example: graphopt train mcm --updates 300 --out runs/mcm
    """

    import torch

    from graphopt.zoo import forward_graph
    from graphopt.hardware import load_cluster
    from graphopt.optim.learned.mcm.method import PRETRAIN_CORPUS, PRETRAIN_PPO
    from graphopt.optim.learned.mcm.train import pretrain
    from graphopt.sim import Problem

    torch.set_num_threads(threads)
    items = PRETRAIN_CORPUS if corpus == "default" else tuple(
        c.strip() for c in corpus.split(",") if c.strip())
    _lock = check_run_folder(out)  # held while the run lasts
    cfg, flags = ppo_options(PRETRAIN_PPO, ppo)
    command = " ".join(["graphopt train mcm", f"--out {out}",
                        *([f"--corpus {corpus}"] if corpus != "default" else []),
                        f"--updates {updates}", *([f"--minutes {minutes:g}"] if minutes else []),
                        f"--repair-seconds {repair_seconds:g}", f"--seed {seed}",
                        *([f"--init {init}"] if init else []), *flags])
    if not items:
        raise UsageError(f"--corpus {corpus!r}: no GRAPH@PRESET item")
    problems = []
    for item in items:
        if Path(item, "targets.json").is_file():  # an MCM targets folder: its pairs
            from graphopt.optim.learned.mcm.imitate import load_targets

            problems += [p for p, _, _ in load_targets(item)]
            continue
        graph, sep, where = item.partition("@")
        if not sep:
            raise UsageError(f"--corpus item {item!r}: expected GRAPH@PRESET, e.g. "
                             "resnet-50@mcm-ring4")
        with console.status(f"loading {graph} ..."):
            problems.append(Problem(forward_graph(graph), load_cluster(where)))
    compile_simulator()
    with evaluation_backend(backend, address):
        res = pretrain(problems, out, updates=updates,
                       seconds=None if minutes is None else minutes * 60, seed=seed, ppo=cfg,
                       repair_seconds=repair_seconds, command=command, init=init)
    t = Table(title=f"MCM pre-training: {res['updates']} updates, {res['total_evals']:,} "
                    f"partitions ({res['seconds']:.0f} s this run)")
    for col in ("graph", "chips", "first batch mean / bound", "last batch mean / bound",
                "best / bound"):
        t.add_column(col, justify="left" if col == "graph" else "right")
    for i, p in enumerate(problems):
        rows = [r for r in res["log"] if r["env"] == i and r["charts/mean_ratio"] is not None]
        t.add_row(p.graph.name, str(p.num_devices),
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


def corpus_mcm_targets(
    out: Path = out_option(Path("runs/mcm-targets"),
                           "Folder for the targets (targets.json, graphs/); resumed when it "
                           "holds some. Example: runs/mcm-targets"),
    sources: str = typer.Option("default", help="Graphs, comma-separated: hf:TYPE:k=v,... "
                                                "sources (forward graphs are built) or names of "
                                                "graphopt.benchmarks.mcm.GRAPHS, or 'default' "
                                                "(corpus training families; see docs/mcm.md). "
                                                "Example: transformer-xl-2,rnnlm-2"),
    presets: str = typer.Option("mcm-ring4,mcm-ring8,mcm-ring16",
                                help="MCM presets each graph is partitioned on."),
    budget: int = typer.Option(128, min=1, max=1_000_000, help="Evaluations of mcm-sa per graph "
                                                              "and preset. Example: 256"),
    repair_seconds: float = typer.Option(0.1, min=0.001, help="CP-SAT seconds per repair."),
    seed: int = seed_option("Seed of the searches."),
) -> None:
    """MCM imitation targets: per forward graph and preset, the best partition of a long
    mcm-sa run (docs/mcm.md, "Learning from search"). What 'graphopt train mcm-imitate'
    learns from.

    Example: graphopt corpus mcm-targets --out runs/mcm-targets --budget 128
    """
    from graphopt.optim.learned.mcm.imitate import DEFAULT_SOURCES, search_targets

    items = DEFAULT_SOURCES if sources == "default" else tuple(
        x.strip() for x in sources.split(",") if x.strip())
    where = tuple(x.strip() for x in presets.split(",") if x.strip())
    from graphopt.hardware import load_cluster

    check_output(out, "--out", folder=True)
    _lock = lock_folder(out)  # held while the run lasts: a second run into --out is refused
    if not items or not where:
        raise UsageError("--sources and --presets need at least one item each")
    for preset in where:
        load_cluster(preset)
    compile_simulator()
    doc = search_targets(items, where, out, budget=budget, repair_seconds=repair_seconds,
                         seed=seed, progress=lambda line: console.print(line, highlight=False))
    skipped = sum("error" in e for e in doc["entries"].values())
    console.print(f"{len(doc['entries']) - skipped} targets in {out}/targets.json"
                  + (f" ({skipped} graph-preset pairs skipped: no valid partition)" if skipped else ""))


def train_mcm_imitate(
    targets: Path = typer.Argument(..., help="Folder of MCM targets ('graphopt corpus "
                                             "mcm-targets'). Example: runs/mcm-targets"),
    out: Path = out_option(Path("runs/mcm-imitate"),
                           "Folder for the checkpoint (resumed, or run on with more --epochs, "
                           "when it exists) and the policy. Example: runs/mcm-imitate"),
    epochs: int = typer.Option(30, min=1, max=100_000, help="Passes over the targets."),
    lr: float = typer.Option(1e-3, min=1e-8, max=1.0, help="Adam's learning rate."),
    distance: float = typer.Option(1.0, min=0.0, help="Weight of the expected distance along "
                                                      "the chain to the target chip, beside "
                                                      "the cross-entropy."),
    seed: int = seed_option("Seed of the policy's initialization and of each epoch's order."),
    threads: int = typer.Option(1, min=1, max=MAX_THREADS, help="torch CPU threads."),
) -> None:
    """Pre-train the MCM policy by imitation: each unit on its target partition's chip
    (docs/mcm.md, "Learning from search"). The policy is what 'mcm' and 'mcm-finetune'
    load with -p mcm-finetune.checkpoint=OUT.

    Example: graphopt train mcm-imitate runs/mcm-targets --out runs/mcm-imitate
    """
    import torch

    from graphopt.optim.learned.mcm.imitate import imitate, load_targets

    torch.set_num_threads(threads)
    command = (f"graphopt train mcm-imitate {targets} --out {out} --epochs {epochs} --lr {lr:g} "
               f"--distance {distance:g} --seed {seed}")
    _lock = check_run_folder(out)  # held while the run lasts
    with console.status(f"loading the targets of {targets} ..."):
        items = load_targets(targets)
    console.print(f"{len(items)} target partitions")

    def progress(row: dict) -> None:
        console.print(f"epoch {row['epoch']}/{epochs}  loss {row['loss']:.4f}  "
                      f"accuracy {row['accuracy']:.3f}  {row['seconds']:.1f} s",
                      highlight=False)

    imitate(items, out, epochs=epochs, lr=lr, distance=distance, seed=seed,
            command=command, progress=progress)
    console.print(f"policy and checkpoint in {out}/")


def bench_mcm(
    graphs: str = typer.Option("", help="Graphs, comma-separated (default: all of "
                                        "graphopt.benchmarks.mcm.GRAPHS). Example: "
                                        "bert-base,resnet-50"),
    presets: str = typer.Option("", help="MCM presets, comma-separated (default: "
                                         "mcm-ring4,mcm-ring8,mcm-ring16). Example: mcm-ring4"),
    methods: str = methods_option("", "Methods, comma-separated (default: every MCM method).",
                                  example="mcm-random,mcm-sa,mcm-finetune"),
    budget: int = budget_option(64, "Evaluations (repaired partitions) per search method."),
    scratch_budget: int = typer.Option(0, min=0, help="Evaluations of mcm-one (from scratch) "
                                                      "and mcm-finetune on every graph and "
                                                      "preset, for the fine-tuning speed-up "
                                                      "(0: skip). Example: 512"),
    seed: int = seed_option("Seed of every method."),
    out: Path = out_option(Path("runs/bench/mcm.json"), "Results JSON (extended row by "
                                                        "row). Example: /tmp/mcm.json"),
    docs: Path | None = typer.Option(None, help="Markdown file whose mcm section is rewritten "
                                                "(default: none). Example: docs/benchmarks.md"),
    param: list[str] = typer.Option([], "--param", "-p", help=PARAM_HELP),
) -> None:
    """Multi-chip partitioning: every method on every graph and preset at the same number
    of evaluations; throughput, time to reach it, valid proposals before and after repair.

    Example: graphopt bench mcm --graphs bert-base --presets mcm-ring4 --budget 64
    """
    from graphopt.benchmarks import RESULTS, earlier_seconds, mcm, plan_line, say

    def pick(text: str, default: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(x.strip() for x in text.split(",") if x.strip()) or default

    names = pick(methods, mcm.METHODS)
    command = " ".join(["graphopt bench mcm", *([f"--graphs {graphs}"] if graphs else []),
                        *([f"--presets {presets}"] if presets else []),
                        *([f"--methods {methods}"] if methods else []), f"--budget {budget}",
                        *([f"--scratch-budget {scratch_budget}"] if scratch_budget else []),
                        f"--seed {seed}", *(f"-p {p}" for p in param),
                        *([f"--out {out}"] if out != RESULTS / "mcm.json" else []),
                        *([f"--docs {docs}"] if docs else [])])
    known = (*mcm.METHODS, "mcm-one")
    unknown = [m for m in names if m not in known]
    if unknown:
        raise UsageError(f"--methods: {', '.join(unknown)} not a multi-chip "
                         f"partitioning method; known: {', '.join(known)}")
    check_output(out, "--out")
    check_output(docs, "--docs")
    params = method_params(param, list(dict.fromkeys([*names, "mcm-one", "mcm-finetune"])))
    say(plan_line(f"bench mcm: {len(names)} methods on {len(pick(graphs, mcm.GRAPHS))} graphs x "
                  f"{len(pick(presets, mcm.PRESETS))} presets, budget {budget}", out, docs,
                  earlier_seconds(out, budget=budget, seed=seed)))
    compile_simulator()
    res = mcm.run(pick(graphs, mcm.GRAPHS), pick(presets, mcm.PRESETS), names, budget,
                  seed, out, params=params, scratch_budget=scratch_budget, command=command,
                  progress=say)
    console.print(mcm.to_markdown(res))
    if docs:
        mcm.update_docs(res, docs)
    console.print(f"results: {out}" + (f"; table written into {docs}" if docs else ""))
