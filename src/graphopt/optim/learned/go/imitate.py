"""GO's pre-training by imitation: the policy learns the placements long searches found.

For each training graph of a corpus, ``graphopt corpus search`` keeps a target plan
(:mod:`graphopt.optim.learned.targets`). :func:`imitate` trains the policy's trunk and
placement head to put each node (colocation group) on its target's device, by a
cross-entropy that does not care how devices are numbered: on a cluster of identical
devices, a plan with its devices renumbered is the same plan, so the target's labels
are first matched to the policy's (the permutation that makes the target most likely,
found by the Hungarian algorithm, as DETR matches boxes), then scored:

    loss(graph) = − Σ_u w_u · log p_u(π*(t_u)),  π* = argmax_π Σ_u w_u · log p_u(π(t_u))

where ``t_u`` is node u's target device (the device holding most of its compute), and
``w_u`` its share of the graph's compute plus a uniform floor (a node that computes
nothing barely matters to the step time, but it still needs a device). Graphs are
visited in a seeded random order per epoch, one Adam step each; a checkpoint after every
epoch resumes the run exactly.

A prior-aware policy (``priors``) learns from search in another way: from each train
graph's hand-written prior (the fastest heuristic's plan), every single move of a node
to another device is simulated once (the neighbourhood a local search walks), and the
policy learns to rank the moves by what they gain (:func:`move_cross_entropy`); ``go``
then applies its best-ranked moves in one pass. The result is saved as a policy (``policy.safetensors``
+ ``policy.json``), the form ``go``, ``go-finetune`` and ``graphopt train --init`` load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from graphopt.errors import UsageError
from graphopt.optim.learned.go.env import GOEnv
from graphopt.optim.learned.go.method import load_go_policy, new_policy, reads_prior
from graphopt.optim.learned.go.policy import GOPolicy
from graphopt.optim.learned.targets import Target, move_gains, prior_moves
from graphopt.runs.checkpoint import load_checkpoint, save_checkpoint, save_policy
from graphopt.sim import Plan

__all__ = ["fit", "imitate", "matched_cross_entropy", "move_cross_entropy", "unit_targets"]

PLACEMENT = frozenset({"placement"})


def unit_targets(env: GOEnv, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Each node's target device (the one holding most of its ops' compute in ``plan``)
    and its weight (its share of the compute, plus ``1 / N_units``, normalized).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import Problem
    >>> p = Problem(mlp_training_graph(), load_cluster("p100:2"))
    >>> env = GOEnv(p, PLACEMENT)
    >>> t, w = unit_targets(env, Plan(placement=np.ones(p.num_nodes, np.int64)))
    >>> bool((t == 1).all()), round(float(w.sum()), 6)
    (True, 1.0)
    """
    d, u = env.problem.num_devices, env.num_units
    op_time = env.problem.costs.time.mean(axis=1)
    share = np.zeros((u, d))
    np.add.at(share, (env.unit, np.asarray(plan.placement)), op_time + 1e-12)
    compute = share.sum(1)
    w = compute / max(compute.sum(), 1e-30) + 1.0 / u
    return share.argmax(1), w / w.sum()


def matched_cross_entropy(logits: torch.Tensor, target: np.ndarray, weight: np.ndarray,
                          num_devices: int) -> tuple[torch.Tensor, float]:
    """The weighted cross-entropy of ``target`` under ``logits`` (N, ≥ D) after the
    target's device labels are renumbered to the policy's most likely numbering; and the
    weighted share of nodes whose most likely device is their (renumbered) target.

    >>> z = torch.tensor([[0.0, 5.0], [5.0, 0.0]])  # the policy swaps the labels
    >>> loss, acc = matched_cross_entropy(z, np.array([0, 1]), np.array([0.5, 0.5]), 2)
    >>> round(float(loss), 3), acc
    (0.007, 1.0)
    """
    logp = torch.log_softmax(logits[:, :num_devices], dim=1)
    w = torch.as_tensor(weight, dtype=logp.dtype)
    with torch.no_grad():  # score[a, b]: how likely the nodes of target a are on device b
        score = torch.zeros(num_devices, num_devices, dtype=logp.dtype)
        score.index_add_(0, torch.as_tensor(target), logp * w[:, None])
    rows, cols = linear_sum_assignment(score.numpy(), maximize=True)
    perm = np.empty(num_devices, np.int64)
    perm[rows] = cols
    mapped = torch.as_tensor(perm[target])
    loss = -(w * logp[torch.arange(len(target)), mapped]).sum()
    acc = float((w * (logp.argmax(1) == mapped)).sum())
    return loss, acc


