"""Trainer hyperparameters, apart from the training code so that the command line can
list them (and make options of them) without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphopt.errors import MAX_SEED

__all__ = ["PPOConfig", "RegalConfig"]


@dataclass
class PPOConfig:
    """PPO's hyperparameters (CleanRL's names; defaults ours, from a sweep on the zoo's
    train split — docs/go.md)."""

    lr: float = field(default=3e-3, metadata={"gt": 0, "help": "Adam learning rate."})
    num_samples: int = field(default=16, metadata={"min": 1, "limit": 10_000,
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
    tune: str = field(default="all", metadata={"choices": ("all", "heads"),
        "help": "What the updates train: ``all`` the weights, or only the ``heads`` (each "
                "task's last attention layer and output): the trunk's embedding of a graph is "
                "then computed once, and an update costs a fraction of a full one."})


@dataclass
class RegalConfig:
    """REGAL's REINFORCE hyperparameters (:mod:`graphopt.rl.regal`; the defaults made the
    shipped policy)."""

    updates: int = field(default=1000, metadata={"min": 1, "help": "Policy updates (one graph each)."})
    samples: int = field(default=4, metadata={"min": 2, "limit": 10_000,
        "help": "Actions sampled per update; their mean reward is the baseline."})
    evals: int = field(default=5000, metadata={"min": 10,
        "help": "Simulator evaluations of each BRKGA run that prices an action (REGAL's test budget)."})
    elite_bias: bool = field(default=False, metadata={
        "help": "Also train the per-node elite bias (crossover offsets), for 'regal' with elite_bias."})
    prior: str = field(default="layer-split", metadata={"choices": ("layer-split", "uniform"),
        "help": "Distributions the policy's multiply: 'layer-split' (the model cut by layers, "
                "graphopt.optim.learned.regal.layer_split_prior) or 'uniform' (REGAL's own)."})
    lr: float = field(default=5e-4, metadata={"gt": 0, "help": "Adam learning rate."})
    sigma: float = field(default=0.25, metadata={"gt": 0,
        "help": "Standard deviation of the Gaussian the actions are drawn from around the policy's outputs."})
    dim: int = field(default=32, metadata={"min": 1, "max": 8192,
        "help": "Hidden width of the graph network."})
    layers: int = field(default=2, metadata={"min": 1, "max": 16, "help": "GraphSAGE layers."})
    max_devices: int = field(default=8, metadata={"min": 1, "max": 64, "help": "Device slots of the head."})
    max_grad_norm: float = field(default=1.0, metadata={"gt": 0, "help": "Gradient clipping norm."})
    save_every: int = field(default=10, metadata={"min": 1, "help": "Updates between checkpoints."})
    seed: int = field(default=0, metadata={"min": 0, "max": MAX_SEED, "help": "Seed of every random choice."})
