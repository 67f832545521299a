"""Train, evaluate and apply a learned cost model: reads top to bottom like CleanRL.

``train(TrainConfig(...)) -> run directory`` holding

- ``config.json``: every hyperparameter, the model's input widths, the split;
- ``weights.safetensors`` + ``checkpoint.json``: a :mod:`graphopt.runs.checkpoint`
  checkpoint (weights, optimizer state, feature normalization and the GST table as
  ``data.norm.*`` and ``data.gst.*``, the epoch reached and the log); written after
  every epoch atomically, so ``TrainConfig(resume=run_dir)`` continues exactly where
  it stopped (every epoch draws from its own seed ``(seed, epoch)``);
- ``log.csv`` (``losses/train`` per epoch; ``charts/...`` held-out metrics every
  ``eval_every`` epochs and after the last, empty between) and ``curve.png``
  (:func:`graphopt.viz.curves.metric_curves`, redrawn after each evaluation).

:func:`evaluate` scores held-out configurations per graph (Kendall's tau, top-K error,
tile score, ordered-pair accuracy); :func:`rank` lists the configurations a compiler
should try first. Checkpoints are safetensors and JSON: no pickle anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any
from pathlib import Path

import numpy as np
import torch

from graphopt.cost.profile import usable_device
from graphopt.costmodel.config import TrainConfig
from graphopt.costmodel.data import (CostGraph, CostModelError, FeatureNormalizer, load_dataset,
                                     sample_configs, split_configs, split_graphs)
from graphopt.costmodel.gst import HistoryTable, gst_scores, partition
from graphopt.costmodel.metrics import LOSSES, METRICS, ranking_loss, ranking_metrics
from graphopt.costmodel.models import MODELS, CostModel, build_model, graph_tensors
from graphopt.errors import check_fields
from graphopt._files import atomic_write, read_json
from graphopt.runs.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from graphopt.runs.run import run_name, seed_everything, write_log
from graphopt.viz.curves import metric_curves

__all__ = ["TrainConfig", "baselines", "evaluate", "load_run", "rank", "score_graph", "train"]


# ----------------------------------------------------------------------------------------
# Data: load, split, normalize (fitted on the training split only)
# ----------------------------------------------------------------------------------------

def _load_split(cfg: TrainConfig) -> tuple[list[CostGraph], list[CostGraph], str]:
    prune_hops = None if cfg.prune_hops < 0 else cfg.prune_hops
    root = Path(cfg.data)
    if not cfg.data:
        raise CostModelError("no training data given (TrainConfig.data)")
    split = cfg.split
    if split not in ("auto", "dirs", "configs", "graphs"):
        raise CostModelError(f"split {split!r} unknown; expected auto, dirs, configs or graphs")
    has_dirs = root.is_dir() and (root / "train").is_dir() and (root / "valid").is_dir()
    if split == "dirs" or (split == "auto" and has_dirs):
        if not has_dirs:
            raise CostModelError(f"{root}: split 'dirs' needs train/ and valid/ subfolders")
        return (load_dataset(root / "train", dedup=cfg.dedup, prune_hops=prune_hops),
                load_dataset(root / "valid", dedup=cfg.dedup, prune_hops=prune_hops), "dirs")
    graphs = load_dataset(root, dedup=cfg.dedup, prune_hops=prune_hops)
    if split == "auto":
        split = "graphs" if len(graphs) >= 4 else "configs"
    if split == "configs":
        return (*split_configs(graphs, cfg.test_fraction, cfg.seed), split)
    names = [s.strip() for s in cfg.test_graphs.split(",") if s.strip()] or None
    return (*split_graphs(graphs, cfg.test_fraction, cfg.seed, names), split)


def _resolve_model(cfg: TrainConfig, collection: str) -> str:
    name = cfg.model if cfg.model != "auto" else ("tile_sage" if collection == "tile" else "layout_gcn")
    if name not in MODELS:
        raise CostModelError(f"model {name!r} unknown; expected auto or one of {sorted(MODELS)}")
    if cfg.loss not in LOSSES:
        raise CostModelError(f"loss {cfg.loss!r} unknown; expected one of {sorted(LOSSES)}")
    return name


#: The range of each size in a run's ``config.json``: a file must not make building the
#: model allocate or hang (sizes as TrainConfig bounds them, features as data can have).
_SIZES = {"num_node_feat": (1, 4096), "config_dim": (1, 4096), "hidden": (0, 8192),
          "op_embed": (0, 8192), "layers": (0, 64)}


def _model_from(meta: dict) -> CostModel:
    return build_model(meta["model"], meta["num_node_feat"], meta["config_dim"],
                       hidden=meta["hidden"] or None, op_embed=meta["op_embed"] or None,
                       num_layers=meta["layers"] or None, dropout=meta["dropout"])


def _check_run(run: Path, meta: Any, ckpt: Any, tensors: dict) -> None:
    """Refuse, naming the file, a run whose ``config.json`` or ``checkpoint.json`` is not
    what the trainer writes, or whose weights do not fit the model its config builds
    (compared on the meta device, before anything is allocated)."""
    where = run / "config.json"
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where}: expected a JSON object")
    missing = sorted({"model", "dropout", "train_config", *_SIZES} - meta.keys())
    if missing:
        raise CheckpointError(f"{where}: missing {missing}")
    for key, (low, high) in _SIZES.items():
        v = meta[key]
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
            raise CheckpointError(f"{where}: {key}={v!r}, expected an integer in {low}..{high}")
    if meta["model"] not in MODELS:
        raise CheckpointError(f"{where}: model {meta['model']!r} unknown; expected one of {sorted(MODELS)}")
    if not isinstance(meta["dropout"], (int, float)) or not 0 <= meta["dropout"] < 1:
        raise CheckpointError(f"{where}: dropout={meta['dropout']!r}, expected a number in [0, 1)")
    state = ckpt.get("state") if isinstance(ckpt, dict) else None
    if not (isinstance(state, dict) and isinstance(state.get("epoch"), int)
            and isinstance(state.get("history"), list) and isinstance(state.get("gst_keys"), list)
            and all(isinstance(r, dict) for r in state["history"])
            and all(isinstance(k, str) for k in state["gst_keys"])):
        raise CheckpointError(f"{run / 'checkpoint.json'}: its state is not the trainer's (an integer "
                              "epoch, a list of history rows, a list of GST keys)")
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in _model_from(meta).state_dict().items()}
    weights = {k: tuple(v.shape) for k, v in _prefixed(tensors, "model.model.").items()}
    if shapes != weights:
        wrong = sorted(k for k in shapes.keys() | weights.keys() if shapes.get(k) != weights.get(k))
        raise CheckpointError(f"{run}: checkpoint weights do not match config.json ({len(wrong)} differ in "
                              f"name or shape, first {wrong[0]!r}: config {shapes.get(wrong[0])}, "
                              f"file {weights.get(wrong[0])})")


# ----------------------------------------------------------------------------------------
# Checkpoints: graphopt.runs.checkpoint's format
# ----------------------------------------------------------------------------------------

def _checkpoint_config(meta: dict) -> dict:
    """What a resumed run must share with the run it resumes: all but the epoch count and
    the options that only say how to run."""
    return {**meta, "train_config": {k: v for k, v in meta["train_config"].items()
                                     if k not in ("epochs", "resume", "progress", "eval_every")}}


def _prefixed(tensors: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def load_run(run_dir: str | os.PathLike) -> tuple[dict, CostModel, FeatureNormalizer, dict]:
    """``(config, model, normalizer, checkpoint)`` of a run directory; the model is in
    eval mode on the CPU, ``checkpoint`` the trainer state (``epoch``, ``history``,
    ``gst_keys``) with every stored tensor under ``tensors``.

    Raises
    ------
    CostModelError
        The directory has no ``config.json`` or no checkpoint yet.
    CheckpointError
        A checkpoint file is unreadable or does not match the config.
    """
    run = Path(run_dir)
    if not (run / "config.json").is_file():
        raise CostModelError(f"{run}: missing config.json; not a cost-model run")
    meta = read_json(run / "config.json", CheckpointError)
    found = read_checkpoint(run)
    if found is None:
        raise CostModelError(f"{run}: missing checkpoint.json; no epoch of this run finished")
    ckpt, tensors = found
    _check_run(run, meta, ckpt, tensors)
    model = _model_from(meta)
    try:
        model.load_state_dict(_prefixed(tensors, "model.model."))
    except RuntimeError as err:
        raise CheckpointError(f"{run}: checkpoint weights do not match config.json "
                              f"({str(err).splitlines()[0]})") from err
    norm = FeatureNormalizer.from_arrays({k: v.numpy()
                                          for k, v in _prefixed(tensors, "data.norm.").items()})
    return meta, model.eval(), norm, {**ckpt["state"], "tensors": tensors}


# ----------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------

@torch.no_grad()
def score_graph(model: CostModel, g: CostGraph, chunk: int = 256, device: str = "cpu") -> np.ndarray:
    """Predicted costs ``(c,)`` of every configuration of ``g`` (already normalized),
    ``chunk`` configurations at a time (a cross-configuration model compares the
    configurations of a chunk with each other)."""
    model.eval()
    t = graph_tensors(g, device)
    out = [model(t["op"], t["x"], t["edge_index"], t["cfg"][i:i + chunk], t["config_nodes"])
           for i in range(0, g.num_configs, chunk)]
    return torch.cat(out).double().cpu().numpy()


def _metrics(model: CostModel, graphs: list[CostGraph], chunk: int, device: str) -> dict:
    per = []
    for g in (g for g in graphs if g.num_configs >= 2):  # one configuration: nothing to rank
        m = ranking_metrics(score_graph(model, g, chunk, device), g.runtime)
        per.append({"graph": g.name, "configs": g.num_configs, **m})
    keys = [k for k in per[0] if k not in ("graph", "configs")] if per else []
    return {"graphs": per, "overall": {k: float(np.mean([p[k] for p in per])) for k in keys}}


# ----------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------

def train(cfg: TrainConfig) -> Path:
    """Train a cost model; returns the run directory (see the module docstring).

    Raises
    ------
    CostModelError
        Bad option values, an empty split, or ``resume`` pointing at no run.
    GraphFormatError
        Unreadable data files (named).
    CheckpointError
        ``resume`` pointing at a corrupt checkpoint.

    Examples
    --------
    >>> import tempfile
    >>> from graphopt.data import tpugraphs_dir
    >>> p = tpugraphs_dir() / "op_tuning_data.pb"  # doctest: +SKIP
    >>> run = train(TrainConfig(data=str(p), epochs=1, out=tempfile.mkdtemp(),
    ...                         progress=False))  # doctest: +SKIP
    """
    # --- arguments: a resumed run takes its stored config, with the new epoch count
    resume_ckpt = None
    if cfg.resume:
        stored, _, _, resume_ckpt = load_run(cfg.resume)
        cfg = dataclasses.replace(TrainConfig(**stored["train_config"]), epochs=cfg.epochs,
                                  resume=cfg.resume, progress=cfg.progress)
    check_fields(cfg, lambda key: "--" + key.replace("_", "-"), CostModelError)
    device = usable_device(cfg.device, CostModelError, "--device")
    # --- seeding
    seed_everything(cfg.seed, max(cfg.threads, 1))

    # --- data
    train_graphs, test_graphs, split = _load_split(cfg)
    if not train_graphs or not test_graphs:
        raise CostModelError(f"{cfg.data}: split {split!r} left {len(train_graphs)} training and "
                             f"{len(test_graphs)} test graphs; need at least one of each")
    collection = train_graphs[0].collection
    model_name = _resolve_model(cfg, collection)
    norm = FeatureNormalizer.from_arrays({k: v.numpy() for k, v in _prefixed(
        resume_ckpt["tensors"], "data.norm.").items()}) if resume_ckpt \
        else FeatureNormalizer.fit(train_graphs)
    train_graphs = [norm(g) for g in train_graphs]
    test_graphs = [norm(g) for g in test_graphs]
    train_graphs = [g for g in train_graphs if g.num_configs >= 2]  # nothing to rank otherwise
    if not train_graphs:
        raise CostModelError(f"{cfg.data}: no training graph has 2 or more configurations")

    # --- run directory and logged configuration
    if cfg.resume:
        run = Path(cfg.resume)
    else:
        stem = Path(cfg.data.rstrip("/")).name.replace(".", "_") or "data"
        run = Path(cfg.out) / (cfg.run_name or run_name(stem, model_name, seed=cfg.seed))
        run.mkdir(parents=True, exist_ok=cfg.run_name != "")
    meta = {"train_config": dataclasses.asdict(cfg), "model": model_name, "collection": collection,
            "split": split, "num_node_feat": int(train_graphs[0].node_feat.shape[1]),
            "config_dim": int(train_graphs[0].config_feat.shape[-1]), "hidden": cfg.hidden,
            "op_embed": cfg.op_embed, "layers": cfg.layers, "dropout": cfg.dropout,
            "train_graphs": [g.name for g in train_graphs], "test_graphs": [g.name for g in test_graphs]}
    text = json.dumps(meta, indent=1)
    atomic_write(run / "config.json", lambda f: f.write(text.encode()))

    # --- model and optimizer
    model = _model_from(meta).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    table = HistoryTable()
    tensors = {g.name: graph_tensors(g, device) for g in train_graphs}
    halo = cfg.halo if cfg.halo >= 0 else model.num_layers + 1
    segments = {g.name: partition(g.num_nodes, tensors[g.name]["edge_index"].cpu(), cfg.segment_size, halo)
                for g in train_graphs} if cfg.gst else {}
    segments = {k: [dataclasses.replace(s, nodes=s.nodes.to(device), own=s.own.to(device),
                                        edge_index=s.edge_index.to(device)) for s in v]
                for k, v in segments.items()}
    start_epoch, history = 0, []
    ckpt_config = _checkpoint_config(meta)
    if resume_ckpt:
        load_checkpoint(run, ckpt_config, {"model": model}, opt, None)
        table.load_arrays(resume_ckpt["gst_keys"], _prefixed(resume_ckpt["tensors"], "data.gst."))
        start_epoch, history = resume_ckpt["epoch"] + 1, resume_ckpt["history"]

    # --- the loop: one graph and a sample of its configurations per step
    from rich.progress import Progress

    steps = len(train_graphs)
    eval_every = cfg.eval_every or max(1, cfg.epochs // 10)
    with Progress(disable=not cfg.progress, transient=True) as bar:
        task = bar.add_task("training", total=(cfg.epochs - start_epoch) * steps)
        for epoch in range(start_epoch, cfg.epochs):
            rng = np.random.default_rng([cfg.seed, epoch])
            torch.manual_seed(cfg.seed * 1_000_003 + epoch)
            model.train()
            t0, losses = time.perf_counter(), []
            for gi in rng.permutation(steps):
                g = train_graphs[gi]
                t = tensors[g.name]
                idx = torch.as_tensor(sample_configs(g.runtime, cfg.configs_per_graph, rng, cfg.fast_bias),
                                      device=device)
                if cfg.gst:
                    scores = gst_scores(model, t, idx, segments[g.name], table, g.name,
                                        cfg.fresh_segments, cfg.sed_p, rng)
                else:
                    scores = model(t["op"], t["x"], t["edge_index"], t["cfg"][idx], t["config_nodes"])
                loss = ranking_loss(cfg.loss, scores, t["runtime"][idx].float(), cfg.mse_weight, cfg.margin)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                bar.advance(task)
            seconds = time.perf_counter() - t0
            evaluated = (epoch + 1) % eval_every == 0 or epoch == cfg.epochs - 1
            if evaluated:
                test = _metrics(model, test_graphs, cfg.eval_chunk, cfg.device)["overall"]
            else:  # left empty, not the last value: a curve must not show scores never measured
                test = dict.fromkeys(METRICS)
            row = {"epoch": epoch, "losses/train": float(np.mean(losses)),
                   **{f"charts/{k}": v for k, v in test.items()},
                   "charts/steps_per_s": steps / max(seconds, 1e-9), "charts/epoch_seconds": seconds}
            history.append(row)
            if cfg.progress and evaluated:
                bar.console.log(f"epoch {epoch}: loss {row['losses/train']:.4f}  test tau "
                                f"{test['kendall_tau']:.3f}  top5 err {test['top5_error']:.4f}")
            arrays = {f"norm.{k}": torch.from_numpy(np.ascontiguousarray(v))
                      for k, v in norm.arrays().items()}
            arrays |= {f"gst.{k}": v for k, v in table.arrays().items()}
            save_checkpoint(run, ckpt_config, {"model": model}, opt, None,
                            {"epoch": epoch, "history": history, "gst_keys": sorted(table.stats)},
                            arrays)
            write_log(history, run / "log.csv")
            if evaluated:  # drawing the PNG costs more than a step on one small graph
                metric_curves(history, run / "curve.png", "epoch",
                              [["losses/train"], ["charts/kendall_tau", "charts/tile_score"]],
                              title=run.name)
    return run


# ----------------------------------------------------------------------------------------
# Evaluation and ranking
# ----------------------------------------------------------------------------------------

def _load_eval(meta: dict, data: str | os.PathLike | None, dedup: bool = True) -> list[CostGraph]:
    """The graphs to score, unnormalized (the analytical baselines read raw features)."""
    cfg = TrainConfig(**meta["train_config"])
    if data is None:
        _, graphs, _ = _load_split(cfg)
    else:
        graphs = load_dataset(data, dedup=cfg.dedup and dedup,
                              prune_hops=None if cfg.prune_hops < 0 else cfg.prune_hops)
    if graphs and graphs[0].collection != meta["collection"]:
        raise CostModelError(f"{data}: {graphs[0].collection} graphs, but the model was trained on "
                             f"{meta['collection']} graphs")
    return graphs


#: Random rankings averaged per graph for the ``random`` baseline.
RANDOM_SEEDS = 20


def baselines(graphs: list[CostGraph], notes: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Overall metrics of the rankings a learned model must beat, on unnormalized
    ``graphs``: ``random`` (the mean of :data:`RANDOM_SEEDS` random rankings per graph)
    and ``analytical`` (:mod:`graphopt.costmodel.analytical`'s roofline proxy; left out
    when a graph has no IR graph, e.g. pruned, or config features of another width than
    TpuGraphs' (the proxy reads them by position): why is appended to ``notes``).

    Examples
    --------
    >>> sorted(baselines([]))
    ['random']
    """
    from graphopt.costmodel.analytical import (LAYOUT_CONFIG_WIDTH, TILE_CONFIG_WIDTH, layout_proxy,
                                               tile_proxy)

    graphs = [g for g in graphs if g.num_configs >= 2]
    rand = [{k: float(np.mean([r[k] for r in runs])) for k in METRICS}
            for runs in ([ranking_metrics(np.random.default_rng(s).permutation(g.num_configs), g.runtime)
                          for s in range(RANDOM_SEEDS)] for g in graphs)]
    out = {"random": {k: float(np.mean([r[k] for r in rand])) if rand else float("nan")
                      for k in METRICS}}
    if not graphs:
        return out
    tile = graphs[0].collection == "tile"
    width = TILE_CONFIG_WIDTH if tile else LAYOUT_CONFIG_WIDTH
    other = next((g for g in graphs if g.config_feat.shape[-1] != width), None)
    if any(g.graph is None for g in graphs):
        left_out = "a graph has no IR graph (pruned)"
    elif other is not None:
        left_out = (f"{other.source or other.name}: config features are "
                    f"{other.config_feat.shape[-1]} wide; the {other.collection} proxy reads "
                    f"TpuGraphs' {width}")
    else:
        proxy = tile_proxy if tile else layout_proxy
        per = [ranking_metrics(proxy(g), g.runtime) for g in graphs]
        out["analytical"] = {k: float(np.mean([p[k] for p in per])) for k in METRICS}
        return out
    if notes is not None:
        notes.append(f"baseline 'analytical' left out: {left_out}")
    return out


