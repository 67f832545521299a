"""``graphopt corpus``: build a versioned corpus of training-step graphs and show one."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from graphopt._files import check_output
from graphopt.cli._common import console
from graphopt.cli.locks import lock_folder
from graphopt.cli.mcm import corpus_mcm_targets
from graphopt.cli.regal import corpus_regal_targets
from graphopt.errors import UsageError
from graphopt.ir.graph import format_bytes

app = typer.Typer(no_args_is_help=True,
                  help="A versioned corpus of training-step graphs (zoo families, seeded "
                       "synthetic graphs, hf: models) with a train / held-out split.")
app.command("regal-targets")(corpus_regal_targets)
app.command("mcm-targets")(corpus_mcm_targets)


@app.command("build")
def corpus_build(
    out: Path = typer.Option(..., "--out", "-o", help="Corpus folder; an existing corpus is "
                                                      "resumed. Example: corpus/"),
    quick: bool = typer.Option(False, "--quick", help="A handful of tiny items (seconds; "
                                                      "tests)."),
    families: list[str] = typer.Option([], "--families", help="Only these families; repeat "
                                                              "it. Example: --families gnmt"),
    retry_skipped: bool = typer.Option(False, "--retry-skipped",
                                       help="Try again the items an earlier build skipped."),
) -> None:
    """Build the corpus in --out: one .npz per graph and manifest.json (sources, families,
    split, sizes, build seconds). Resumable: items the manifest holds are not rebuilt; an
    item that fails to build is recorded as skipped with its reason.

    Example: graphopt corpus build --out corpus --quick
    """
    import time

    from graphopt.corpus import build_corpus, default_items, load_manifest

    check_output(out, "--out", folder=True)
    _lock = lock_folder(out)  # held while the run lasts: a second build (or search) is refused
    load_manifest(out, missing_ok=True)  # refuse another format before any work
    items = default_items(quick=quick, families=families or None)
    if not items:
        raise UsageError(f"--families {' '.join(families)}: no item of these families; "
                         "see 'graphopt corpus build --help'")
    start = time.perf_counter()

    def progress(done: int, total: int, item, record) -> None:
        what = ("kept" if record.get("reused") else record["status"])
        size = f"{record['nodes']:,} ops" if record.get("nodes") is not None else \
            record.get("reason", "")
        console.print(f"[{done}/{total}] {what:7} {record.get('seconds', 0):7.1f} s  "
                      f"{item.split:8} {item.source}  {size}", highlight=False, soft_wrap=True)

    manifest = build_corpus(out, items, retry_skipped=retry_skipped, progress=progress)
    last = manifest["builds"][-1]
    console.print(f"built {last['built']}, skipped {last['skipped']}, kept {last['reused']} "
                  f"in {time.perf_counter() - start:,.1f} s; manifest: {out / 'manifest.json'}")


def _show(folder: Path) -> None:
    from graphopt.corpus import load_manifest, summarize

    manifest = load_manifest(folder)
    rows = summarize(manifest)
    t = Table(title=f"corpus {folder} (format version {manifest['version']})")
    for col in ("family", "split", "graphs", "skipped", "ops (min-max)", "size", "build s"):
        t.add_column(col)
    for r in rows:
        span = "-" if r["min_nodes"] is None else f"{r['min_nodes']:,}-{r['max_nodes']:,}"
        t.add_row(r["family"], r["split"], str(r["built"]), str(r["skipped"]), span,
                  format_bytes(r["bytes"]), f"{r['seconds']:,.1f}")
    console.print(t)
    for split in ("train", "held-out"):
        mine = [r for r in rows if r["split"] == split]
        console.print(f"{split}: {sum(r['built'] for r in mine)} graphs from "
                      f"{sum(1 for r in mine if r['built'])} families, "
                      f"{sum(r['skipped'] for r in mine)} skipped")
    builds = manifest.get("builds", [])
    if builds:
        console.print(f"build time: {sum(b['seconds'] for b in builds):,.1f} s over "
                      f"{len(builds)} run(s)")
    skipped = [r for r in manifest["items"].values() if r["status"] == "skipped"]
    for r in skipped:
        console.print(f"skipped {r['source']}: {r['reason']}", highlight=False, soft_wrap=True)


@app.command("list")
def corpus_list(folder: Path = typer.Argument(..., help="Corpus folder. Example: corpus/")
                ) -> None:
    """Show a corpus: per family and split, graphs, skipped items, sizes and build time.

    Example: graphopt corpus list corpus
    """
    _show(folder)


@app.command("info")
def corpus_info(folder: Path = typer.Argument(..., help="Corpus folder. Example: corpus/")
                ) -> None:
    """The same table as 'graphopt corpus list'.

    Example: graphopt corpus info corpus
    """
    _show(folder)


@app.command("search")
def corpus_search(
    folder: Path = typer.Argument(..., help="Corpus folder (from 'corpus build'). Example: corpus/"),
    method: str = typer.Option("portfolio", "--method", "-m",
                               help="The search that makes each target ('graphopt methods' "
                                    "lists them). Example: sa"),
    budget: int = typer.Option(2000, "--budget", "-b", min=1, max=10_000_000,
                               help="Simulator evaluations per item. 1..10,000,000. "
                                    "Example: 20000"),
    clusters: str = typer.Option("p100:2,p100:4,p100:8", "--clusters",
                                 help="Cluster specs given to the items in turn, "
                                      "comma-separated. Example: p100:4"),
    split: str = typer.Option("train", "--split", help="Which split's items: train or "
                                                       "held-out. Example: held-out"),
    policy: Path | None = typer.Option(None, "--policy",
                                       help="A saved GO policy (folder with policy.json): each "
                                            "search starts from its greedy plan, and a target "
                                            "is replaced only by a faster plan (expert "
                                            "iteration). Example: runs/go-imitate"),
    limit: int | None = typer.Option(None, "--limit", min=1,
                                     help="At most this many items (the first by id)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Seed of the searches."),
) -> None:
    """Search a target plan for every built item of a split (one line per item); the
    targets are what 'graphopt train imitate' learns from. Resumable: an item whose
    target this method, budget and round made is kept.

    Example: graphopt corpus search corpus --budget 2000
    """
    import time

    from graphopt.corpus import load_manifest
    from graphopt.optim.learned.targets import search_targets

    if split not in ("train", "held-out"):
        raise UsageError(f"--split {split!r}: expected train or held-out")
    specs = tuple(c.strip() for c in clusters.split(",") if c.strip())
    from graphopt.hardware import load_cluster
    from graphopt.optim.base import get_optimizer

    get_optimizer(method)  # an unknown method fails before any search
    load_manifest(folder)  # not a corpus: refused before the folder is claimed
    _lock = lock_folder(folder, "FOLDER")  # targets.json is written there: one run at a time
    for spec in specs:
        load_cluster(spec)
    if not specs:
        raise UsageError("--clusters: no cluster given")
    if policy is not None:
        from graphopt.optim.learned.go.method import load_go_policy
        load_go_policy(policy)
    start = time.perf_counter()

    def progress(done: int, total: int, key: str, entry: dict) -> None:
        what = "kept" if entry.get("reused") else "searched"
        step = entry.get("step_time")
        expert = entry.get("expert_step_time")
        gain = f"  {expert / step:5.2f}x expert" if step and expert else ""
        console.print(f"[{done}/{total}] {what:8} {entry.get('seconds', 0):6.1f} s  {key}  "
                      + (f"{step * 1e3:.3f} ms{gain}" if step else entry.get("status", "")),
                      highlight=False, soft_wrap=True)

    doc = search_targets(folder, method=method, budget=budget, clusters=specs, seed=seed,
                         split=split, policy=policy, limit=limit, progress=progress)
    console.print(f"{len(doc['entries'])} targets in {folder / 'targets.json'} "
                  f"({time.perf_counter() - start:,.1f} s this run)")
