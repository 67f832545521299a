"""Multi-chip partitioning by a learned policy whose proposals a constraint solver repairs
(Xie et al., "A Transferable Approach for Partitioning Machine Learning Models on
Multi-Chip-Modules", MLSys 2022).

=============  ==========================================================================
name           what it does
=============  ==========================================================================
mcm            zero-shot: the contiguous starts, the pre-trained policy's most likely
               proposal and the rest of ``samples`` drawn from it, each repaired by
               CP-SAT and priced; the best one
mcm-finetune   the contiguous starts, then the pre-trained policy trained further by PPO
               on this graph within the budget
mcm-one        the same with a fresh policy trained on this graph alone (from scratch)
=============  ==========================================================================

The policy is GO's network (:class:`graphopt.optim.learned.go.policy.GOPolicy`: GraphSAGE, segment-recurrent
attention with FiLM) with a chiplet head (:class:`graphopt.optim.learned.mcm.chiplet.ChipletPolicy`: a
logit per chip up to 16, plus a positional prior of learned width), on the units of
:func:`~graphopt.optim.partition.constraints.pipeline_units`. Every method starts from
the best heuristic, the best contiguous partition
(:func:`~graphopt.optim.partition.methods.best_contiguous`): its candidates are the
first evaluations, and the prior is centred on the best one (:func:`chain_span`,
``prior_width`` chips wide), so the policy proposes relative to it and mostly moves the
units near its boundaries (``from_greedy=False``: the prior centred on each unit's
compute position, as the policy was pre-trained). A sampled proposal is usually invalid;
CP-SAT repairs it into the nearest valid partition, each unit weighted by the policy's
probability of the chip it drew (:class:`~graphopt.optim.partition.repair.RepairModel`),
and the reward is the repaired partition's pipelined interval, ``−√(interval / bound)``
(PPO of :mod:`graphopt.rl.ppo`; the bound is the total compute over the chips). Each
method returns the best valid partition it evaluated, so never one below greedy. The package
ships a policy pre-trained on other graphs (``checkpoints/mcm``; BERT never appears),
trained by the command in its ``policy.json``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from graphopt.errors import BadFileError, BudgetExhausted, UsageError, MAX_THREADS
from graphopt.ir.ops import OP_VOCAB
from graphopt.optim.learned.mcm.chiplet import ChipletPolicy, ChipletPolicyConfig
from graphopt.optim.base import PIPELINE, TASKS, Budget, register
from graphopt.optim.partition.constraints import pipeline_units, valid_partitions
from graphopt.optim.partition.methods import (
    PartitionSearch,
    _check_task,
    balance_weights,
    best_contiguous,
    fraction,
)
from graphopt.optim.partition.repair import RepairModel
from graphopt.runs.checkpoint import load_policy
from graphopt.optim.learned.go.env import UNIT_FEATURES, GOEnv
from graphopt.rl.config import PPOConfig, ppo_field, run_hparams
from graphopt.rl.ppo import sample, train
from graphopt.runs.run import seed_everything
from graphopt.sim import Plan, Problem
from graphopt.sim.pipeline import pipeline_cost

__all__ = ["MCM", "MCMEnv", "MCMFinetune", "MCMOne", "MAX_CHIPS", "PRETRAIN_CORPUS",
           "SHIPPED", "chain_span", "load_mcm_policy"]

#: The pre-trained policy in the package.
SHIPPED = Path(__file__).parent.parent / "checkpoints" / "mcm"
#: Chips the chiplet head serves.
MAX_CHIPS = 16
#: Pre-training corpus, GRAPH@PRESET (graphs of :func:`graphopt.zoo.forward_graph`):
#: no BERT, which the benchmark holds out.
PRETRAIN_CORPUS = ("resnet-50@mcm-ring4", "transformer-xl-2@mcm-ring4", "rnnlm-2@mcm-ring8",
                   "inception-v3-b32@mcm-ring8", "transformer-xl-2@mcm-ring16",
                   "resnet-50@mcm-ring16")
#: PPO settings of pre-training and fine-tuning (GO's pre-training settings).
PRETRAIN_PPO = PPOConfig(lr=1e-3, ent_coef=0.01)


def chain_span(problem: Problem, unit: np.ndarray, chips: np.ndarray) -> torch.Tensor:
    """Where each unit starts and ends along the chain of chips in the partition ``chips``
    (a chip per unit, units in a topological order), in [0, 1]: chip ``c`` spans
    ``[c / D, (c + 1) / D]``, shared among its units by :func:`balance_weights`. The
    columns that centre :class:`ChipletPolicy`'s prior on that partition, (U, 2).

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 3), load_cluster("mcm-ring4"))
    >>> unit = pipeline_units(prob)
    >>> from graphopt.optim.partition.methods import greedy_contiguous
    >>> chips = greedy_contiguous(prob, unit)
    >>> span = chain_span(prob, unit, chips).numpy()
    >>> bool((np.floor(span.mean(1) * 4) == chips).all())
    True
    """
    chips = np.asarray(chips, dtype=np.int64)
    d = problem.num_devices
    w = np.maximum(balance_weights(problem, unit), 1e-12)
    total = np.bincount(chips, w, d)
    order = np.lexsort((np.arange(len(chips)), chips))  # by chip, then along the order
    before = np.cumsum(w[order]) - w[order]
    start = np.empty_like(w)
    start[order] = before - (np.cumsum(total) - total)[chips[order]]
    share = np.maximum(total[chips], 1e-30)
    span = np.stack([chips + start / share, chips + np.minimum(start + w, share) / share], 1) / d
    return torch.as_tensor(span, dtype=torch.float32)


@dataclass
class MCMEnv(GOEnv):
    """A graph on an MCM as the policy sees it: GO's features on the pipeline units,
    proposals repaired by CP-SAT and priced by the pipeline cost. With ``anchor`` (a chip
    per unit, the greedy partition), the inputs carry its :func:`chain_span`, where the
    policy's prior centres.

    Attributes
    ----------
    proposals, valid_before, valid_after : int
        Proposals priced so far, and how many were valid before and after repair.
    """

    repair_seconds: float = 0.5
    anchor: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.units = pipeline_units(self.problem)
        super().__post_init__()
        if self.anchor is not None:
            self.x = torch.cat([self.x, chain_span(self.problem, self.unit, self.anchor)], 1)
        self.repairer = RepairModel(self.problem, self.unit, time_limit=self.repair_seconds)
        t = self.problem.costs.time.max(axis=1)
        self.bound = float(max(t.sum() / self.problem.num_devices,
                               np.bincount(self.unit, t).max()))
        self.proposals = self.valid_before = self.valid_after = 0

    def rollout(self, ev, actions: dict[str, np.ndarray], logits: dict) -> tuple:
        """Repair the proposals of ``actions`` (each unit weighted by the probability of
        its chip under ``logits``), simulate the partitions through ``ev`` (which counts
        them) and price them: the batch's step time is the pipelined interval."""
        prop = actions["placement"]
        probs = torch.softmax(logits["placement"].detach(), dim=1).numpy()
        conf = probs[np.arange(prop.shape[1]), prop]
        rep = self.repairer.repair(prop, conf)
        place = rep.placement[:, self.unit]
        res = ev.evaluate(place, None, np.zeros(place.shape), problem=self.problem)
        k = len(res.step_time)
        ok = rep.valid[:k]
        self.proposals += k
        self.valid_before += int(valid_partitions(self.problem, prop[:k, self.unit]).sum())
        self.valid_after += int(ok.sum())
        interval = pipeline_cost(self.problem, place[:k]).interval
        res = dataclasses.replace(res, step_time=interval, valid=ok)
        return place[:k], None, None, res, self.bound


