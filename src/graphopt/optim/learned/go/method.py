"""GO: the transferable graph optimizer (Zhou et al., NeurIPS 2020) — three ways to use it.

=============  ==========================================================================
name           what it does
=============  ==========================================================================
go             zero-shot: the pre-trained policy's most likely plan and ``samples − 1``
               plans drawn from it, simulated in one batch; the best one. No training.
go-finetune    every placement heuristic, then the pre-trained policy trained further
               by PPO on this graph, centred on the fastest heuristic's plan, within
               one budget
go-one         a fresh policy trained by PPO on this graph alone (GO-one in the paper)
=============  ==========================================================================

The policy (:class:`graphopt.optim.learned.go.policy.GOPolicy`) decides for every node at once — device,
scheduling priority, fusion priority, whichever the task asks for — on the graph's
colocation groups (:class:`graphopt.optim.learned.go.env.GOEnv`); the trainer is PPO
(:mod:`graphopt.rl.ppo`). :func:`pretrain` trains a policy on a corpus of graphs; the
package ships one (``checkpoints/go``), trained by the command in its ``policy.json``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from graphopt.errors import BadFileError, BudgetExhausted, UsageError, MAX_THREADS
from graphopt.evaluate.local import LocalEvaluator
from graphopt.ir.ops import OP_VOCAB
from graphopt.optim.learned.go.policy import GOPolicy, GOPolicyConfig, PriorGOPolicy, PriorGOPolicyConfig
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.search.portfolio import HEURISTICS, budget_left, run_heuristics
from graphopt.runs.checkpoint import load_policy
from graphopt.optim.learned.go.env import PRIOR_DEVICE_FEATURES, PRIOR_FEATURES, UNIT_FEATURES, GOEnv
from graphopt.rl.config import PPOConfig, ppo_field, run_hparams
from graphopt.rl.ppo import sample, train
from graphopt.rl.reinforce import time_to_within
from graphopt.runs.run import seed_everything
from graphopt.sim import Plan, Problem

__all__ = ["FINETUNE_PPO", "GO", "GOFinetune", "GOOne", "NAMED", "PRETRAIN_CORPUS", "PRETRAIN_PPO",
           "SHIPPED", "load_go_policy", "new_policy", "ranked_moves", "reads_prior"]

#: The pre-trained policy in the package.
SHIPPED = Path(__file__).parent.parent / "checkpoints" / "go"
#: Policies shipped beside it, by the name ``-p go.checkpoint=NAME`` takes: ``go-corpus``
#: learned from the corpus's search targets, ``go-prior`` (prior-aware) to rank the moves
#: off the heuristics' plan by what a search measured them to gain (docs/go.md,
#: "Learning from search").
NAMED = {"go": SHIPPED, "go-corpus": SHIPPED.parent / "go-corpus",
         "go-prior": SHIPPED.parent / "go-prior"}

#: Pre-training corpus of the shipped policy, GRAPH@CLUSTER: zoo models of the train
#: split (the held-out families, WaveNet and AmoebaNet, never appear) on device counts
#: around GO's, and random layered graphs. The largest train graphs (GNMT-4/8, RNNLM-8)
#: are left out to keep pre-training within half an hour on two CPU cores.
PRETRAIN_CORPUS = (
    "zoo:rnnlm-2@p100:2", "zoo:rnnlm-4@p100:4", "zoo:gnmt-2@p100:2",
    "zoo:transformer-xl-2@p100:2", "zoo:transformer-xl-4@p100:4", "zoo:transformer-xl-8@p100:8",
    "zoo:inception-v3-b32@p100:2", "zoo:bert-base@p100:4", "zoo:gpt2-small@p100:4",
    "zoo:resnet-50@p100:2", "zoo:bert-base@p100:8", "zoo:resnet-50@p100:4",
    "zoo:rnnlm-2@p100:4", "zoo:gnmt-2@p100:4",
    "example:layered-2000@p100:2", "example:layered-3000@p100:4", "example:layered-4000@p100:8",
)

#: PPO settings of pre-training: a lower learning rate and a larger entropy bonus than
#: go-one's, which collapsed every corpus graph onto one device (docs/go.md).
PRETRAIN_PPO = PPOConfig(lr=1e-3, ent_coef=0.01)

#: PPO settings of go-finetune: pre-training's, but only the task layers train, on the
#: trunk's embedding computed once, and 64 plans per update (4x fewer updates for the
#: budget). On RNNLM-2 at 2,000 evaluations: 11 s instead of 88 s, the same step time
#: (docs/go.md, bench/go_finetune_cost.py).
FINETUNE_PPO = PPOConfig(lr=PRETRAIN_PPO.lr, ent_coef=PRETRAIN_PPO.ent_coef, num_samples=64,
                         tune="heads")


def new_policy(seed: int, prior: bool = False, **config) -> GOPolicy:
    """A freshly initialized policy (``config``: :class:`GOPolicyConfig` fields); with
    ``prior``, a :class:`PriorGOPolicy` that reads a start plan."""
    torch.manual_seed(seed)
    if prior:
        config = {"prior_dim": len(PRIOR_FEATURES), "pair_in": len(PRIOR_DEVICE_FEATURES),
                  **config}
    return _build({"in_dim": len(UNIT_FEATURES), "num_op_types": len(OP_VOCAB), **config})


def _build(config: dict) -> GOPolicy:
    """The policy a saved config describes: prior-aware when it has a pair head."""
    if "pair_dim" in config or "prior_dim" in config:
        return PriorGOPolicy(PriorGOPolicyConfig(**config))
    return GOPolicy(GOPolicyConfig(**config))


def reads_prior(policy: GOPolicy) -> bool:
    """Whether ``policy`` improves on a start plan it reads (:class:`PriorGOPolicy`)."""
    return isinstance(policy, PriorGOPolicy)


def load_go_policy(folder: str | Path | None = None) -> tuple[GOPolicy, dict]:
    """A saved policy and its provenance: ``folder``, or a shipped policy by its name in
    :data:`NAMED`; ``None`` loads the shipped one."""
    if isinstance(folder, str) and folder in NAMED and not Path(folder).is_dir():
        folder = NAMED[folder]
    policy, info = load_policy(folder or SHIPPED, _build)
    c = policy.config
    widths = [(c.in_dim, len(UNIT_FEATURES))] + ([(c.prior_dim, len(PRIOR_FEATURES)), (
        c.pair_in, len(PRIOR_DEVICE_FEATURES))] if reads_prior(policy) else [])
    for reads, makes in widths:
        if reads != makes:
            raise BadFileError(f"{folder or SHIPPED}: policy reads {reads} features, "
                               f"this graphopt makes {makes}")
    return policy, info


def _check(problem: Problem, task: frozenset[str], policy: GOPolicy, name: str) -> None:
    if problem.num_devices > policy.config.max_devices:
        raise UsageError(f"{name}: the policy places on at most {policy.config.max_devices} "
                         f"devices; cluster {problem.cluster.name} has {problem.num_devices}")
    if not task:
        raise UsageError(f"{name}: empty task")


def _result(env: GOEnv, plan: Plan | None, step_time: float, init: Plan | None,
            stats: dict) -> tuple[Plan, dict]:
    if plan is None:  # nothing valid seen: the compiler default
        plan, step_time = Plan(), float("inf")
    # the policy's plans always place (on device 0 when the task leaves placement out)
    plan = compose(env.task | {"placement"}, init, plan)
    return plan, {"valid": np.isfinite(step_time),
                  "step_time": step_time if np.isfinite(step_time) else None,
                  "units": env.num_units, **stats}


def _start(env: GOEnv, budget: Budget) -> tuple[Plan, float]:
    """``env.init`` simulated (one of ``budget``'s evaluations; the tasks it leaves out
    at the compiler default): the plan GO-one returns when training finds nothing
    faster, as the searches never return worse than their start. Its step time is
    infinite when it does not fit."""
    init = env.init or Plan()
    n = env.problem.num_nodes
    place = np.zeros(n, np.int64) if init.placement is None else np.asarray(init.placement)
    ev = LocalEvaluator.from_budget(env.problem, Budget(evals=1, seconds=budget.seconds))
    res = ev.evaluate(place[None], None if init.priority is None else init.priority[None],
                      None if init.fusion is None else init.fusion[None])
    return (Plan(placement=place, priority=init.priority, fusion=init.fusion),
            float(res.step_time[0]) if res.valid[0] else float("inf"))


def _history(heuristics: list, start: tuple[Plan, float] | None, training: list, spent: int,
             t0: float, t_train: float) -> list[list]:
    """One ``(evals, seconds, best)`` history of a run: the heuristics', the start plan's,
    then training's, counted from the run's start, best never above the start's."""
    rows = [list(r) for r in heuristics]
    floor = min([float("inf")] + [r[2] for r in rows if r[2] is not None])
    if start is not None:
        floor = min(floor, start[1])
        rows.append([spent, t_train - t0, floor if np.isfinite(floor) else None])
    for e, s, b in training:
        b = min(floor, b if b is not None else float("inf"))
        rows.append([e + spent, s + t_train - t0, b if np.isfinite(b) else None])
    return rows


