"""REGAL's trainer: REINFORCE on the distributions a graph network hands to BRKGA.

One update (Paliwal et al. 2020, §3): take the next graph of the corpus; the policy
(:class:`graphopt.optim.learned.regal.head.REGALHead`) reads it and gives per-node means ``mu`` of its outputs
(log Beta parameters, crossover offsets); ``samples`` actions ``z ~ N(mu, sigma²)`` are
drawn, each turned into BRKGA's per-gene distributions (:func:`gene_params`) and run
through BRKGA at a fixed budget; the reward of an action is the relative improvement of
its best plan over uniform BRKGA's at the same budget and seed
(``(uniform - value) / uniform``); the advantage is the reward minus the mean over the
update's samples (they share the seed, so the draw of the search is the same for all and
only the distributions differ). The loss is ``-mean(advantage * log N(z; mu, sigma))``
over the outputs the cluster uses. At test time REGAL takes ``mu`` itself.

The trainer sees the search only as a function ``search(problem, params, seed) -> value``
(``params`` None: uniform BRKGA), so that ``rl`` never imports the optimizers; the
method module (:mod:`graphopt.optim.learned.regal.method`) hands it in. Runs are resumable
from their checkpoint folder (weights, Adam state, the torch generator, counters and
the cache of uniform BRKGA's values), exactly: a resumed run makes the updates an
uninterrupted one would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from graphopt.evaluate.interrupt import stop_requested
from graphopt.ir import Graph
from graphopt.ir.features import layer_order, layer_share, node_features
from graphopt.optim.learned.regal.head import REGALHead
from graphopt.runs.checkpoint import load_checkpoint, save_checkpoint
from graphopt.optim.learned.regal.config import RegalConfig
from graphopt.runs.run import CURVE_FILE, LOG_FILE, seed_everything, write_log
from graphopt.sim import Problem

__all__ = ["RegalConfig", "gene_params", "regal_inputs", "rescale", "train_regal"]

#: A search as the trainer sees it: ``(problem, params or None, seed) -> best value``.
Search = Callable[[Problem, "dict[str, np.ndarray] | None", int], float]


def rescale(graph: Graph, factor: float) -> Graph:
    """``graph`` with every activation (outputs, edges, reads and writes, scratch, FLOPs)
    ``factor`` times as large and its weights unchanged: REGAL's augmentation of a training
    graph, as a batch ``factor`` times larger would be.

    >>> from graphopt.ir.generate import layered_graph
    >>> g = layered_graph(3, 2)
    >>> bool((rescale(g, 2.0).out_bytes == 2 * g.out_bytes).all())
    True
    """
    return graph.replace(name=f"{graph.name}-x{factor:g}",
                         **{k: getattr(graph, k) * factor for k in (
                             "out_bytes", "edge_bytes", "bytes_read", "bytes_written",
                             "temp_bytes", "flops")})


def regal_inputs(problem: Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """The policy's inputs for ``problem``: node features (N, F) and edges (2, E).

    Features are :func:`graphopt.ir.features.node_features` (logs scaled by 1/10) and, in
    the terms of the objective, every node's output, weight and scratch bytes against the
    smallest device's memory and against the graph's total, the share of all weight
    bytes before it in topological order (where the heap grows), and its place in the
    model's layer order (:func:`graphopt.ir.features.layer_order`) and in its bytes
    (:func:`graphopt.ir.features.layer_share`). The last two let a policy split a model by
    layers, each with its backward ops, where a split of the topological order puts the
    forward pass on one device and the backward pass on the other (docs/regal.md, "The
    prior").
    """
    g = problem.graph
    _, feats = node_features(g)
    cap = float(problem.capacity.min())
    total = max(float(g.out_bytes.sum() + g.persistent_bytes.sum()), 1.0)
    persist = np.cumsum(g.persistent_bytes) / max(float(g.persistent_bytes.sum()), 1.0)
    extra = [np.log1p(1e3 * a / cap) / 10 for a in (g.out_bytes, g.persistent_bytes, g.temp_bytes)]
    extra += [np.log1p(1e3 * a / total) / 10 for a in (g.out_bytes, g.persistent_bytes)]
    order = layer_order(g)
    place = order / max(g.num_nodes - 1, 1)
    x = np.concatenate([feats / 10, np.stack([*extra, persist, place, layer_share(g, order)],
                                             axis=1)], axis=1)
    edges = np.stack([g.src, g.dst]).astype(np.int64)
    return torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(edges)


def input_dim() -> int:
    """Width of :func:`regal_inputs`' features."""
    from graphopt.ir.features import FEATURE_NAMES

    return len(FEATURE_NAMES) + 8


def gene_params(head: REGALHead, out: torch.Tensor, unit_of: np.ndarray, num_units: int,
                devices: int, scheduling: bool, prior: float,
                elite_bias: bool = False,
                base: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Per-gene BRKGA parameters of REGAL's chromosome from the head's outputs ``out``.

    The chromosome is ``num_units * devices`` device affinities (unit-major: unit u's
    affinity for device d at ``u * devices + d``), then, when ``scheduling``, one priority
    per node. A unit (a colocation group, kept whole) takes the mean of its nodes'
    log-parameters and crossover offsets. Returns ``alpha``, ``beta`` and ``inheritance``
    (the probability a child takes the gene from its elite parent: ``prior``, or with
    ``elite_bias`` the policy's per-node ``sigmoid(logit(prior) + offset)``), each float64
    (genes,). With ``base`` (per-gene ``alpha`` and ``beta`` of a prior), the policy's
    parameters multiply the prior's: an untrained head gives the prior itself.
    """
    p = head.split(out.detach().double(), devices)
    unit = torch.as_tensor(unit_of)
    count = torch.bincount(unit, minlength=num_units).double().clamp(min=1)[:, None]

    def unit_mean(v: torch.Tensor) -> torch.Tensor:
        v = v if v.dim() == 2 else v[:, None]
        return torch.zeros(num_units, v.shape[1], dtype=v.dtype).index_add_(0, unit, v) / count

    dev_a = unit_mean(p["dev_alpha"].log()).exp().reshape(-1)
    dev_b = unit_mean(p["dev_beta"].log()).exp().reshape(-1)
    offset = p["cross"] if elite_bias else torch.zeros_like(p["cross"])
    logit = math.log(prior / (1 - prior))
    cross = torch.sigmoid(logit + unit_mean(offset)).expand(-1, devices).reshape(-1)
    parts = [(dev_a, dev_b, cross)]
    if scheduling:
        parts.append((p["prio_alpha"], p["prio_beta"], torch.sigmoid(logit + offset)))
    params = {k: torch.cat([part[i] for part in parts]).numpy()
              for i, k in enumerate(("alpha", "beta", "inheritance"))}
    if base is not None:
        params["alpha"] = params["alpha"] * base["alpha"]
        params["beta"] = params["beta"] * base["beta"]
    return params


def train_regal(corpus: Sequence[Problem], config: RegalConfig, search: Search,
                to_params: Callable[[REGALHead, torch.Tensor, Problem], dict],
                folder: str | Path, on_update: Callable[[int, dict], None] | None = None,
                info: dict | None = None, max_seconds: float | None = None
                ) -> tuple[REGALHead, dict]:
    """Train a REGAL policy on ``corpus``; checkpoint into ``folder`` and resume from it.

    Parameters
    ----------
    corpus : sequence of Problem
        Training problems, visited in turn (update ``u`` trains on ``corpus[u % len]``).
    config : RegalConfig
    search : callable
        ``search(problem, params, seed) -> best objective value`` of BRKGA at the fixed
        budget, ``params`` from ``to_params`` or None for uniform BRKGA.
    to_params : callable
        ``to_params(head, outputs, problem) -> params`` (:func:`gene_params` for the
        problem's chromosome).
    folder : path
        Checkpoint folder (``checkpoint.json``, ``weights.safetensors``) and the metric log
        ``log.csv``; a run with the same config and corpus resumes from it.
    on_update : callable, optional
        Called after each update with its number and log row (progress display).
    info : dict, optional
        Kept in the checkpoint's config: a run resumes only with the same.
    max_seconds : float, optional
        Stop after this many seconds of this call (the checkpoint resumes later).

    Returns
    -------
    (head, state)
        The trained policy and the run state (``update``, ``log``, ``seconds``).

    Raises
    ------
    graphopt.errors.CheckpointError
        ``folder`` holds a checkpoint of another run.
    """
    gen = seed_everything(config.seed, threads=1)
    head = REGALHead(input_dim(), config.dim, config.layers, config.max_devices)
    log_sigma = torch.nn.Parameter(torch.tensor(math.log(config.sigma)))
    opt = torch.optim.Adam([*head.parameters(), log_sigma], lr=config.lr)
    run_config = {**asdict(config), "corpus": [p.graph.name for p in corpus], **(info or {})}
    modules = {"head": head, "sigma": _Holder(log_sigma)}
    state = {"update": 0, "seconds": 0.0, "uniform": {}, "log": []}
    state = load_checkpoint(folder, run_config, modules, opt, gen, fresh=state) or state
    inputs: dict[int, tuple] = {}
    t0 = time.perf_counter() - state["seconds"]
    t_call = time.perf_counter()
    while state["update"] < config.updates and not stop_requested() and (
            max_seconds is None or time.perf_counter() - t_call < max_seconds):
        u = state["update"]
        i = u % len(corpus)
        prob = corpus[i]
        if i not in inputs:
            inputs[i] = regal_inputs(prob)
        seed = config.seed * 100_003 + u  # one search seed per update, shared by its samples
        key = f"{i}:{seed}"
        drawn, known = gen.get_state(), key in state["uniform"]
        if key not in state["uniform"]:
            state["uniform"][key] = search(prob, None, seed)
        ref = state["uniform"][key]
        mu = head(*inputs[i])
        mask = head.used(prob.num_devices, config.elite_bias)
        dist = torch.distributions.Normal(mu[:, mask], log_sigma.exp())
        with torch.no_grad():  # drawn with the run's generator, so that a resume is exact
            z = dist.loc + dist.scale * torch.randn((config.samples, *dist.loc.shape), generator=gen)
        values, logp = [], []
        for k in range(config.samples):
            full = mu.detach().clone()
            full[:, mask] = z[k]
            values.append(search(prob, to_params(head, full, prob), seed))
            logp.append(dist.log_prob(z[k]).mean())
        if stop_requested():  # Ctrl-C or SIGTERM: its searches may have been cut short
            gen.set_state(drawn)  # undone: a resume runs this update whole
            if not known:
                del state["uniform"][key]
            break
        reward = torch.tensor([(ref - v) / ref for v in values], dtype=torch.float64)
        adv = (reward - reward.mean()).float()
        loss = -(adv * torch.stack(logp)).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*head.parameters(), log_sigma], config.max_grad_norm)
        opt.step()
        state["update"] = u + 1
        state["seconds"] = time.perf_counter() - t0
        row = {"update": u + 1, "graph": prob.graph.name, "seconds": round(state["seconds"], 3),
               "charts/reward_mean": float(reward.mean()), "charts/reward_max": float(reward.max()),
               "charts/uniform_value": ref, "charts/best_value": float(min(values)),
               "losses/loss": loss.item(), "losses/sigma": log_sigma.exp().item()}
        state["log"].append(row)
        if on_update:
            on_update(u + 1, row)
        if (u + 1) % config.save_every == 0 or u + 1 == config.updates:
            _save(folder, run_config, modules, opt, gen, state)
    _save(folder, run_config, modules, opt, gen, state)
    return head, state


class _Holder(torch.nn.Module):
    """A bare parameter as a module, so that the checkpoint stores it by name."""

    def __init__(self, p: torch.nn.Parameter):
        super().__init__()
        self.p = p


def _save(folder, config, modules, opt, gen, state) -> None:
    """Checkpoint, metric log (``log.csv``) and learning curves (``curve.png``)."""
    from graphopt.viz.curves import metric_curves

    save_checkpoint(folder, config, modules, opt, gen, state)
    write_log(state["log"], Path(folder) / LOG_FILE)
    if state["log"]:
        rows = state["log"]
        smooth = [{"update": r["update"], "charts/reward_mean_of_last_20": float(np.mean(
            [q["charts/reward_mean"] for q in rows[max(0, j - 19):j + 1]]))}
            for j, r in enumerate(rows)]
        metric_curves([{**r, **m} for r, m in zip(rows, smooth)], Path(folder) / CURVE_FILE,
                      "update", [["charts/reward_mean", "charts/reward_mean_of_last_20"],
                                 ["losses/sigma"]], title="REGAL training (reward over uniform BRKGA)")