def evaluate(run_dir: str | os.PathLike, data: str | os.PathLike | None = None,
             chunk: int | None = None) -> dict:
    """Metrics of a trained run per graph and overall (their mean), beside the
    :func:`baselines` on the same graphs.

    Parameters
    ----------
    data : path, optional
        Graphs to score (any :func:`~graphopt.costmodel.data.load_dataset` source);
        default the run's own held-out split.
    chunk : int, optional
        Configurations scored at once (a cross-configuration model compares those of
        one chunk); default the run's ``eval_chunk``.

    Returns
    -------
    dict
        ``{"graphs": [{"graph", "configs", "kendall_tau", "top1_error", "top5_error",
        "top10_error", "tile_score", "pair_accuracy"}, ...], "overall": {...},
        "baselines": {"random": {...}, "analytical": {...}}}``, and ``"notes"`` (a list of
        lines) when a baseline was left out and why.

    Raises
    ------
    CostModelError
        ``chunk`` below 1, or data of another collection than the run's.
    """
    if chunk is not None and chunk < 1:
        raise CostModelError(f"chunk must be >= 1, got {chunk}")
    meta, model, norm, _ = load_run(run_dir)
    graphs = _load_eval(meta, data)
    res = _metrics(model, [norm(g) for g in graphs], chunk or meta["train_config"]["eval_chunk"], "cpu")
    notes: list[str] = []
    out = {**res, "baselines": baselines(graphs, notes)}
    return {**out, "notes": notes} if notes else out


def rank(run_dir: str | os.PathLike, path: str | os.PathLike, top: int = 5) -> list[dict]:
    """The ``top`` configurations of each graph in ``path`` a compiler should try first.

    Returns
    -------
    list of dict
        Per graph: ``graph``, ``configs`` (how many were scored) and ``top``: a list
        of ``{"config", "score", "runtime"}`` in the order to try, ``config`` indexing
        the file's configurations (not deduplicated; for a ``.pb`` its valid runs in
        order) and ``runtime`` the measured value (``None`` when it is 0, i.e. not
        measured).
    """
    if top < 1:
        raise CostModelError(f"top must be >= 1, got {top}")
    meta, model, norm, _ = load_run(run_dir)
    out = []
    for g in (norm(g) for g in _load_eval(meta, path, dedup=False)):
        s = score_graph(model, g, meta["train_config"]["eval_chunk"])
        order = np.argsort(s, kind="stable")[:top]
        out.append({"graph": g.name, "configs": g.num_configs,
                    "top": [{"config": int(i), "score": float(s[i]),
                             "runtime": float(g.runtime[i]) if g.runtime[i] > 0 else None}
                            for i in order]})
    return out
