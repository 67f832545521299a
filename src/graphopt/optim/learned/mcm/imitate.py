"""MCM pre-training by imitation: the chiplet policy learns the partitions a long search
found on the corpus's training families (issue 35, "learning from search").

**Graphs.** An MCM serves a stream of single inputs, so the graphs are forward graphs at
batch 1 (as ``graphopt bench mcm`` partitions them), of the corpus's *training* families
(:data:`graphopt.corpus.items` split; BERT, GPT-2 and ResNet are held out): Hugging Face
text models at a transformer-base scale (:data:`DEFAULT_SOURCES`; the corpus's own
``hf:`` items are training steps two layers of 256 wide, far below what a module of
900 MB chips partitions) and the zoo's Transformer-XL, RNNLM and Inception-v3.

**Targets** (:func:`search_targets`): per graph and MCM preset, ``mcm-sa`` (annealing
from the best contiguous partition) at a budget, keeping its best partition; written
into a folder, one item at a time (atomic, resumable)::

    targets.json             {"format": "graphopt-mcm-targets", "version": 1,
                              "entries": {"<graph>@<preset>": {...}}}
    graphs/<graph>.npz       the forward graph

each entry: ``graph``, ``preset``, ``source``, ``chips`` (a chip per op), ``interval``,
``start_interval`` (the best contiguous partition's), ``method``, ``budget``,
``repair_seconds``, ``seed``, ``seconds``; or, where the graph has no valid partition
on the preset (a weight larger than a chip's SRAM), ``error`` (skipped by
:func:`load_targets`).

**Loss** (:func:`chain_cross_entropy`). A pipeline's chips are numbered by their place
along the chain: data flows only forward (``chip[src] <= chip[dst]``) and the chips used
are ``0..k``, so a partition has exactly one numbering and renumbering it (as GO's
matched loss allows on identical devices) makes it invalid. The target's chips are
therefore used as they are, and the loss adds to the cross-entropy of each unit's target
chip the expected distance along the chain to it, the quantity the repair minimizes
(``Σ w_u |chip_u − proposal_u|``): a unit proposed one chip off its target costs less
than one proposed three off::

    loss = Σ_u w_u · (− log p_u(t_u) + λ Σ_c p_u(c) |c − t_u|)

``w_u`` as GO's imitation weights units (compute share plus a uniform floor). The
policy starts at the prior alone (its head's output zeroed), keeps the prior's width,
and is trained with the prior centred on each unit's compute position (as ``train
mcm`` and ``from_greedy=false`` use it); the epoch loop is GO's
(:func:`graphopt.optim.learned.go.imitate.fit`). Measured on BERT-base (docs/mcm.md,
"Learning from search"): it does not beat the prior alone.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphopt._files import check_record, read_index, safe_name, write_json
from graphopt.errors import BadFileError, GraphoptError, UsageError
from graphopt.optim.learned.go.env import GOEnv
from graphopt.optim.learned.go.imitate import PLACEMENT, fit, unit_targets
from graphopt.optim.learned.mcm.method import MAX_CHIPS, _check, load_mcm_policy, new_policy
from graphopt.optim.partition.constraints import pipeline_units
from graphopt.runs.checkpoint import save_policy
from graphopt.sim import Plan, Problem

__all__ = ["DEFAULT_SOURCES", "FORMAT", "VERSION", "chain_cross_entropy", "forward_source",
           "imitate", "load_targets", "search_targets"]

FORMAT = "graphopt-mcm-targets"
VERSION = 1

#: Forward graphs of corpus training families: ``hf:`` text models at the widths and
#: depths of transformer-base models (batch 1, 128 tokens), and zoo graphs by
#: :func:`graphopt.zoo.forward_graph` name.
DEFAULT_SOURCES = tuple(
    f"hf:{t}:num_hidden_layers={n},hidden_size={d},num_attention_heads={d // 64},seq=128,batch=1"
    for t, n, d in (("roberta", 12, 768), ("electra", 8, 512), ("albert", 12, 768),
                    ("distilbert", 6, 768), ("mpnet", 12, 1024), ("convbert", 8, 768),
                    ("roformer", 6, 512), ("opt", 12, 768), ("bloom", 8, 1024),
                    ("gpt_neo", 6, 768), ("codegen", 8, 512), ("falcon", 12, 512))
) + ("transformer-xl-2", "rnnlm-2", "inception-v3-b32")


def _name(source: str) -> str:
    """A file-name-safe name of ``source``: ``roberta-l12-d768``, ``layered-60-s0``, or
    the zoo name."""
    if not source.startswith("hf:"):
        return source.rsplit(":", 1)[-1]
    t = source[3:].split(":", 1)[0]
    n = re.search(r"num_hidden_layers=(\d+)", source)
    d = re.search(r"hidden_size=(\d+)", source)
    return f"{t}-l{n.group(1) if n else 'x'}-d{d.group(1) if d else 'x'}"


def forward_source(source: str):
    """The forward graph (batch as the source says) of ``hf:TYPE:k=v,...``, of a
    :func:`graphopt.zoo.forward_graph` name, or the graph of an ``example:``
    source (:func:`graphopt.frontends.source.load_source`)."""
    from graphopt.zoo import forward_graph
    from graphopt.frontends.source import load_source
    from graphopt.frontends.torch import from_torch
    from graphopt.zoo.hf import make

    if source.startswith("example:"):
        return load_source(source)
    if not source.startswith("hf:"):
        return forward_graph(source)
    module, inputs, info = make(source[3:])
    graph = from_torch(module, inputs, training=False, name=_name(source))
    return graph.replace(meta={**graph.meta, "hf": info})


def _index(folder: Path) -> dict[str, Any]:
    path = folder / "targets.json"
    if not path.exists():
        return {"format": FORMAT, "version": VERSION, "entries": {}}
    doc = read_index(path, FORMAT, VERSION, "entries", "a graphopt MCM targets file")
    for key, e in doc["entries"].items():  # as search_targets writes them: one line, not a traceback
        where = f"{path}: entries[{key!r}]"
        check_record(e, where, {"graph": "str", "preset": "str", "source?": "str",
                                "budget": "count", "error?": "str", "seed?": "count",
                                "seconds?": "seconds", "repair_seconds?": "seconds",
                                "interval?": "time?", "start_interval?": "time?"})
        safe_name(e["graph"], f"{where}: field 'graph'")  # graphs/<graph>.npz stays in the folder
        if key != f"{e['graph']}@{e['preset']}":
            raise BadFileError(f"{where}: the key is not its graph@preset "
                               f"({e['graph']}@{e['preset']})")
        if "error" not in e:
            check_record(e, where, {"chips": "list", "interval": "time?"})
            if not all(type(c) is int and 0 <= c < 2**31 for c in e["chips"]):
                raise BadFileError(f"{where}: field 'chips': expected chip indices (whole "
                                   "numbers >= 0)")
    return doc


def _save(folder: Path, doc: dict[str, Any]) -> None:
    write_json(folder / "targets.json", doc)


def search_targets(sources: tuple[str, ...], presets: tuple[str, ...], folder: str | Path, *,
                   budget: int = 128, repair_seconds: float = 0.1, seed: int = 0,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``mcm-sa`` with ``budget`` evaluations on every source's forward graph on every
    preset and keep each best partition in ``folder`` (module docstring); an item already
    there at this budget is skipped, so an interrupted search resumes. Returns the index."""
    from graphopt.hardware import load_cluster
    from graphopt.ir.io import load_graph, save_graph
    from graphopt.optim.base import Budget, optimize

    folder = Path(folder)
    doc = _index(folder)
    for source in sources:
        name = _name(source)
        path = folder / "graphs" / f"{name}.npz"
        todo = [p for p in presets if doc["entries"].get(f"{name}@{p}", {}).get("budget") != budget]
        if not todo:
            continue
        if path.is_file():
            graph = load_graph(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            graph = forward_source(source)
            save_graph(graph, path)
        for preset in todo:
            problem = Problem(graph, load_cluster(preset))
            t0 = time.perf_counter()
            try:
                plan, stats = optimize(problem, "mcm-sa", "placement", Budget(evals=budget),
                                       seed, repair_seconds=repair_seconds)
            except GraphoptError as err:  # e.g. a weight larger than a chip's SRAM
                stats = {"interval": None, "error": str(err)}
            if stats["interval"] is None:  # recorded, so a rerun does not search it again
                doc["entries"][f"{name}@{preset}"] = {
                    "graph": name, "preset": preset, "source": source, "budget": budget,
                    "error": stats.get("error", "no valid partition found")}
                _save(folder, doc)
                if progress:
                    progress(f"{name}@{preset}: skipped: {doc['entries'][f'{name}@{preset}']['error']}")
                continue
            start = stats["history"][0][2] if stats.get("history") else None
            doc["entries"][f"{name}@{preset}"] = {
                "graph": name, "preset": preset, "source": source,
                "chips": np.asarray(plan.placement).tolist(), "interval": stats["interval"],
                "start_interval": start, "method": "mcm-sa", "budget": budget,
                "repair_seconds": repair_seconds, "seed": seed,
                "seconds": round(time.perf_counter() - t0, 2)}
            _save(folder, doc)
            if progress:
                progress(f"{name}@{preset}: {problem.num_nodes} ops, interval "
                         f"{stats['interval'] * 1e6:.2f} us (start {(start or 0) * 1e6:.2f}), "
                         f"{time.perf_counter() - t0:.0f} s")
    return doc


def load_targets(folder: str | Path) -> list[tuple[Problem, Plan, dict]]:
    """The targets of ``folder``: (problem, target plan, entry) per graph and preset."""
    from graphopt.hardware import load_cluster
    from graphopt.ir.io import load_graph

    folder = Path(folder)
    doc = _index(folder)
    if not any("error" not in e for e in doc["entries"].values()):
        raise BadFileError(f"{folder}: no MCM targets (run 'graphopt corpus mcm-targets' first)")
    graphs: dict[str, Any] = {}
    out = []
    for key in sorted(doc["entries"]):
        e = doc["entries"][key]
        if "error" in e:  # no valid partition on this preset: nothing to imitate
            continue
        if e["graph"] not in graphs:
            graphs[e["graph"]] = load_graph(folder / "graphs" / f"{e['graph']}.npz")
        problem = Problem(graphs[e["graph"]], load_cluster(e["preset"]))
        chips = np.asarray(e["chips"], np.int64)
        if chips.shape != (problem.num_nodes,):
            raise BadFileError(f"{folder / 'targets.json'}: entry {key}: {len(chips)} chips "
                               f"for {problem.num_nodes} ops")
        out.append((problem, Plan(placement=chips), e))
    return out


def chain_cross_entropy(logits: torch.Tensor, target: np.ndarray, weight: np.ndarray,
                        num_devices: int, distance: float = 1.0) -> tuple[torch.Tensor, float]:
    """The weighted cross-entropy of each unit's target chip plus ``distance`` times its
    expected distance along the chain to it (module docstring), under ``logits`` (U, ≥ D);
    and the weighted share of units whose most likely chip is their target.

    >>> z = torch.tensor([[5.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    >>> loss, acc = chain_cross_entropy(z, np.array([0, 2]), np.array([0.5, 0.5]), 3)
    >>> round(float(loss), 3), acc
    (0.033, 1.0)
    """
    logp = torch.log_softmax(logits[:, :num_devices], dim=1)
    t = torch.as_tensor(target)
    w = torch.as_tensor(weight, dtype=logp.dtype)
    far = (torch.arange(num_devices)[None, :] - t[:, None]).abs().to(logp.dtype)
    per_unit = -logp[torch.arange(len(t)), t] + distance * (logp.exp() * far).sum(1)
    acc = float((w * (logp.argmax(1) == t)).sum())
    return (w * per_unit).sum(), acc


def imitate(targets: list[tuple[Problem, Plan, dict]], out: str | Path, *, epochs: int = 30,
            lr: float = 1e-3, distance: float = 1.0, seed: int = 0,
            init: str | Path | None = None, command: str = "",
            progress: Callable[[dict], None] | None = None, **policy_config) -> dict:
    """Train a chiplet policy to propose ``targets``' partitions (:func:`load_targets`) by
    :func:`chain_cross_entropy`; checkpoint into ``out`` after every epoch (a rerun
    resumes; more ``epochs`` extend a finished run) and save the policy there, the form
    ``mcm`` and ``mcm-finetune`` load (``-p mcm-finetune.checkpoint=OUT``).

    ``init``: start from a saved MCM policy (``policy_config`` must then be empty).
    Returns ``history`` (per epoch: ``loss``, ``accuracy``, ``seconds``), ``epochs``,
    ``seconds``.
    """
    if not targets:
        raise UsageError("imitate: no target partitions")
    if init is not None and policy_config:
        raise UsageError(f"imitate: a policy from {init} has its own shape; got {sorted(policy_config)}")
    if init is None:
        # start at the prior alone (the head's output zero): it already puts most units on
        # their target's chip (85% of the compute of the default targets), and the head
        # learns only where to move them; from random logits it must first unlearn them
        policy = new_policy(seed, max_devices=MAX_CHIPS, **policy_config)
        policy.zero_head("placement")
    else:
        policy = load_mcm_policy(init)[0]
    # the prior's width stays as it is: it is the exploration scale fine-tuning starts
    # from, and a cross-entropy would narrow it until the head's few misses are certain
    policy.log_width.requires_grad_(False)
    samples = []
    for problem, plan, _ in targets:
        _check(problem, PLACEMENT, policy, "imitate")
        env = GOEnv(problem, PLACEMENT, pipeline_units(problem))
        samples.append((env.inputs(), *unit_targets(env, plan), problem.num_devices))
    config = {"method": "mcm-imitate", "lr": lr, "distance": distance, "seed": seed,
              "policy": policy.config_dict(),
              "graphs": [f"{e['graph']}@{e['preset']}" for _, _, e in targets]}

    def loss(logits, target, weight, num_devices):
        return chain_cross_entropy(logits, target, weight, num_devices, distance)

    t0 = time.perf_counter()
    state = fit(policy, samples, loss, out, config, epochs=epochs, lr=lr, seed=seed,
                progress=progress)
    save_policy(out, policy, policy.config_dict(), {
        "command": command, "method": "mcm-imitate", "graphs": config["graphs"],
        "epochs": state["epoch"], "lr": lr, "distance": distance, "seed": seed,
        "history": state["history"], **({"init": str(init)} if init is not None else {})})
    return {"history": state["history"], "epochs": state["epoch"],
            "seconds": time.perf_counter() - t0}
