"""Training pieces several learned methods of :mod:`graphopt.optim.learned` share: PPO
(GO and MCM), REINFORCE (HDP and rl-lstm), group inputs, and the configurations the
command line reads without torch (:mod:`graphopt.rl.config`). Checkpoints, seeding and
run logs are one layer lower, in :mod:`graphopt.runs`; each method's network and
environment live with the method."""

from graphopt._lazy import lazy_exports

__all__ = ["EMABaseline", "GroupFeatures", "new_run_state", "op_inputs", "record_update",
           "restore_run", "run_stats", "save_run", "sqrt_cost", "staircase_lr", "time_to_within"]

# Names load from their module on first use: most of them import torch, which the
# command line, reading only :mod:`graphopt.rl.config`, should not pay.
__getattr__ = lazy_exports(__name__, {
    "graphopt.rl.groups": ("GroupFeatures", "op_inputs"),
    "graphopt.rl.reinforce": ("EMABaseline", "new_run_state", "record_update", "restore_run",
                              "run_stats", "save_run", "sqrt_cost", "staircase_lr", "time_to_within"),
})