def move_cross_entropy(logits: torch.Tensor, gains: np.ndarray, home: np.ndarray,
                       num_devices: int) -> tuple[torch.Tensor, float]:
    """A listwise ranking loss (ListNet) of the moves off a start plan: the cross-entropy
    between the softmax of ``logits`` (N, ≥ D) over every move of a node to a device not
    its ``home`` and the distribution that gives each move its share of the total
    improvement, ``max(log gain, 0)`` (``gains``: :func:`~graphopt.optim.learned.targets.move_gains`);
    and the share of the 16 highest-scored moves that improve. A start plan that no move
    improves adds nothing.

    >>> z = torch.tensor([[0.0, 3.0], [0.0, -3.0]])  # ranks node 0's move first
    >>> gains = np.array([[1.0, 1.2], [1.0, 0.9]])   # which is the one that helps
    >>> loss, precision = move_cross_entropy(z, gains, np.array([0, 0]), 2)
    >>> round(float(loss), 4), precision
    (0.0025, 0.5)
    """
    away = np.ones(gains.shape, bool)
    away[np.arange(len(home)), home] = False
    scores = logits[:, :num_devices][torch.as_tensor(away)]  # every move, flattened
    improve = np.maximum(np.log(np.maximum(gains[away], 1e-30)), 0.0)
    top = torch.topk(scores.detach(), min(16, len(scores))).indices.numpy()
    precision = float((improve[top] > 0).mean())
    if improve.sum() <= 0:
        return scores.sum() * 0.0, precision
    target = torch.as_tensor(improve / improve.sum(), dtype=scores.dtype)
    return -(target * torch.log_softmax(scores, 0)).sum(), precision


