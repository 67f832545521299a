"""REGAL's training hyperparameters, apart from torch, so that the command line can list
them (and make options of them) without importing it."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphopt.errors import MAX_SEED

__all__ = ["ImitateConfig", "RegalConfig"]


@dataclass
class RegalConfig:
    """REGAL's REINFORCE hyperparameters (:mod:`graphopt.optim.learned.regal.train`; the defaults made the
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
                "graphopt.optim.learned.regal.method.layer_split_prior) or 'uniform' (REGAL's own)."})
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


@dataclass
class ImitateConfig:
    """Hyperparameters of REGAL's imitation pre-training
    (:func:`graphopt.optim.learned.regal.imitate.imitate_regal`)."""

    epochs: int = field(default=60, metadata={"min": 1, "max": 100_000,
        "help": "Passes over the targets (a run resumes, or goes on, with more)."})
    lr: float = field(default=1e-3, metadata={"gt": 0, "max": 1, "help": "Adam learning rate."})
    kappa_max: float = field(default=20.0, metadata={"gt": 1, "max": 1000,
        "help": "Largest concentration alpha + beta of a fitted Beta (a converged elite's gene "
                "would otherwise be a point)."})
    min_gain: float = field(default=0.0, metadata={"min": 0, "max": 100,
        "help": "Learn only from graphs whose long run is at least this many % below "
                "layer-split BRKGA at 5,000 evaluations (0: every graph)."})
    val_share: float = field(default=0.1, metadata={"min": 0, "max": 0.5,
        "help": "Share of the targets' families held out of training, for the validation loss."})
    dim: int = field(default=32, metadata={"min": 1, "max": 8192,
        "help": "Hidden width of the graph network."})
    layers: int = field(default=2, metadata={"min": 1, "max": 16, "help": "GraphSAGE layers."})
    max_devices: int = field(default=8, metadata={"min": 1, "max": 64,
        "help": "Device slots of the head."})
    seed: int = field(default=0, metadata={"min": 0, "max": MAX_SEED,
        "help": "Seed of the weights and of each epoch's order."})
