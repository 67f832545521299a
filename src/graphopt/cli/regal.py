"""``graphopt train regal`` and ``graphopt bench regal``: REGAL's training and its Table 1."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console, evaluation_backend
from graphopt.cli.locks import check_run_folder, lock_folder
from graphopt.cli.params import options_from_fields
from graphopt.cli.warmup import compile_simulator
from graphopt.cli.options import (address_option, backend_option, cluster_option,
                                  methods_option, out_option)
from graphopt.errors import GraphoptError, UsageError, check_fields
from graphopt.optim.learned.regal.config import ImitateConfig, RegalConfig

__all__ = ["bench_regal", "corpus_regal_targets", "train_regal", "train_regal_imitate"]

OBJECTIVE_HELP = ("What BRKGA minimises: memory (the highest peak memory over devices, "
                  "REGAL's objective) or runtime (step time); plans out of memory rank last. "
                  "Example: runtime")


@options_from_fields(RegalConfig)
def train_regal(
    out: Path = out_option(Path("runs/regal-pretrain"),
                           "Folder for the checkpoint (resumed when it exists), log.csv, "
                           "curve.png and the policy (policy.safetensors + policy.json). "
                           "Example: runs/regal"),
    corpus: str = typer.Option("default", help="Training graphs, comma-separated zoo:NAME or "
                                               "layered:LxW:SEED items, each optionally *SCALE "
                                               "(activations rescaled), or 'default' (see "
                                               "docs/regal.md). Example: zoo:rnnlm-2-quick,"
                                               "layered:16x10:2*2"),
    cluster: str = cluster_option("p100:2", what="Cluster every corpus graph is placed on",
                                  default_help="default p100:2, REGAL's"),
    objective: str = typer.Option("memory", "--objective", help=OBJECTIVE_HELP),
    minutes: float | None = typer.Option(None, min=0.0, help="Stop after this many minutes (the "
                                                            "checkpoint resumes later). Example: 25"),
    backend: str = backend_option(" (BRKGA's simulations go to the pool)"),
    address: str | None = address_option(),
    **options,
) -> None:
    """Train REGAL's policy with REINFORCE: per update one corpus graph, a few sampled sets
    of per-node Beta distributions, each priced by BRKGA at --evals evaluations against
    uniform BRKGA at the same budget and seed. The result is what the 'regal' method
    loads with -p regal.checkpoint=OUT. Ctrl-C (or SIGTERM, SIGHUP) stops at the last whole
    update, saved, and exits 130; the same command resumes the run.

    Example: graphopt train regal --out runs/regal --minutes 25
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
    from graphopt.evaluate.objective import check_objective
    from graphopt.optim.learned.regal.method import TRAIN_CORPUS, load_corpus, pretrain_regal

    config = RegalConfig(**options)
    defaults = RegalConfig()
    command = " ".join(["graphopt train regal", f"--out {out}",
                        *([f"--corpus {corpus}"] if corpus != "default" else []),
                        *([f"--cluster {cluster}"] if cluster != "p100:2" else []),
                        *([f"--objective {objective}"] if objective != "memory" else []),
                        *([f"--minutes {minutes:g}"] if minutes is not None else []),
                        *((f"--{'' if v else 'no-'}{k.replace('_', '-')}" if isinstance(v, bool)
                           else f"--{k.replace('_', '-')} {v}")
                          for k, v in vars(config).items() if v != getattr(defaults, k))])
    _lock = check_run_folder(out)  # held while the run lasts
    check_fields(config, lambda key: "--" + key.replace("_", "-"))
    check_objective(objective)
    items = TRAIN_CORPUS if corpus == "default" else tuple(
        c.strip() for c in corpus.split(",") if c.strip())
    if not items:
        raise UsageError(f"--corpus {corpus!r}: no graph named")
    with console.status("loading the corpus ..."):
        problems = load_corpus(items, cluster)
    if problems[0].num_devices > config.max_devices:  # one cluster for every graph
        raise UsageError(f"--cluster {cluster} has {problems[0].num_devices} devices; "
                         f"--max-devices {config.max_devices} gives the policy's head "
                         "that many device slots")
    compile_simulator()
    with evaluation_backend(backend, address), Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console) as bar, stop_on_interrupt():
        job = bar.add_task("REGAL training", total=config.updates)

        def step(update: int, row: dict) -> None:
            bar.update(job, completed=update, description=f"REGAL {row['graph']}: reward "
                                                          f"{row['charts/reward_mean']:+.4f}")

        state = pretrain_regal(problems, out, config, objective,
                               None if minutes is None else minutes * 60, step, command)
        interrupted = stop_requested()
    t = Table(title=f"REGAL training: {state['update']} of {config.updates} updates "
                    f"({state['seconds']:.0f} s in all)")
    for col in ("graph", "updates", "mean reward, first half", "mean reward, second half"):
        t.add_column(col, justify="left" if col == "graph" else "right")
    for p in problems:
        r = [row["charts/reward_mean"] for row in state["log"] if row["graph"] == p.graph.name]
        h = len(r) // 2
        t.add_row(p.graph.name, str(len(r)), *(f"{sum(x) / len(x):+.4f}" if x else "-"
                                               for x in (r[:h], r[h:])))
    console.print(t)
    console.print(f"policy, checkpoint, log.csv and curve.png in {out}/")
    if interrupted:  # as `graphopt train` says it
        console.print(f"interrupted after update {state['update']}: the checkpoint in {out}/ "
                      "resumes the run (run the same command again)")
        raise typer.Exit(130)


