"""What every trainer's run folder holds, below both :mod:`graphopt.rl` and
:mod:`graphopt.costmodel`: checkpoints and saved policies (safetensors + JSON,
:mod:`graphopt.runs.checkpoint`), and seeding, run names and metric logs
(:mod:`graphopt.runs.run`)."""

from graphopt._lazy import lazy_exports

__all__ = ["CheckpointError", "load_checkpoint", "load_policy", "read_checkpoint", "run_name",
           "save_checkpoint", "save_policy", "seed_everything", "write_log"]

# torch loads with the first name used, not with the package.
__getattr__ = lazy_exports(__name__, {
    "graphopt.runs.checkpoint": ("CheckpointError", "load_checkpoint", "load_policy",
                                 "read_checkpoint", "save_checkpoint", "save_policy"),
    "graphopt.runs.run": ("run_name", "seed_everything", "write_log"),
})