def fit(policy: torch.nn.Module, samples: list[tuple], loss: Callable, out: str | Path,
        config: dict, *, epochs: int, lr: float, seed: int,
        progress: Callable[[dict], None] | None = None) -> dict:
    """The imitation loop GO's and MCM's imitation share: ``epochs`` passes over
    ``samples`` (``(policy inputs, target, weight, num_devices)`` each) in a seeded order
    per epoch, one Adam step on ``loss(logits, target, weight, num_devices)`` (a loss and
    an accuracy) per sample, a checkpoint into ``out`` after every epoch (``config``
    names the run; a rerun resumes it, and more ``epochs`` extend a finished one).
    Returns the trainer state: ``epoch`` and ``history`` (per epoch: ``loss``,
    ``accuracy``, ``seconds``)."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
    state = load_checkpoint(out, config, {"policy": policy}, optimizer, None,
                            fresh={"epoch": 0, "history": []}) or {"epoch": 0, "history": []}
    for epoch in range(state["epoch"], epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(samples))
        losses, accs, start = [], [], time.perf_counter()
        for i in order:
            inputs, target, weight, num_devices = samples[i]
            logits = policy(*inputs, tasks=("placement",))["placement"]
            value, acc = loss(logits, target, weight, num_devices)
            optimizer.zero_grad()
            value.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimizer.step()
            losses.append(value.item())
            accs.append(acc)
        row = {"epoch": epoch + 1, "loss": float(np.mean(losses)),
               "accuracy": float(np.mean(accs)), "seconds": round(time.perf_counter() - start, 2)}
        state = {"epoch": epoch + 1, "history": state["history"] + [row]}
        save_checkpoint(out, config, {"policy": policy}, optimizer, None, state)
        if progress:
            progress(row)
    return state


def imitate(targets: list[Target], out: str | Path, *, epochs: int = 20, lr: float = 1e-3,
            seed: int = 0, init: str | Path | None = None, command: str = "",
            priors: list[Plan] | None = None, corpus: str | Path | None = None,
            moves: list[np.ndarray] | None = None,
            progress: Callable[[dict], None] | None = None, **policy_config) -> dict:
    """Train a GO policy to reproduce ``targets``' placements (see the module docstring);
    checkpoint into ``out`` after every epoch (a rerun resumes), and save the policy there.

    Parameters
    ----------
    targets : list of Target
        From :func:`graphopt.optim.learned.targets.load_targets`.
    out : path
        Folder of the checkpoint, ``log.csv``-like history (in the policy's info) and policy.
    epochs, lr, seed
        Passes over the targets, Adam's learning rate, the seed of the initialization and
        of each epoch's order.
    init : path, optional
        Start from a saved policy's weights (``policy_config`` must then be empty).
    priors : list of Plan, optional
        A start plan per target (:func:`graphopt.optim.learned.targets.prior_plans`):
        the policy is then prior-aware (:class:`~graphopt.optim.learned.go.policy.PriorGOPolicy`)
        and learns to rank the single moves off each start plan by what they gain
        (:func:`move_cross_entropy`), rather than the target plans.
    corpus, moves
        With ``priors``: the gains of every move (:func:`~graphopt.optim.learned.targets.move_gains`
        per target), or the corpus folder they are kept in (computed there once).
    progress : callable, optional
        Called with each epoch's row: ``epoch``, ``loss``, ``accuracy``, ``seconds``.

    Returns
    -------
    dict
        ``history`` (one row per epoch), ``epochs``, ``seconds``.
    """
    if not targets:
        raise UsageError("imitate: no target plans")
    if init is not None and policy_config:
        raise UsageError(f"imitate: a policy from {init} has its own shape; got {sorted(policy_config)}")
    policy: GOPolicy = (new_policy(seed, prior=priors is not None, **policy_config)
                        if init is None else load_go_policy(str(init))[0])
    if (priors is not None) != reads_prior(policy):
        raise UsageError(f"imitate: the policy from {init} "
                         + ("does not read start plans, and priors were given"
                               if priors is not None else "reads a start plan; give priors"))
    too_many = [t.problem.cluster.name for t in targets
                if t.problem.num_devices > policy.config.max_devices]
    if too_many:
        raise UsageError(f"imitate: the policy places on at most {policy.config.max_devices} "
                         f"devices; cluster {too_many[0]} has more")
    if priors is None:
        envs = [GOEnv(t.problem, PLACEMENT, "groups", placement_flips=0.0) for t in targets]
        samples = [(e.inputs(), *unit_targets(e, t.plan), e.problem.num_devices)
                   for e, t in zip(envs, targets)]
    else:  # what every single move off the prior gains, ranked
        envs = [GOEnv(t.problem, PLACEMENT, "groups", p, prior_inputs=True)
                for t, p in zip(targets, priors)]
        if moves is None:
            moves = (prior_moves(corpus, targets, priors, [e.unit for e in envs])
                     if corpus is not None else
                     [move_gains(t.problem, p, e.unit) for t, p, e in zip(targets, priors, envs)])
        samples = [(e.inputs(), g, e.home.numpy(), e.problem.num_devices)
                   for e, g in zip(envs, moves) if e.home is not None]  # one device: no move
        if not samples:
            raise UsageError("imitate: no target on more than one device, so no move to rank")
    # epochs stays out: a finished run can be extended by asking for more
    config = {"method": "go-imitate", "lr": lr, "seed": seed, "policy": policy.config_dict(),
              **({"priors": True} if priors is not None else {}),
              "graphs": [t.key for t in targets]}
    t0 = time.perf_counter()
    state = fit(policy, samples, matched_cross_entropy if priors is None else move_cross_entropy,
                out, config, epochs=epochs, lr=lr, seed=seed, progress=progress)
    save_policy(out, policy, policy.config_dict(), {
        "command": command, "method": "go-imitate", "graphs": config["graphs"],
        "prior": "best" if priors is not None else None,
        "task": ["placement"], "epochs": epochs, "lr": lr, "seed": seed,
        "history": state["history"], **({"init": str(init)} if init is not None else {})})
    return {"history": state["history"], "epochs": state["epoch"],
            "seconds": time.perf_counter() - t0}
