"""Trainer hyperparameters, apart from the training code so that the command line can
list them (and make options of them) without importing torch."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

__all__ = ["PPOConfig", "RUN_FIELDS", "ppo_field", "run_hparams"]

#: A learned method's fields that say how it runs, not what it learns: a checkpoint's
#: config leaves them out, so a run resumes with other threads or without a progress bar.
RUN_FIELDS = ("threads", "checkpoint_every", "progress", "checkpoint_dir")


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
        "help": "Decay the learning rate linearly to 0 over the run's updates (or evals), "
                "as CleanRL does; by the clock only when seconds alone bound the run, so "
                "that a run stopped by --minutes and resumed matches one that never stopped."})
    tune: str = field(default="all", metadata={"choices": ("all", "heads"),
        "help": "What the updates train: ``all`` the weights, or only the ``heads`` (each "
                "task's last attention layer and output): the trunk's embedding of a graph is "
                "then computed once, and an update costs a fraction of a full one."})


def ppo_field(name: str, base: PPOConfig | None = None):
    """A method's field for PPO hyperparameter ``name``: its help is PPOConfig's, its
    default ``base``'s value (PPOConfig's default without one)."""
    spec = {f.name: f for f in fields(PPOConfig)}[name]
    return field(default=spec.default if base is None else getattr(base, name),
                 metadata=spec.metadata)


def run_hparams(method: object) -> dict:
    """The hyperparameters of learned method ``method`` (a dataclass) that its checkpoint's
    config records: every field but :data:`RUN_FIELDS`, in field order."""
    return {k: v for k, v in asdict(method).items() if k not in RUN_FIELDS}
