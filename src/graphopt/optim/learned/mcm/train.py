"""MCM's pre-training: PPO (:mod:`graphopt.rl.ppo`) on repaired partitions' pipelined
throughput over a corpus of graphs, saved as the policy ``mcm`` and ``mcm-finetune`` load
(``graphopt train mcm``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from graphopt.errors import UsageError
from graphopt.optim.learned.mcm.method import (MAX_CHIPS, PRETRAIN_PPO, MCMEnv, _check,
                                              load_mcm_policy, new_policy)
from graphopt.rl.config import PPOConfig
from graphopt.rl.ppo import train
from graphopt.runs.checkpoint import save_policy
from graphopt.sim import Problem

__all__ = ["pretrain"]

def pretrain(problems: list[Problem], out: str | Path, *, updates: int = 300,
             seconds: float | None = None, seed: int = 0, ppo: PPOConfig | None = None,
             repair_seconds: float = 0.5, command: str = "", progress: bool = True,
             init: str | Path | None = None, **policy_config) -> dict:
    """Pre-train an MCM policy on ``problems`` (one PPO update per problem in turn),
    checkpoint into ``out`` (resumable), and save the policy there as
    ``policy.safetensors`` + ``policy.json``, the form :class:`MCM` loads. ``init``: start
    from a saved MCM policy (e.g. an imitation one) instead of a fresh one."""
    ppo = ppo or PRETRAIN_PPO
    if init is not None and policy_config:
        raise UsageError(f"pretrain: a policy from {init} has its own shape; got {sorted(policy_config)}")
    policy = new_policy(seed, max_devices=MAX_CHIPS, **policy_config) if init is None \
        else load_mcm_policy(init)[0]
    for p in problems:
        _check(p, frozenset({"placement"}), policy, "pretrain")
    envs = [MCMEnv(p, frozenset({"placement"}), repair_seconds=repair_seconds) for p in problems]
    result = train(policy, envs, ppo, seed=seed, updates=updates, seconds=seconds,
                   checkpoint_dir=str(out), progress=progress, label="mcm pretrain",
                   run_config={"method": "mcm-pretrain", "updates": updates,
                               "repair_seconds": repair_seconds})
    save_policy(out, policy, policy.config_dict(), {
        "command": command, "graphs": [f"{e.problem.graph.name}@{e.problem.cluster.name}"
                                       for e in envs],
        "updates": result["updates"], "evals": result["total_evals"], "seed": seed,
        "ppo": asdict(ppo), "repair_seconds": repair_seconds,
        **({"init": str(init)} if init is not None else {}),
        "valid_before_repair": sum(e.valid_before for e in envs) /
        max(sum(e.proposals for e in envs), 1)})
    return result
