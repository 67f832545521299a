"""GO's pre-training: PPO (:mod:`graphopt.rl.ppo`) on a corpus of graphs, one update per
graph in turn, saved as the policy the ``go`` and ``go-finetune`` methods load
(``graphopt train``; the corpus and settings are
:data:`~graphopt.optim.learned.go.method.PRETRAIN_CORPUS` and ``PRETRAIN_PPO``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from graphopt.errors import UsageError
from graphopt.optim.learned.go.env import GOEnv
from graphopt.optim.learned.go.method import (PRETRAIN_PPO, _check, load_go_policy, new_policy,
                                              reads_prior)
from graphopt.rl.config import PPOConfig
from graphopt.rl.ppo import train
from graphopt.runs.checkpoint import save_policy
from graphopt.sim import Plan, Problem

__all__ = ["pretrain"]

def pretrain(problems: list[Problem], out: str | Path, *,
             task: frozenset[str] = frozenset({"placement"}),
             updates: int = 3000, seconds: float | None = None, seed: int = 0,
             ppo: PPOConfig | None = None, units: str = "groups", command: str = "",
             progress: bool = True, init: str | Path | None = None,
             priors: list[Plan] | None = None, **policy_config) -> dict:
    """Pre-train a policy on ``problems`` (one PPO update per problem in turn), checkpoint
    into ``out`` (resumable), and save the policy there as ``policy.safetensors`` +
    ``policy.json`` — the form :class:`GO` loads. With ``init`` (a saved policy's folder)
    training starts from its weights and shape instead of fresh ones (``policy_config``
    must then be empty). A prior-aware policy needs ``priors``, a start plan per problem
    (the heuristics' plan: :func:`graphopt.optim.learned.targets.prior_plans`); its plans
    then move nodes off them.
    """
    ppo = ppo or PRETRAIN_PPO
    if init is not None and policy_config:
        raise UsageError(f"pretrain: a policy from {init} has its own shape; got {sorted(policy_config)}")
    policy = (new_policy(seed, prior=priors is not None, **policy_config) if init is None
              else load_go_policy(init)[0])
    for p in problems:
        _check(p, task, policy, "pretrain")
    aware = reads_prior(policy)
    if aware and (priors is None or len(priors) != len(problems)):
        raise UsageError("pretrain: a prior-aware policy needs a start plan per graph")
    envs = [GOEnv(p, task, units, priors[i] if aware else None, prior_inputs=aware)
            for i, p in enumerate(problems)]
    result = train(policy, envs, ppo, seed=seed, updates=updates, seconds=seconds,
                   checkpoint_dir=str(out), progress=progress, label="pretrain",
                   run_config={"method": "go-pretrain", "units": units, "updates": updates})
    save_policy(out, policy, policy.config_dict(), {
        "command": command, "graphs": [f"{e.problem.graph.name}@{e.problem.cluster.name}"
                                       for e in envs],
        "task": sorted(task), "updates": result["updates"], "evals": result["total_evals"],
        "seed": seed, "ppo": asdict(ppo), "units": units, "prior": "best" if aware else None,
        **({"init": str(init)} if init is not None else {})})
    return result