def new_policy(seed: int, **config) -> ChipletPolicy:
    """A freshly initialized chiplet policy (``config``: :class:`ChipletPolicyConfig`
    fields)."""
    torch.manual_seed(seed)
    position = (UNIT_FEATURES.index("cum_compute_start"), UNIT_FEATURES.index("cum_compute_end"))
    return ChipletPolicy(ChipletPolicyConfig(in_dim=len(UNIT_FEATURES), num_op_types=len(OP_VOCAB),
                                             position_columns=position, **config))


def _build(config: dict) -> ChipletPolicy:
    config = dict(config)
    config["position_columns"] = tuple(config.get("position_columns", (1, 2)))
    return ChipletPolicy(ChipletPolicyConfig(**config))


def load_mcm_policy(folder: str | Path | None = None) -> tuple[ChipletPolicy, dict]:
    """A saved MCM policy and its provenance; ``None`` loads the shipped one."""
    folder = folder or SHIPPED
    policy, info = load_policy(folder, _build)
    if policy.config.in_dim != len(UNIT_FEATURES):
        raise BadFileError(f"{folder}: policy reads {policy.config.in_dim} features, "
                           f"this graphopt makes {len(UNIT_FEATURES)}")
    return policy, info


def _check(problem: Problem, task: frozenset[str], policy: ChipletPolicy, name: str) -> None:
    _check_task(task, name)
    if problem.num_devices > policy.config.max_devices:
        raise UsageError(f"{name}: the policy's chiplet head serves at most "
                         f"{policy.config.max_devices} chips; {problem.cluster.name} has "
                         f"{problem.num_devices}")