def bench_regal(
    objectives: str = typer.Option("memory,runtime", help="Objectives, comma-separated, each "
                                                          "its own table. Example: memory"),
    evals: int = typer.Option(5000, min=1, help="Evaluations of every search (REGAL's 5K)."),
    seeds: int = typer.Option(3, min=1, help="Seeds per search; a graph's value is the median."),
    graphs: str = typer.Option("default", help="Held-out graphs, comma-separated corpus items "
                                               "(default: the test set of docs/regal.md). "
                                               "Example: layered:15x8:101"),
    methods: str = methods_option("all", "Rows, comma-separated labels of "
                                         "graphopt.benchmarks.regal.METHODS, or 'all' (the two "
                                         "rows of the elite-bias policy only with "
                                         "--elite-bias-policy).", short=False,
                                  example="BRKGA-5K,REGAL"),
    elite_bias_policy: Path | None = typer.Option(
        None, help="Folder of a policy trained with 'graphopt train regal --elite-bias': the "
                   "'REGAL elite bias' row runs it with elite_bias=true, 'REGAL elite-bias "
                   "policy (bias off)' without (the shipped policy has no elite bias). "
                   "Example: runs/regal-eb"),
    out: Path = out_option(Path("runs/bench/regal.json"), "Results JSON. "
                                                          "Example: /tmp/regal.json",
                           short=False),
    docs: Path | None = typer.Option(None, help="Markdown file whose --section is rewritten "
                                                "(default: none). Example: docs/benchmarks.md"),
    section: str = typer.Option("regal", help="Section of --docs the tables replace (between "
                                              "<!-- SECTION:start/end --> markers, appended when "
                                              "missing): 'regal' is the main table. "
                                              "Example: regal-elite-bias"),
    train_check: bool = typer.Option(True, help="Also price the shipped policy against uniform "
                                                "BRKGA on every training graph at the training "
                                                "budget (did it learn what it was rewarded for?)."),
) -> None:
    """REGAL's Table 1 on held-out graphs: peak memory (and step time) of every method at
    equal evaluations, % improvement over BRKGA-5K, % gap from the best known, time per run.

    Example: graphopt bench regal --objectives memory --seeds 3
    """
    from graphopt.benchmarks import check_section, earlier_seconds, plan_line, say
    from graphopt.benchmarks import regal as bench
    from graphopt.optim.learned.regal.method import TEST_GRAPHS

    labels = tuple(m for m in bench.METHODS if m not in bench.ELITE_BIAS_ROWS or elite_bias_policy) \
        if methods == "all" else tuple(m.strip() for m in methods.split(",") if m.strip())
    command = " ".join(["graphopt bench regal", f"--objectives {objectives}", f"--evals {evals}",
                        f"--seeds {seeds}", *([f"--graphs {graphs}"] if graphs != "default" else []),
                        *([f'--methods "{methods}"'] if methods != "all" else []),
                        *([f"--elite-bias-policy {elite_bias_policy}"] if elite_bias_policy else []),
                        *([] if train_check else ["--no-train-check"]),
                        *([f"--out {out}"] if out != Path("runs/bench/regal.json") else []),
                        *([f"--docs {docs}"] if docs else []),
                        *([f"--section {section}"] if section != "regal" else [])])
    check_output(out, "--out")
    check_output(docs, "--docs")
    try:
        check_section(section)
    except GraphoptError as err:
        raise UsageError(f"--section: {err}") from None
    bad = [m for m in labels if m not in bench.METHODS]
    if bad or not labels:
        raise UsageError(f"--methods: unknown {bad or methods!r}; rows are "
                         f"{', '.join(bench.METHODS)}")
    if elite_bias_policy and not set(bench.ELITE_BIAS_ROWS) & set(labels):
        raise UsageError(f"--elite-bias-policy: --methods has none of the rows that run it "
                         f"({', '.join(bench.ELITE_BIAS_ROWS)})")
    objs = tuple(o.strip() for o in objectives.split(",") if o.strip())
    from graphopt.evaluate.objective import check_objective

    for o in objs or (objectives,):
        check_objective(o)
    items = TEST_GRAPHS if graphs == "default" else tuple(
        g.strip() for g in graphs.split(",") if g.strip())
    if not items:
        raise UsageError(f"--graphs {graphs!r}: no graph named")
    say(plan_line(f"bench regal: {len(labels)} methods x {len(items)} graphs x {seeds} seeds "
                  f"x {len(objs)} objectives, {evals} evaluations each", out, docs,
                  earlier_seconds(out, evals=evals, seeds=seeds)))
    compile_simulator()
    with console.status("") as status:
        res = bench.run(objs, evals, seeds, items, labels, out,
                        on_step=lambda text: status.update(text + " ..."),
                        elite_bias_policy=elite_bias_policy, progress=say)
        if train_check:
            status.update("the shipped policy on the training graphs ...")
            res["train_check"] = bench.train_check()
            bench.save_json(res, out)
    console.print(bench.to_markdown(res))
    if docs:
        bench.update_docs(res, docs, command, section, out)
    console.print(f"results: {out}" + (f"; tables written into {docs}" if docs else ""))


