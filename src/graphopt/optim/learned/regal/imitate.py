"""REGAL learning from search: per-node Beta parameters fitted to long runs' elites, then
predicted from the graph (issue 35).

**Targets** (:func:`build_targets`, ``graphopt corpus regal-targets``): for each train graph
of a corpus, BRKGA on REGAL's chromosome with the layer-split prior
(:func:`~graphopt.optim.learned.regal.method.layer_split_prior`) runs :data:`LONG_EVALS`
evaluations (ten times the benchmark's 5,000); its last elite (the best 20 of 100
chromosomes) is renumbered so that its devices match the prior's (the cluster's devices
are identical, so a plan with its devices renumbered is the same plan, and one numbering
across graphs is what a network can learn) and normalized to what decoding reads (a
unit's affinities 0.75 / 0.25, the priorities as ranks: :func:`normalize_elite`), and
each gene's Beta(α, β) is fitted to the elite's values of it by the method of moments
(:func:`fit_beta`, concentration clipped).
One ``targets/<id>.npz`` per graph (the elite's mean and variance per gene, the fitted
α and β, the elite itself as float32) and an ``index.json``; resumable.

**Imitation** (:func:`imitate_regal`, ``graphopt train regal-imitate``): REGAL's head
(:class:`~graphopt.optim.learned.regal.head.REGALHead`, its features
:func:`~graphopt.optim.learned.regal.train.regal_inputs`) regresses, per node, the log of
the fitted α and β over the prior's (the method multiplies the head's α and β by the
prior's, so a head that predicts the targets hands BRKGA the fitted Betas): mean squared
error over the outputs the cluster reads (a unit's affinity targets go to each of its
nodes; the method takes the mean of its nodes' log-parameters). One Adam step per graph,
graphs in a seeded order per epoch, a checkpoint per epoch that resumes exactly; a share
of the families is held out for a validation loss, beside the loss of predicting zero
(the prior alone). The result is a policy folder that ``regal`` loads with ``-p
regal.checkpoint=OUT``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from graphopt._files import atomic_write, check_record, inside, npz_arrays, read_index, safe_name, write_json
from graphopt.evaluate.interrupt import stop_requested
from graphopt.errors import BadFileError, GraphoptError, InfeasibleError, UsageError
from graphopt.optim.base import Budget
from graphopt.optim.learned.regal.config import ImitateConfig
from graphopt.optim.learned.regal.head import REGALHead
from graphopt.optim.learned.regal.method import (RegalSpace, layer_split_devices,
                                                 layer_split_prior, regal_value)
from graphopt.optim.learned.regal.train import input_dim, regal_inputs
from graphopt.optim.search.brkga import BRKGA
from graphopt.runs.checkpoint import load_checkpoint, save_checkpoint, save_policy
from graphopt.runs.run import LOG_FILE, seed_everything, write_log
from graphopt.sim import Problem

__all__ = ["FORMAT", "KAPPA_MIN", "LONG_EVALS", "REFERENCE_EVALS", "TASK", "VERSION", "build_targets",
           "canonical_devices", "elite_moments", "elite_targets", "fit_beta", "imitate_regal",
           "load_targets", "node_targets", "normalize_elite", "target_order"]

FORMAT, VERSION = "graphopt-regal-targets", 1

#: Evaluations of each target's long run: ten times the benchmark's BRKGA-5K.
LONG_EVALS = 50_000

#: Evaluations of the reference run (layer-split BRKGA at the benchmark's budget) that a
#: target's ``gain_pct`` is measured against.
REFERENCE_EVALS = 5000

#: Smallest concentration α + β of a fitted Beta: a gene the elite spreads over [0, 1]
#: gets Beta(2m, 2(1 - m)) at most this wide, not a U shape.
KAPPA_MIN = 2.0

#: Means are clipped to [EPS, 1 - EPS] so that α and β stay positive.
EPS = 0.02

TASK = frozenset({"placement", "scheduling"})


def fit_beta(mean: np.ndarray, var: np.ndarray, kappa_max: float = 20.0,
             kappa_min: float = KAPPA_MIN) -> tuple[np.ndarray, np.ndarray]:
    """Beta(α, β) per gene by the method of moments: the mean ``m`` (clipped to [EPS,
    1 − EPS]) and the concentration ``κ = m(1 − m) / var − 1`` clipped to [``kappa_min``,
    ``kappa_max``] (a converged elite's variance is near zero), ``α = mκ``, ``β = (1 − m)κ``.

    >>> a, b = fit_beta(np.array([0.5, 0.9]), np.array([1 / 12, 0.0]), kappa_max=10)
    >>> np.round(a, 3).tolist(), np.round(b, 3).tolist()
    ([1.0, 9.0], [1.0, 1.0])
    """
    m = np.clip(np.asarray(mean, np.float64), EPS, 1 - EPS)
    v = np.maximum(np.asarray(var, np.float64), 1e-12)
    kappa = np.clip(m * (1 - m) / v - 1, kappa_min, kappa_max)
    return m * kappa, (1 - m) * kappa


def canonical_devices(space: RegalSpace, elite: np.ndarray) -> np.ndarray:
    """``elite`` (chromosomes x genes of REGAL's chromosome) with its devices renumbered
    so that the best chromosome's units agree most with the layer-split prior's devices
    (:func:`layer_split_devices`; the Hungarian algorithm on the units' agreement), every
    chromosome renumbered alike. Valid for a cluster of identical devices, where a
    renumbered plan is the same plan."""
    lay = space.layout
    if "placement" not in lay or not len(elite):
        return elite
    d, u = space.problem.num_devices, space.num_units
    aff = elite[:, lay["placement"]].reshape(len(elite), u, d)
    agree = np.zeros((d, d))
    np.add.at(agree, (aff[0].argmax(axis=1), layer_split_devices(space)), 1)
    rows, cols = linear_sum_assignment(agree, maximize=True)
    new = np.empty_like(aff)
    new[:, :, cols] = aff[:, :, rows]  # device rows[k] becomes cols[k]
    out = elite.copy()
    out[:, lay["placement"]] = new.reshape(len(elite), -1)
    return out


def normalize_elite(space: RegalSpace, elite: np.ndarray) -> np.ndarray:
    """``elite`` with every chromosome rewritten to the one of its plan that keeps only
    what decoding reads: a unit's affinities 0.75 for its device and 0.25 for the others
    (:meth:`RegalSpace.encode`), and the priorities as their ranks in the chromosome
    (0 to 1; the simulator reads their order only). The fitted Betas then say where the
    elite puts a unit and how early it runs a node, not how far a key happened to drift.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> space = RegalSpace(Problem(layered_graph(3, 2), load_cluster("p100:2")), TASK)
    >>> keys = np.random.default_rng(0).random((4, space.num_genes))
    >>> norm = normalize_elite(space, keys)
    >>> a, b = space.decode(keys), space.decode(norm)
    >>> bool((a.units == b.units).all()
    ...      and (np.argsort(a.priority, 1) == np.argsort(b.priority, 1)).all())
    True
    """
    out = space.encode(space.decode(elite)) if "placement" in space.layout else elite.copy()
    if "scheduling" in space.layout:
        s = space.layout["scheduling"]
        ranks = np.argsort(np.argsort(elite[:, s], axis=1, kind="stable"), axis=1)
        out[:, s] = ranks / max(ranks.shape[1] - 1, 1)
    return out


def elite_moments(space: RegalSpace, elite: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per gene the mean and variance over ``elite`` once normalized
    (:func:`normalize_elite`): what :func:`fit_beta` fits."""
    norm = normalize_elite(space, np.asarray(elite, np.float64))
    return norm.mean(axis=0), norm.var(axis=0)


def elite_targets(problem: Problem, evals: int = LONG_EVALS, seed: int = 0,
                  objective: str = "memory") -> tuple[dict[str, np.ndarray], dict]:
    """One graph's targets: the elite of layer-split BRKGA at ``evals`` evaluations,
    renumbered (:func:`canonical_devices`), its per-gene ``mean`` and ``var`` (of the
    normalized elite, :func:`elite_moments`), the fitted
    ``alpha`` and ``beta`` (:func:`fit_beta` at its default clip) and the ``elite``
    (float32); and the run's ``value``, ``evals`` and ``seconds``."""
    space = RegalSpace(problem, TASK)
    prior = layer_split_prior(space)
    brkga = BRKGA(inheritance=prior["inheritance"], mutant_alpha=prior["alpha"],
                  mutant_beta=prior["beta"])
    t0 = time.perf_counter()
    _, st = brkga.evolve(space, Budget(evals, objective=objective), seed, keep_elite=True)
    elite = canonical_devices(space, st["elite_keys"])
    if not len(elite):
        raise InfeasibleError(f"{problem.graph.name}: no elite after {evals} evaluations")
    mean, var = elite_moments(space, elite)
    alpha, beta = fit_beta(mean, var)
    arrays = {"mean": mean, "var": var, "alpha": alpha, "beta": beta,
              "elite": elite.astype(np.float32)}
    return arrays, {"value": st["value"], "evals": st["evals"],
                    "seconds": round(time.perf_counter() - t0, 3)}


def target_order(manifest: dict) -> list[str]:
    """The corpus's built train items in the order :func:`build_targets` takes them:
    round robin over the families (each family's items by id), so that a build cut short
    covers every family."""
    fams: dict[str, list[str]] = {}
    for k, v in sorted(manifest["items"].items()):
        if v.get("split") == "train" and v.get("status") == "built":
            fams.setdefault(v["family"], []).append(k)
    out, depth = [], 0
    while any(depth < len(v) for v in fams.values()):
        out += [v[depth] for _, v in sorted(fams.items()) if depth < len(v)]
        depth += 1
    return out


def _index(folder: Path, corpus: Path, settings: dict) -> dict:
    path = folder / "index.json"
    if not path.exists():
        return {"format": FORMAT, "version": VERSION, "corpus": str(corpus), **settings,
                "items": {}, "builds": []}
    doc = read_index(path, FORMAT, VERSION, "items", f"REGAL targets of format {FORMAT}")
    check_record(doc, str(path), {"corpus": "str", "cluster": "str", "builds?": "list"})
    for k, item in doc["items"].items():  # as build_targets writes them: one line, not a traceback
        where = f"{path}: items[{safe_name(k, f'{path}: items')!r}]"
        check_record(item, where, {"family": "str", "nodes": "count", "graph": "str",
                                   "file": "str", "source?": "str?", "evals?": "count",
                                   "gain_pct?": "real", "value": "real",
                                   "reference?": "real"})
        inside(folder, item["file"], f"{where}: field 'file'")
        inside(doc["corpus"], item["graph"], f"{where}: field 'graph'")
    differ = [k for k, v in settings.items() if doc.get(k) != v]
    if differ:
        raise BadFileError(f"{path}: targets made with other {', '.join(differ)} "
                           f"({', '.join(f'{k}={doc.get(k)!r}' for k in differ)}); use a new folder")
    return doc


def _save_index(folder: Path, doc: dict) -> None:
    write_json(folder / "index.json", doc)


def build_targets(corpus: str | Path, out: str | Path, *, evals: int = LONG_EVALS,
                  seed: int = 0, cluster: str = "p100:2", objective: str = "memory",
                  limit: int | None = None, max_seconds: float | None = None,
                  on_item: Callable[[str, dict], None] | None = None, argv: str = "") -> dict:
    """Targets for the corpus's train graphs (:func:`target_order`, at most ``limit``) into
    ``out``, resuming what is there; stops after ``max_seconds`` at a graph's end or on
    Ctrl-C. Returns the index (``items``: per graph its family, nodes, file, value,
    evals and seconds, and ``reference`` and ``gain_pct``: layer-split BRKGA's value at
    :data:`REFERENCE_EVALS` evaluations and how far the long run is below it, filled in
    for targets made before it was kept; ``builds``: per call its argv, graphs made and
    seconds).

    Raises
    ------
    GraphoptError
        ``corpus`` is no corpus, or ``out`` holds targets made with other settings.
    """
    from graphopt.corpus import load_manifest
    from graphopt.hardware import load_cluster
    from graphopt.ir import load_graph

    corpus, out = Path(corpus), Path(out)
    manifest = load_manifest(corpus)
    settings = {"evals": evals, "seed": seed, "cluster": cluster, "objective": objective,
                "prior": "layer-split"}
    doc = _index(out, corpus, settings)
    c = load_cluster(cluster)
    todo = [k for k in target_order(manifest)[:limit]
            if k not in doc["items"] or "reference" not in doc["items"][k]]
    t0, made = time.perf_counter(), 0
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for k in todo:
        if stop_requested() or (max_seconds is not None and time.perf_counter() - t0 >= max_seconds):
            break
        item = manifest["items"][k]
        problem = Problem(load_graph(corpus / item["file"]), c)
        if k not in doc["items"]:
            arrays, info = elite_targets(problem, evals, seed, objective)
            if stop_requested():  # its search was cut short: not a target
                break
            rel = f"targets/{k}.npz"
            (out / "targets").mkdir(parents=True, exist_ok=True)
            atomic_write(out / rel, lambda f, a=arrays: np.savez_compressed(f, **a))
            doc["items"][k] = {"family": item["family"], "nodes": problem.num_nodes,
                               "source": item.get("source"), "graph": item["file"],
                               "file": rel, **info}
            made += 1
        # what the long run gained over the prior at the benchmark's budget: a graph whose
        # peak no plan can move (weights-bound) gains nothing, and its elite teaches nothing
        space = RegalSpace(problem, TASK)
        ref = regal_value(problem, layer_split_prior(space), seed, REFERENCE_EVALS, objective, TASK)
        if stop_requested():
            break
        entry = doc["items"][k]
        entry["reference"] = ref
        entry["gain_pct"] = round(100 * (ref - entry["value"]) / ref, 4) if ref else 0.0
        _save_index(out, doc)
        if on_item:
            on_item(k, doc["items"][k])
    doc["builds"].append({"argv": argv, "made": made, "started": started,
                          "seconds": round(time.perf_counter() - t0, 1)})
    out.mkdir(parents=True, exist_ok=True)
    _save_index(out, doc)
    return doc


def load_targets(folder: str | Path) -> tuple[dict, list[tuple[str, Problem, dict[str, np.ndarray]]]]:
    """The index of the targets in ``folder`` and per graph its id, problem and arrays
    (``mean``, ``var``, ``alpha``, ``beta``, ``elite``).

    Raises
    ------
    GraphoptError
        No targets there, a file missing or not an npz of arrays, or one whose genes do
        not fit its graph's chromosome.
    """
    from graphopt.hardware import load_cluster
    from graphopt.ir import load_graph

    folder = Path(folder)
    if not (folder / "index.json").is_file():
        raise BadFileError(f"{folder}: no REGAL targets (no index.json); make them with "
                           "'graphopt corpus regal-targets CORPUS --out DIR'")
    doc = _index(folder, Path(), {})
    corpus, c = Path(doc["corpus"]), load_cluster(doc["cluster"])
    out = []
    for k, item in sorted(doc["items"].items()):
        path = folder / item["file"]
        npz_arrays(path, GraphoptError)  # refuses pickles and bombs before loading
        with np.load(path, allow_pickle=False) as z:
            arrays = {name: z[name] for name in ("mean", "var", "alpha", "beta", "elite")}
        problem = Problem(load_graph(corpus / item["graph"]), c)
        genes = RegalSpace(problem, TASK).num_genes
        if arrays["mean"].shape != (genes,):
            raise BadFileError(f"{path}: {arrays['mean'].shape} genes; its graph's chromosome "
                               f"has {genes}")
        out.append((k, problem, arrays))
    return doc, out


def node_targets(problem: Problem, arrays: dict[str, np.ndarray], kappa_max: float,
                 max_devices: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per node, the head's outputs that hand BRKGA the fitted Betas (:func:`fit_beta` of
    the normalized elite's moments, :func:`elite_moments`, at ``kappa_max``) once
    multiplied by the layer-split prior's: ``log(α_fit / α_prior)`` and
    ``log(β_fit / β_prior)`` of its unit's D affinities and of its priority; and the
    boolean mask of the head's outputs they are for (N, width)."""
    space = RegalSpace(problem, TASK)
    prior = layer_split_prior(space)
    alpha, beta = fit_beta(*elite_moments(space, arrays["elite"]), kappa_max)
    la, lb = np.log(alpha / prior["alpha"]), np.log(beta / prior["beta"])
    d, n, u = problem.num_devices, problem.num_nodes, space.num_units
    lay = space.layout
    width = 2 * max_devices + 3
    t = np.zeros((n, width))
    unit = space.unit_of
    t[:, :d] = la[lay["placement"]].reshape(u, d)[unit]
    t[:, max_devices:max_devices + d] = lb[lay["placement"]].reshape(u, d)[unit]
    t[:, 2 * max_devices] = la[lay["scheduling"]]
    t[:, 2 * max_devices + 1] = lb[lay["scheduling"]]
    mask = np.zeros(width, bool)
    mask[:d] = mask[max_devices:max_devices + d] = True
    mask[2 * max_devices:2 * max_devices + 2] = True
    return torch.as_tensor(t, dtype=torch.float32), torch.as_tensor(mask)


def _val_families(families: list[str], share: float) -> set[str]:
    """The ``share`` of ``families`` (at least one when share > 0 and there are two or
    more) held out for validation: those whose name hashes lowest (stable across runs)."""
    if share <= 0 or len(families) < 2:
        return set()
    k = max(1, min(len(families) - 1, round(share * len(families))))
    return set(sorted(families, key=lambda f: hashlib.sha256(f.encode()).hexdigest())[:k])


def imitate_regal(targets: str | Path, out: str | Path, config: ImitateConfig,
                  max_seconds: float | None = None,
                  on_epoch: Callable[[int, dict], None] | None = None,
                  command: str = "") -> dict:
    """Pre-train REGAL's head on the targets in ``targets`` (module docstring); checkpoint
    into ``out`` (resumed when there, or extended with more ``epochs``) and write the
    policy there. Returns the run state (``epoch``, ``log``: per epoch ``train_loss``,
    ``val_loss``, ``val_loss_prior`` (predicting zero: the prior alone),
    ``val_loss_constant`` (predicting the training targets' mean per output for every
    node), ``seconds``; ``val_families``).

    Raises
    ------
    GraphoptError
        No targets, or none left for training after the validation families.
    graphopt.errors.CheckpointError
        ``out`` holds a checkpoint of another run.
    """
    doc, items = load_targets(targets)
    if not items:
        raise BadFileError(f"{targets}: no targets in index.json")
    if config.min_gain > 0:
        missing = [k for k, _, _ in items if "gain_pct" not in doc["items"][k]]
        if missing:
            raise BadFileError(f"{targets}: {len(missing)} targets without gain_pct (made "
                               "before it was kept); run 'graphopt corpus regal-targets' on "
                               "the folder again to add it")
        items = [r for r in items if doc["items"][r[0]]["gain_pct"] >= config.min_gain]
        if not items:
            raise BadFileError(f"{targets}: no target gains {config.min_gain}% or more")
    fams = sorted({doc["items"][k]["family"] for k, _, _ in items})
    val = _val_families(fams, config.val_share)
    data = []
    for k, problem, arrays in items:
        x, ei = regal_inputs(problem)
        t, mask = node_targets(problem, arrays, config.kappa_max, config.max_devices)
        data.append((k, doc["items"][k]["family"] in val, x, ei, t, mask))
    train = [r for r in data if not r[1]]
    valid = [r for r in data if r[1]]
    if not train:
        raise UsageError(f"{targets}: every family held out for validation; lower --val-share")

    seed_everything(config.seed, threads=1)
    head = REGALHead(input_dim(), config.dim, config.layers, config.max_devices)
    opt = torch.optim.Adam(head.parameters(), lr=config.lr)
    # epochs left out: the same run goes on with more of them
    run_config = {**{k: v for k, v in asdict(config).items() if k != "epochs"},
                  "targets": sorted(k for k, *_ in data)}
    state: dict[str, Any] = {"epoch": 0, "seconds": 0.0, "log": [], "val_families": sorted(val)}
    state = load_checkpoint(out, run_config, {"head": head}, opt, None, fresh=state) or state

    def loss_of(row) -> torch.Tensor:
        _, _, x, ei, t, mask = row
        return ((head(x, ei)[:, mask] - t[:, mask]) ** 2).mean()

    def mean_loss(rows, const: torch.Tensor | None = None) -> float | None:
        """The head's loss on ``rows``, or that of predicting ``const`` on every node."""
        if not rows:
            return None
        with torch.no_grad():
            return float(np.mean([float(((r[4] - const)[:, r[5]] ** 2).mean())
                                  if const is not None else float(loss_of(r)) for r in rows]))

    t_call, t0 = time.perf_counter(), time.perf_counter() - state["seconds"]
    # the two baselines a learned gain must beat: zero (the prior alone) and the training
    # targets' mean per output (one constant for every node of every graph)
    prior_loss = mean_loss(valid, torch.zeros(()))
    const_loss = mean_loss(valid, torch.cat([r[4] for r in train]).mean(0))
    while state["epoch"] < config.epochs and not stop_requested() and (
            max_seconds is None or time.perf_counter() - t_call < max_seconds):
        e = state["epoch"]
        losses = []
        for j in np.random.default_rng([config.seed, e]).permutation(len(train)):
            loss = loss_of(train[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        state["epoch"] = e + 1
        state["seconds"] = time.perf_counter() - t0
        row = {"epoch": e + 1, "train_loss": float(np.mean(losses)),
               "val_loss": mean_loss(valid), "val_loss_prior": prior_loss,
               "val_loss_constant": const_loss, "seconds": round(state["seconds"], 2)}
        state["log"].append(row)
        save_checkpoint(out, run_config, {"head": head}, opt, None, state)
        write_log(state["log"], Path(out) / LOG_FILE)
        if on_epoch:
            on_epoch(e + 1, row)
    last = state["log"][-1] if state["log"] else {}
    save_policy(out, head, {"in_dim": head.in_dim, "dim": head.dim, "layers": head.layers,
                            "max_devices": head.max_devices},
                {"command": command, "objective": doc.get("objective", "memory"),
                 "imitation": {"targets": str(targets), "graphs": len(train),
                               "val_graphs": len(valid), "val_families": sorted(val),
                               "epochs": state["epoch"], "seconds": round(state["seconds"], 1),
                               "train_loss": last.get("train_loss"),
                               "val_loss": last.get("val_loss"), "val_loss_prior": prior_loss,
                               "val_loss_constant": const_loss,
                               "long_evals": doc.get("evals")},
                 # trained_prior reads config.prior: the head's Betas multiply this prior's
                 "config": {**asdict(config), "prior": "layer-split", "elite_bias": False}})
    return state