def _greedy_field():
    return field(default=True, metadata={
        "help": "Start from the best contiguous partition (mcm-greedy's): priced first, and the "
                "chiplet prior centred on it (False: on each unit's compute position, as "
                "pre-trained)."})


def _width_field():
    return field(default=0.35, metadata={"gt": 0,
        "help": "Width (chips) of the prior around the greedy partition at the start "
                "(with from_greedy)."})


@register("mcm")
@dataclass
class MCM:
    """Zero-shot: proposals of the pre-trained policy, repaired and priced; no training.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4, seed=0), load_cluster("mcm-ring4"))
    >>> plan, stats = MCM(samples=4).optimize(prob, frozenset({"placement"}), Budget(8), seed=0)
    >>> stats["evals"], stats["valid_after_repair"]
    (4, 1.0)
    """

    #: the pipeline task too: :meth:`split`
    tasks = TASKS | {PIPELINE}
    #: one chunk a stage: not for the interleaved schedule
    chunked = False

    checkpoint: str | None = field(default=None, metadata={
        "help": "Folder of a saved MCM policy (None: the one shipped in the package)."})
    samples: int = field(default=16, metadata={"min": 1, "limit": 10_000,
        "help": "Proposals priced: the contiguous starts (with from_greedy), the policy's most "
                "likely one, and the rest drawn from the policy."})
    repair_seconds: float = field(default=0.5, metadata={"gt": 0,
        "help": "CP-SAT seconds per repair."})
    from_greedy: bool = _greedy_field()
    prior_width: float = _width_field()
    threads: int = field(default=1, metadata={"min": 1, "limit": MAX_THREADS, "help": "torch CPU threads."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        generator = seed_everything(seed, self.threads)
        policy, _ = load_mcm_policy(self.checkpoint)
        _check(problem, task, policy, self.name)
        s = PartitionSearch(problem, budget, self.repair_seconds)
        env = GOEnv(problem, frozenset({"placement"}), s.unit)
        x, *rest = env.inputs()
        k = self.samples if budget.evals is None else max(1, min(self.samples, budget.evals))
        t0 = time.perf_counter()
        try:
            if self.from_greedy:
                x = torch.cat([x, chain_span(problem, s.unit, best_contiguous(s, seed))], 1)
                policy.reset_width(self.prior_width)
                k -= s.ev.evals
            with torch.no_grad():
                logits = policy(x, *rest, tasks=("placement",))
            if k > 0:
                prop = sample(logits, k, generator)["placement"]
                prop[0] = logits["placement"].argmax(1).numpy()
                probs = torch.softmax(logits["placement"], dim=1).numpy()
                s.price(prop, probs[np.arange(s.num_units), prop], seed)
        except BudgetExhausted:
            pass
        return s.result(inference_seconds=time.perf_counter() - t0)

    def split(self, problem: Problem, costs, stages: int, microbatches: int, schedule: str,
              virtual: int = 1, overhead: float = 0.0, cores: int | None = None) -> tuple[int, ...]:
        """The pipeline task: the policy's split of the blocks into ``stages`` contiguous
        stages (:func:`graphopt.optim.learned.mcm.pipeline.mcm_split`)."""
        from graphopt.optim.learned.mcm.pipeline import mcm_split

        return mcm_split(problem, costs, stages, self.checkpoint)


@register("mcm-one")
@dataclass
class MCMOne:
    """A fresh policy trained by PPO on this graph alone, within the budget.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4, seed=0), load_cluster("mcm-ring4"))
    >>> plan, stats = MCMOne(dim=16, num_samples=4, progress=False).optimize(
    ...     prob, frozenset({"placement"}), Budget(8), seed=0)
    >>> stats["evals"], stats["updates"]
    (8, 2)
    """

    lr: float = ppo_field("lr", PRETRAIN_PPO)
    num_samples: int = ppo_field("num_samples")
    update_epochs: int = ppo_field("update_epochs")
    clip_coef: float = ppo_field("clip_coef")
    ent_coef: float = ppo_field("ent_coef", PRETRAIN_PPO)
    dim: int = field(default=ChipletPolicyConfig.dim, metadata={"min": 1, "max": 8192,
        "help": "Width of the fresh policy (mcm-one only; a loaded policy keeps its own)."})
    repair_seconds: float = field(default=0.5, metadata={"gt": 0,
        "help": "CP-SAT seconds per repair."})
    from_greedy: bool = _greedy_field()
    prior_width: float = _width_field()
    threads: int = field(default=1, metadata={"min": 1, "limit": MAX_THREADS, "help": "torch CPU threads."})
    checkpoint_dir: str | None = field(default=None, metadata={"output": "run",
        "help": "Folder to checkpoint the run in and resume it from."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def _policy(self, seed: int) -> ChipletPolicy:
        return new_policy(seed, dim=self.dim, max_devices=MAX_CHIPS)

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        if budget.evals is None and budget.seconds is None:
            raise UsageError(f"{self.name}: needs an evaluation or time budget")
        seed_everything(seed, self.threads)
        policy = self._policy(seed)
        _check(problem, task, policy, self.name)
        # the contiguous partitions are the first evaluations and the best one the policy's
        # anchor; PPO gets the rest of the budget
        t0 = time.perf_counter()
        s = PartitionSearch(problem, Budget(3 if budget.evals is None else min(budget.evals, 3),
                                            budget.seconds), self.repair_seconds)
        anchor = None
        if self.from_greedy:
            anchor = best_contiguous(s, seed)
            policy.reset_width(self.prior_width)
        env = MCMEnv(problem, frozenset({"placement"}), repair_seconds=self.repair_seconds,
                     anchor=anchor)
        cfg = PPOConfig(**{f.name: getattr(self, f.name) for f in fields(PPOConfig)
                           if hasattr(self, f.name)})
        spent = (s.ev.evals, time.perf_counter() - t0)
        out = train(policy, [env], cfg, seed=seed,
                    evals=None if budget.evals is None else budget.evals - spent[0],
                    seconds=None if budget.seconds is None else max(budget.seconds - spent[1], 0),
                    checkpoint_dir=self.checkpoint_dir, progress=self.progress,
                    run_config={"method": self.name, **run_hparams(self)},
                    label=f"{self.name} {problem.graph.name}")
        n = problem.num_nodes
        plan, interval = out["best"][0] or (Plan(placement=np.zeros(n, np.int64)), float("inf"))
        if s.best is not None and s.best_interval <= interval:  # PPO found nothing better
            plan, interval = Plan(placement=s.best), s.best_interval
        history = s.history + [[e + spent[0], t + spent[1],
                                min(b if b is not None else np.inf, s.best_interval)]
                               for e, t, b in out["history"]]
        found = np.isfinite(interval)
        proposals = env.proposals + s.proposals
        return plan.replace(fusion=np.zeros(n)), {
            "evals": out["evals"] + spent[0], "seconds": out["seconds"] + spent[1],
            "updates": out["updates"], "valid": bool(found),
            "interval": interval if found else None,
            "throughput": 1.0 / interval if found else None, "units": env.num_units,
            "valid_before_repair": fraction(env.valid_before + s.valid_before, proposals),
            "valid_after_repair": fraction(env.valid_after + s.valid_after, proposals),
            "history": history, "interrupted": out["interrupted"]}


@register("mcm-finetune")
@dataclass
class MCMFinetune(MCMOne):
    """The pre-trained policy trained further by PPO on this graph, within the budget.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4, seed=0), load_cluster("mcm-ring4"))
    >>> plan, stats = MCMFinetune(num_samples=4, progress=False).optimize(
    ...     prob, frozenset({"placement"}), Budget(8), seed=0)
    >>> stats["evals"]
    8
    """

    checkpoint: str | None = field(default=None, metadata={
        "help": "Folder of the pre-trained policy (None: the one shipped in the package)."})

    def _policy(self, seed: int) -> ChipletPolicy:
        return load_mcm_policy(self.checkpoint)[0]