def corpus_regal_targets(
    folder: Path = typer.Argument(..., help="Corpus folder (from 'corpus build'); only read. "
                                            "Example: corpus/"),
    out: Path = out_option(Path("runs/regal-targets"),
                           "Folder for the targets (index.json, targets/<id>.npz); resumed "
                           "when it holds some. Example: runs/regal-targets"),
    evals: int = typer.Option(50_000, "--evals", min=100, max=10_000_000,
                              help="Evaluations of each graph's long run (ten times the "
                                   "benchmark's 5,000). Example: 20000"),
    cluster: str = cluster_option("p100:2", what="Cluster every graph is placed on",
                                  default_help="default p100:2, REGAL's"),
    objective: str = typer.Option("memory", "--objective", help=OBJECTIVE_HELP),
    limit: int | None = typer.Option(None, "--limit", min=1,
                                     help="At most this many graphs (families in turn)."),
    minutes: float | None = typer.Option(None, min=0.0, help="Stop after this many minutes, at "
                                                            "a graph's end (run again to go on). "
                                                            "Example: 15"),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Seed of the long runs."),
) -> None:
    """REGAL's imitation targets: per train graph of the corpus, a long run of layer-split
    BRKGA and per-gene Beta(alpha, beta) fitted to its last elite (docs/regal.md,
    "Learning from search"). What 'graphopt train regal-imitate' learns from.

    Example: graphopt corpus regal-targets corpus --out runs/regal-targets --minutes 15
    """
    from graphopt.evaluate.interrupt import stop_on_interrupt
    from graphopt.evaluate.objective import check_objective
    from graphopt.hardware import load_cluster
    from graphopt.optim.learned.regal.imitate import build_targets

    argv = " ".join(["graphopt corpus regal-targets", str(folder), f"--out {out}",
                     *([f"--evals {evals}"] if evals != 50_000 else []),
                     *([f"--cluster {cluster}"] if cluster != "p100:2" else []),
                     *([f"--objective {objective}"] if objective != "memory" else []),
                     *([f"--limit {limit}"] if limit else []),
                     *([f"--minutes {minutes:g}"] if minutes is not None else []),
                     *([f"--seed {seed}"] if seed else [])])
    check_output(out, "--out", folder=True)
    _lock = lock_folder(out)  # held while the run lasts: a second run into --out is refused
    check_objective(objective)
    load_cluster(cluster)
    compile_simulator()

    def line(key: str, entry: dict) -> None:
        console.print(f"{entry['seconds']:6.1f} s  {key}  {entry['nodes']} ops  peak "
                      f"{entry['value'] / 2**20:.3f} MiB", highlight=False, soft_wrap=True)

    with stop_on_interrupt():
        doc = build_targets(folder, out, evals=evals, seed=seed, cluster=cluster,
                            objective=objective, limit=limit,
                            max_seconds=None if minutes is None else minutes * 60,
                            on_item=line, argv=argv)
    fams = {v["family"] for v in doc["items"].values()}
    console.print(f"{len(doc['items'])} graphs of {len(fams)} families in {out}/index.json "
                  f"({doc['builds'][-1]['seconds']:,.1f} s this run)")