def _zero_shot(policy: GOPolicy, env: GOEnv, k: int, generator: torch.Generator
               ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``k`` plans of the policy without training (B = k rows of :meth:`GOEnv.plans`):
    its most likely plan and ``k - 1`` drawn from it; or, for a prior-aware policy with
    a start plan, the start with its ``j`` best-ranked moves applied, j = 1..k
    (:func:`ranked_moves`)."""
    with torch.no_grad():
        raw = policy(*env.inputs(), tasks=env.tasks)
    logits = env.with_prior(raw)
    greedy = sample(logits, k, generator, greedy=True)
    if reads_prior(policy) and env.home is not None:
        greedy["placement"] = ranked_moves(raw["placement"], env.home, k)
        return env.plans(greedy)
    actions = sample(logits, k, generator)
    for t, a in greedy.items():
        actions[t][0] = a[0]
    return env.plans(actions)


def ranked_moves(logits: torch.Tensor, home: torch.Tensor, k: int) -> np.ndarray:
    """Each node's device in ``k`` plans (k, N): ``home`` with the ``j`` highest-scored
    moves applied in plan j (j = 1..k), a node's move being to its highest-scored device
    other than home (``logits``: (N, ≥ D), −inf beyond the cluster); fewer plans when
    there are fewer than ``k`` nodes.

    >>> z = torch.tensor([[0.0, 2.0, 1.0], [0.0, 0.0, 5.0], [9.0, 0.0, 0.0]])
    >>> ranked_moves(z, torch.tensor([0, 0, 0]), 3).tolist()
    [[0, 2, 0], [1, 2, 0], [1, 2, 1]]
    """
    z = logits.detach().clone()
    n = len(home)
    z[torch.arange(n), home] = float("-inf")
    score, to = z.max(1)
    k = max(1, min(k, int(torch.isfinite(score).sum())))  # no plan twice: at most one per node
    order = torch.argsort(score, descending=True, stable=True)[:k]
    rows = home.numpy()[None].repeat(k, 0).astype(np.int64)
    for j, u in enumerate(order.tolist()):
        if np.isfinite(float(score[u])):
            rows[j:, u] = int(to[u])
    return rows


@register("go")
@dataclass
class GO:
    """Zero-shot GO: one forward pass of a pre-trained policy, no training on this graph.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4, seed=0), load_cluster("p100:2"))
    >>> plan, stats = GO(samples=4).optimize(prob, frozenset({"placement"}), Budget(8), seed=0)
    >>> stats["evals"], len(plan.placement) == prob.num_nodes
    (4, True)
    """

    objectives: ClassVar[tuple[str, ...]] = ("runtime",)  # the policy is trained on step time

    checkpoint: str | None = field(default=None, metadata={
        "help": "Folder of a saved policy, or the name of one shipped in the package: ``go`` "
                "(None: the default), ``go-corpus`` (learned from the corpus's search targets) "
                "or ``go-prior`` (runs the placement heuristics, then applies its best-ranked "
                "moves to their plan; learned from the gains of single moves)."})
    samples: int = field(default=16, metadata={"min": 1, "limit": 10_000,
        "help": "Plans simulated: the most likely one and ``samples − 1`` drawn from the policy."})
    units: str = field(default="groups", metadata={"choices": ("groups", "ops"),
        "help": "The policy's nodes: ``groups`` (colocation groups) or ``ops``."})
    heuristics: str = field(default=HEURISTICS, metadata={
        "help": "With a prior-aware policy (go-prior): the placement heuristics whose fastest "
                "plan it starts from, comma-separated. The slow ones take most of the time on "
                "a large graph; on GNMT-8 (53,694 ops) "
                "single,expert,round-robin,metis,m-topo takes a second where all take 50."})
    threads: int = field(default=1, metadata={"min": 1, "limit": MAX_THREADS, "help": "torch CPU threads."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        t0 = time.perf_counter()
        ev = LocalEvaluator.from_budget(problem, budget)
        generator = seed_everything(seed, self.threads)
        policy, _ = load_go_policy(self.checkpoint)
        _check(problem, task, policy, "go")
        prior = reads_prior(policy) and "placement" in task
        spent, start, heuristics_s = 0, (None, float("inf")), 0.0
        if prior:  # the plan it improves on: every placement heuristic's, the fastest
            init, hstats = run_heuristics(problem, task, budget, seed, init, self.heuristics)
            spent, start, heuristics_s = hstats["evals"], (init, hstats["step_time"]), hstats["seconds"]
            ev = LocalEvaluator.from_budget(problem, budget_left(budget, spent, t0))
        # a plain policy's own placements: no prior around --init (that is go-finetune's
        # start); a prior-aware one moves nodes off the heuristics' plan
        env = GOEnv(problem, task, self.units, init,
                    placement_flips=GOEnv.placement_flips if prior else 0.0,
                    prior_inputs=reads_prior(policy))
        k = self.samples if ev.remaining is None else max(1, min(self.samples, ev.remaining))
        place, prio, fuse = _zero_shot(policy, env, k, generator)
        # loading the policy, its features and the forward pass: not the heuristics
        infer_s = time.perf_counter() - t0 - heuristics_s
        greedy = None
        try:
            res = ev.evaluate(place, prio, fuse)
            greedy = float(res.step_time[0]) if res.valid[0] else None
        except BudgetExhausted:  # the time budget went on loading the policy and inference
            pass
        plan, step = ev.best_plan, ev.best_time
        if start[1] <= step:  # none of the policy's moves beat the heuristics' plan
            plan, step = start
        return _result(env, plan, step, init, {
            "evals": ev.evals + spent, "seconds": time.perf_counter() - t0,
            "inference_seconds": infer_s, "heuristics_seconds": heuristics_s,
            "greedy_step_time": greedy, "prior_step_time": start[1] if prior else None})


@register("go-one")
@dataclass
class GOOne:
    """GO-one: a fresh policy trained by PPO on this graph alone, within the budget.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4, seed=0), load_cluster("p100:2"))
    >>> plan, stats = GOOne(dim=16, progress=False).optimize(
    ...     prob, frozenset({"placement"}), Budget(32), seed=0)
    >>> stats["evals"], stats["updates"]
    (32, 2)
    """

    objectives: ClassVar[tuple[str, ...]] = ("runtime",)  # the policy is trained on step time

    lr: float = ppo_field("lr")
    num_samples: int = ppo_field("num_samples")
    update_epochs: int = ppo_field("update_epochs")
    clip_coef: float = ppo_field("clip_coef")
    ent_coef: float = ppo_field("ent_coef")
    dim: int = field(default=GOPolicyConfig.dim, metadata={"min": 1, "max": 8192,
        "help": "Width of the fresh policy (go-one only; a loaded policy keeps its own)."})
    units: str = field(default="groups", metadata={"choices": ("groups", "ops"),
        "help": "The policy's nodes: ``groups`` (colocation groups) or ``ops``."})
    fusion_flips: float = field(default=GOEnv.fusion_flips, metadata={"gt": 0,
        "help": "Nodes a plan moves off XLA's default fusion on average before training "
                "(the fusion head's prior: GOEnv.with_prior)."})
    placement_flips: float = field(default=GOEnv.placement_flips, metadata={"min": 0,
        "help": "With a start plan, nodes a plan moves off its placement on average before "
                "training (the placement head's prior: GOEnv.with_prior, with the head's "
                "output layer at zero; a prior-aware policy's pair head adds its own scores); "
                "0: no prior."})
    scheduling_flips: float = field(default=GOEnv.scheduling_flips, metadata={"min": 0,
        "help": "Nodes a plan gives a priority of their own on average before training (the "
                "scheduling head's prior, around one priority for all: GOEnv.with_prior); 0: "
                "no prior."})
    start: str = field(default="init", metadata={"choices": ("init", "best"),
        "help": "The start plan: ``init`` (--init, or none), or ``best``: every placement "
                "heuristic first, within the budget, and the fastest (as ``portfolio`` "
                "starts its annealing)."})
    threads: int = field(default=1, metadata={"min": 1, "limit": MAX_THREADS, "help": "torch CPU threads."})
    checkpoint_dir: str | None = field(default=None, metadata={"output": "run",
        "help": "Folder to checkpoint the run in and resume it from."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def _policy(self, seed: int) -> GOPolicy:
        return new_policy(seed, dim=self.dim)

    def _own_plan(self, policy: GOPolicy, env: GOEnv, budget: Budget, seed: int
                  ) -> tuple[Plan, float, int, list[tuple[int, float, float]]] | None:
        """A start of the policy's own within ``budget``, to weigh against the heuristics:
        none for a fresh policy; ``(plan, step time, evaluations, [(evaluations, seconds,
        best) after each round])``."""
        return None

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        if budget.evals is None and budget.seconds is None:
            raise UsageError(f"{self.name}: needs an evaluation or time budget")
        t0 = time.perf_counter()
        seed_everything(seed, self.threads)
        policy = self._policy(seed)
        _check(problem, task, policy, self.name)
        heuristics = {"evals": 0, "history": []}
        start, spent = None, 0  # the plan returned if training finds nothing faster
        if self.start == "best" and "placement" in task:
            # centred on the best heuristic, the policy's own plans only candidates (see
            # GOFinetune's docstring)
            init, heuristics = run_heuristics(problem, task, budget, seed, init, HEURISTICS)
            start, spent = (init, heuristics["step_time"]), heuristics["evals"]
            plain = GOEnv(problem, task, self.units, init, self.fusion_flips, 0.0,
                          self.scheduling_flips)
            t_own = time.perf_counter() - t0
            own = self._own_plan(policy, plain, budget_left(budget, spent, t0), seed)
            if own is not None:
                for e, s, b in own[3]:  # the history of the policy's own rounds
                    b = min(start[1], b)
                    heuristics["history"].append([spent + e, t_own + s,
                                                  b if np.isfinite(b) else None])
                spent += own[2]
                if reads_prior(policy) and own[1] < start[1]:  # its moves: the new centre
                    init = compose(task | {"placement"}, init, own[0])
                start = min(start, own[:2], key=lambda c: c[1])
        env = GOEnv(problem, task, self.units, init, self.fusion_flips, self.placement_flips,
                    self.scheduling_flips, prior_inputs=reads_prior(policy))
        if env.home is not None and not reads_prior(policy):
            policy.zero_head("placement")  # a prior-aware head already moves off the start
        cfg = PPOConfig(**{f.name: getattr(self, f.name) for f in fields(PPOConfig)
                           if hasattr(self, f.name)})
        if start is None and init is not None:
            start, spent = _start(env, budget), 1
        evals = None if budget.evals is None else max(budget.evals - spent, 0)
        seconds = (None if budget.seconds is None
                   else max(budget.seconds - (time.perf_counter() - t0), 0.0))
        t_train = time.perf_counter()
        out = train(policy, [env], cfg, seed=seed, evals=evals, seconds=seconds,
                    checkpoint_dir=self.checkpoint_dir, progress=self.progress,
                    run_config={"method": self.name, **run_hparams(self)},
                    label=f"{self.name} {problem.graph.name}")
        plan, best = out["best"][0] or (None, float("inf"))
        if start is not None and start[1] <= best:  # training found nothing faster
            plan, best = start
        history = _history(heuristics["history"], start, out["history"], spent, t0, t_train)
        evals_2pct, seconds_2pct = time_to_within(history, 0.02)
        initial = next((m for _, m in out["curve"] if m is not None), None)
        return _result(env, plan, best, init, {
            "evals": out["evals"] + spent, "heuristics": heuristics.get("heuristics"),
            "seconds": time.perf_counter() - t0, "updates": out["updates"],
            "start_step_time": None if start is None else start[1],
            "initial_step_time": initial, "evals_to_within_2pct": evals_2pct,
            "seconds_to_within_2pct": seconds_2pct, "interrupted": out["interrupted"],
            "history": history, "curve": out["curve"]})


@register("go-finetune")
@dataclass
class GOFinetune(GOOne):
    """GO fine-tuned: the pre-trained policy trained further by PPO on this graph, from
    the best heuristic's plan.

    With ``start="best"`` (the default) the budget first runs every placement heuristic
    and the policy's zero-shot plans (as :class:`GO`); training then starts with the
    placement head's output layer at zero, so that the policy begins at a prior centred
    on the fastest heuristic's plan (:meth:`GOEnv.with_prior`) and learns which nodes to
    move from there, on the trunk's pre-trained embedding. The zero-shot plans are not
    the centre, though they stay candidates for the result: they are the policy's most
    likely plans, where a few moves rarely help (RNNLM-2 on 2 P100s: 123.3 ms centred on
    them, 111.4 ms centred on the expert's 138.1; docs/go.md).

    A prior-aware policy (:class:`~graphopt.optim.learned.go.policy.PriorGOPolicy`,
    ``go-prior``) is the exception: its zero-shot plans are the heuristics' plan with
    its best-ranked moves applied, in rounds (:meth:`_own_plan`), the best of them is the
    centre, and its pair head keeps its weights, so PPO's first plans are its moves.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(6, 4, seed=0), load_cluster("p100:2"))
    >>> plan, stats = GOFinetune(progress=False).optimize(
    ...     prob, frozenset({"placement"}), Budget(32), seed=0)
    >>> stats["evals"]
    32
    """

    lr: float = ppo_field("lr", FINETUNE_PPO)
    num_samples: int = ppo_field("num_samples", FINETUNE_PPO)
    ent_coef: float = ppo_field("ent_coef", FINETUNE_PPO)
    tune: str = ppo_field("tune", FINETUNE_PPO)
    start: str = field(default="best", metadata={"choices": ("init", "best"),
        "help": "The start plan: ``best`` (default): every placement heuristic first, within "
                "the budget, and training centred on the fastest (as ``portfolio`` starts its "
                "annealing), the policy's own zero-shot plans kept as candidates; ``init``: "
                "--init, or the pre-trained policy alone."})
    checkpoint: str | None = field(default=None, metadata={
        "help": "Folder of the pre-trained policy, or the name of one shipped in the package: "
                "``go`` (None: the default), ``go-corpus`` or ``go-prior``."})

    def _policy(self, seed: int) -> GOPolicy:
        return load_go_policy(self.checkpoint)[0]

    def _own_plan(self, policy: GOPolicy, env: GOEnv, budget: Budget, seed: int
                  ) -> tuple[Plan, float, int, list[tuple[int, float, float]]] | None:
        """The pre-trained policy's zero-shot plans (as ``go``: 16 of them). A prior-aware
        policy's are its best-ranked moves off the start plan, in rounds: each round
        moves off the best plan so far, until a round finds nothing faster or half of
        ``budget``'s evaluations are spent (one round under a time budget alone);
        fine-tuning then centres on the result."""
        t0 = time.perf_counter()
        k = GO.samples if budget.evals is None else min(GO.samples, budget.evals)
        if k < 1 or budget.seconds == 0.0:
            return None
        aware = reads_prior(policy)
        evals = k if not aware or budget.evals is None else max(k, budget.evals // 2)
        ev = LocalEvaluator.from_budget(env.problem, Budget(evals=evals, seconds=budget.seconds))
        generator = torch.Generator().manual_seed(seed)
        rounds, centre = [], env.init
        try:
            while True:
                if aware:
                    env = GOEnv(env.problem, env.task, env.units, centre, prior_inputs=True)
                before = ev.best_time
                ev.evaluate(*_zero_shot(policy, env, k, generator))
                rounds.append((ev.evals, time.perf_counter() - t0, ev.best_time))
                if not aware or not ev.best_time < before or ev.evals + k > evals:
                    break
                centre = compose(env.task | {"placement"}, centre, ev.best_plan)
        except BudgetExhausted:
            pass
        if ev.best_plan is None:
            return None
        return ev.best_plan, ev.best_time, ev.evals, rounds
