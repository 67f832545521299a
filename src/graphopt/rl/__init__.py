"""Training pieces shared by the learned methods of :mod:`graphopt.optim.learned`: PPO,
GO's environment, group inputs, REINFORCE helpers, checkpoints (safetensors + JSON), and
seeding, run names and metric logs (:mod:`graphopt.rl.run`). The networks live in
:mod:`graphopt.nn`."""

from graphopt._lazy import lazy_exports

__all__ = ["CheckpointError", "EMABaseline", "GroupFeatures", "load_checkpoint", "load_policy",
           "new_run_state", "op_inputs", "read_checkpoint", "record_update", "restore_run",
           "run_name", "run_stats", "save_checkpoint", "save_policy", "save_run",
           "seed_everything", "sqrt_cost", "staircase_lr", "time_to_within", "write_log"]

# Names load from their module on first use: most of them import torch, which the
# command line, reading only :mod:`graphopt.rl.config`, should not pay.
__getattr__ = lazy_exports(__name__, {
    "graphopt.rl.checkpoint": ("CheckpointError", "load_checkpoint", "load_policy", "read_checkpoint",
                               "save_checkpoint", "save_policy"),
    "graphopt.rl.groups": ("GroupFeatures", "op_inputs"),
    "graphopt.rl.reinforce": ("EMABaseline", "new_run_state", "record_update", "restore_run",
                              "run_stats", "save_run", "sqrt_cost", "staircase_lr", "time_to_within"),
    "graphopt.rl.run": ("run_name", "seed_everything", "write_log"),
})