@options_from_fields(ImitateConfig)
def train_regal_imitate(
    targets: Path = typer.Argument(..., help="Folder of REGAL targets ('graphopt corpus "
                                             "regal-targets'). Example: runs/regal-targets"),
    out: Path = out_option(Path("runs/regal-imitate"),
                           "Folder for the checkpoint (resumed, or run on with more --epochs, "
                           "when it exists), log.csv and the policy. Example: runs/regal-imitate"),
    minutes: float | None = typer.Option(None, min=0.0, help="Stop after this many minutes (the "
                                                            "checkpoint resumes later)."),
    **options,
) -> None:
    """Pre-train REGAL's head by imitation: per node, the Beta parameters fitted to long
    runs' elites (over the layer-split prior's), regressed from the graph. The policy is
    what 'regal' loads with -p regal.checkpoint=OUT.

    Example: graphopt train regal-imitate runs/regal-targets --out runs/regal-imitate
    """
    from graphopt.optim.learned.regal.imitate import imitate_regal

    config = ImitateConfig(**options)
    defaults = ImitateConfig()
    command = " ".join(["graphopt train regal-imitate", str(targets), f"--out {out}",
                        *([f"--minutes {minutes:g}"] if minutes is not None else []),
                        *(f"--{k.replace('_', '-')} {v}" for k, v in vars(config).items()
                          if v != getattr(defaults, k))])
    _lock = check_run_folder(out)  # held while the run lasts
    check_fields(config, lambda key: "--" + key.replace("_", "-"))

    def line(epoch: int, row: dict) -> None:
        val = "" if row["val_loss"] is None else (
            f"  val {row['val_loss']:.4f} (prior alone {row['val_loss_prior']:.4f}, "
            f"a constant {row['val_loss_constant']:.4f})")
        console.print(f"epoch {epoch}/{config.epochs}  train {row['train_loss']:.4f}{val}  "
                      f"{row['seconds']:.1f} s", highlight=False)

    state = imitate_regal(targets, out, config,
                          None if minutes is None else minutes * 60, line, command)
    console.print(f"policy, checkpoint and log.csv in {out}/ ({state['epoch']} epochs; "
                  f"validation families: {', '.join(state['val_families']) or 'none'})")
