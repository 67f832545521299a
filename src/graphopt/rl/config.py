"""Trainer hyperparameters, apart from the training code so that the command line can
list them (and make options of them) without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PPOConfig"]


@dataclass
class PPOConfig:
    """PPO's hyperparameters (CleanRL's names; defaults ours, from a sweep on the zoo's
    train split — docs/go.md)."""

    lr: float = field(default=3e-3, metadata={"gt": 0, "help": "Adam learning rate."})
    num_samples: int = field(default=16, metadata={"min": 1,
        "help": "Plans sampled and simulated per update (one batch, one graph)."})
    update_epochs: int = field(default=4, metadata={"min": 1, "help": "Gradient steps on each batch."})
    clip_coef: float = field(default=0.2, metadata={"gt": 0,
        "help": "PPO's clip on the per-node probability ratio."})
    ent_coef: float = field(default=0.01, metadata={"min": 0,
        "help": "Weight of the entropy bonus (mean per node, summed over tasks)."})
    max_grad_norm: float = field(default=0.5, metadata={"gt": 0, "help": "Global gradient-norm clip."})
    anneal_lr: bool = field(default=True, metadata={
        "help": "Decay the learning rate linearly to 0 over the run's first bound to be "
                "reached (evals, updates or seconds), as CleanRL does."})
    invalid_ratio: float = field(default=10.0, metadata={"min": 1,
        "help": "An invalid plan (out of memory) is rewarded as if its step time were this "
                "many lower bounds."})
