"""Reinforcement-learning pieces shared by the learned placers in
:mod:`graphopt.optim.learned`: the seq2seq placer, group inputs, REINFORCE helpers and
checkpoints (safetensors + JSON)."""

from graphopt.rl.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_policy,
    save_checkpoint,
    save_policy,
)
from graphopt.rl.groups import GroupFeatures, cap_groups, op_inputs
from graphopt.rl.reinforce import (
    EMABaseline,
    new_run_state,
    record_update,
    restore_run,
    run_stats,
    save_run,
    seed_everything,
    sqrt_cost,
    staircase_lr,
    time_to_within,
)
from graphopt.rl.seq2seq import AttentionLSTMPlacer

__all__ = ["AttentionLSTMPlacer", "CheckpointError", "EMABaseline", "GroupFeatures", "cap_groups",
           "load_checkpoint", "load_policy", "new_run_state", "op_inputs", "record_update",
           "restore_run", "run_stats", "save_checkpoint", "save_policy", "save_run",
           "seed_everything", "sqrt_cost", "staircase_lr", "time_to_within"]
