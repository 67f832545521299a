"""``rl-lstm``: REINFORCE-trained seq2seq device placement (Mirhoseini et al., ICML 2017).

Reads top to bottom: hyperparameters → seeding → groups and their inputs → policy and
optimizer (resumed from a checkpoint when one fits) → the training loop (sample a batch
of placements, simulate, √(step time) cost, moving-average baseline, REINFORCE update)
→ the best placement seen and the run's statistics.

1. **Groups.** :func:`graphopt.ir.coarsen.colocation_groups`: the graph's colocation
   groups, grown by merging each group into its only consumer. Beyond ``max_groups``,
   groups consecutive in topological order merge into runs of equal compute time
   (:func:`graphopt.ir.coarsen.bounded_groups`), so the decoder's length stays bounded;
   groups move whole, so every placement keeps colocation groups on one device.
2. **Inputs.** Per group: its op-type histogram, its summed sizes and its rows of the
   group adjacency matrix (:class:`graphopt.rl.GroupFeatures`) — the paper's op type,
   output shapes and adjacency, aggregated over the group.
3. **Policy.** :class:`graphopt.nn.AttentionLSTMPlacer`: an LSTM encoder over the groups
   in topological order, an LSTM decoder with attention that places them one after
   another, each choice fed to the next step.
4. **Training.** REINFORCE: ``loss = mean((c − b) / b · log π(placement) − β · H(π))``
   with cost ``c = √(step time)``, an invalid placement (out of memory) costing
   √(``INVALID_PENALTY**2``), ``b`` an exponential moving average of valid costs, ``H`` the
   policy's entropy summed over groups and ``β = entropy_coef``. Every sample goes
   through a :class:`~graphopt.evaluate.local.LocalEvaluator`, which counts the budget and
   keeps the best plan.

Only the placement is learned; priorities and fusion come from ``init`` (or stay the
compiler defaults). Values the paper does not state are marked *ours*; the optimizer
settings are those HDP (§4) reports using for its comparison with this method, except
the learning rate.

Departures, and what the sweep in ``docs/learned.md`` showed (``bench/learned_sweep.py``,
2,000 evaluations, rnnlm-2 and transformer-xl-4 on P100s):

- **Learning rate 0.001, not 0.1.** Adam's first update moves every weight by about
  ``lr`` in the sign of its gradient; at 0.01 (and 0.003) one update pushes the logits
  to ±C, the policy becomes deterministic (entropy per decision 0.002) on one device,
  and the saturated tanh passes no gradient to leave it. At 0.001 the sampled batches
  improve slowly on rnnlm-2 with seed 0 (162 → 155 ms from the first to the last fifth
  of the run), but seed 1 and transformer-xl-4 still collapse in the first updates.
- **Advantage divided by the baseline** (``(c − b) / b``, ours), so that one learning
  rate and entropy weight suit graphs whose step times differ by 100x.
- **Optional warm-up and entropy bonus** (``warmup``, ``entropy_coef``, ours; off by
  default). A 100-update warm-up avoids the first-update collapse at lr 0.003, but the
  policy still collapses later; an entropy weight of 0.001 keeps rnnlm-2's policy from
  collapsing (both seeds) yet keeps transformer-xl-4's uniform (it never learns), so
  neither is on.
- With 4 samples per update, 2,000 evaluations are 500 updates: far fewer than the
  papers trained for. On four devices the policy learns first to stop sending tensors
  between devices and settles on one device (transformer-xl-4: batches at 203.5 ms, one
  device 203.4 ms), the nearest large improvement over random placements.

With ``checkpoint_dir``, the policy, Adam's state, the sampling generator, the baseline,
the best plan and the history are saved every ``checkpoint_every`` updates and at the end
(safetensors + JSON), always between whole updates (Ctrl-C ends the run at the next one;
an update whose batch was not yet simulated is undone), with a learning-curve PNG; a
later run with the same config resumes where it stopped, drawing the samples an
uninterrupted run would have drawn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from graphopt.evaluate.local import LocalEvaluator
from graphopt.errors import UsageError, MAX_THREADS
from graphopt.ir.coarsen import bounded_groups, colocation_groups
from graphopt.nn import AttentionLSTMPlacer
from graphopt.optim.base import Budget, compose, register
from graphopt.rl import EMABaseline, GroupFeatures
from graphopt.rl.config import run_hparams
from graphopt.rl.reinforce import Batch, train
from graphopt.runs import run_name, seed_everything
from graphopt.sim import Plan, Problem

__all__ = ["RLLSTM"]


@register("rl-lstm")
@dataclass
class RLLSTM:
    """Seq2seq LSTM placer with attention over colocation groups, trained by REINFORCE.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(4, 3, seed=0), load_cluster("dgx1-v100:2"))
    >>> plan, stats = RLLSTM(hidden=16, progress=False).optimize(
    ...     prob, frozenset({"placement"}), Budget(evals=16), seed=0)
    >>> stats["evals"], stats["updates"], len(plan.placement) == prob.num_nodes
    (16, 4, True)

    References
    ----------
    A. Mirhoseini, H. Pham, Q. V. Le, B. Steiner, R. Larsen, Y. Zhou, N. Kumar,
    M. Norouzi, S. Bengio and J. Dean, "Device Placement Optimization with Reinforcement
    Learning", ICML 2017.
    """

    objectives: ClassVar[tuple[str, ...]] = ("runtime",)  # its reward is step time

    max_groups: int = field(default=256, metadata={"min": 1, "max": 100_000,
        "help": "Most groups the decoder places; more colocation groups merge in topological runs (ours)."})
    hidden: int = field(default=256, metadata={"min": 1, "max": 8192,
        "help": "LSTM units of encoder and decoder (ours)."})
    bidirectional: bool = field(default=False, metadata={
        "help": "Read the groups in both directions (HDP's encoder does; the 2017 one reads forward)."})
    num_samples: int = field(default=4, metadata={"min": 1, "limit": 10_000,
        "help": "Placements sampled and simulated per policy update (HDP §4: k = 4)."})
    lr: float = field(default=0.001, metadata={"gt": 0,
        "help": "Adam learning rate, fixed (ours, from the sweep: 0.003 and up collapse the policy to one "
                "device)."})
    warmup: int = field(default=0, metadata={"min": 0,
        "help": "Updates over which the learning rate rises linearly from lr / warmup to lr "
                "(ours; 0: none)."})
    entropy_coef: float = field(default=0.0, metadata={"min": 0,
        "help": "Weight of the policy's entropy (summed over groups) subtracted from the loss (ours; 0: "
                "none)."})
    grad_bound: float = field(default=1.0, metadata={"gt": 0,
        "help": "Gradients clipped to this global norm (HDP §4)."})
    temperature: float = field(default=10.0, metadata={"gt": 0,
        "help": "Logits divided by this before the tanh (HDP §4: T = 10)."})
    tanh_constant: float = field(default=5.0, metadata={"gt": 0,
        "help": "Logits squashed into [−C, C] (HDP §4: C = 5)."})
    baseline_decay: float = field(default=0.9, metadata={"min": 0, "max": 1,
        "help": "Decay of the moving-average baseline of √(step time) (grappler's bl_dec)."})
    threads: int = field(default=1, metadata={"min": 1, "limit": MAX_THREADS,
        "help": "torch CPU threads for the policy (the simulator has its own)."})
    checkpoint_every: int = field(default=50, metadata={"min": 1,
        "help": "Policy updates between checkpoints (with checkpoint_dir)."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})
    checkpoint_dir: str | None = field(default=None, metadata={"output": "run",
        "help": "Folder to save the run in and resume it from (None: no checkpoints)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        if "placement" not in task:
            raise UsageError(f"rl-lstm decides placement; task {sorted(task)} leaves it out")
        graph, base = problem.graph, init or Plan()
        hparams = run_hparams(self)
        config = {"method": "rl-lstm", "graph": graph.name, "nodes": graph.num_nodes,
                  "edges": graph.num_edges, "cluster": problem.cluster.name, "seed": seed,
                  "task": sorted(task), **hparams}
        name = run_name(graph.name, "rl-lstm", seed=seed)

        # -- seeding --------------------------------------------------------------------
        generator = seed_everything(seed, self.threads)

        # -- groups and their inputs ---------------------------------------------------------
        groups = bounded_groups(graph, self.max_groups, problem.costs.time.mean(axis=1),
                                acyclic=False, units=colocation_groups(graph))
        num_groups = int(groups.max()) + 1
        features = GroupFeatures(graph)
        x = features(torch.as_tensor(groups)[None], num_groups)

        # -- policy, optimizer, resume -----------------------------------------------------
        policy = AttentionLSTMPlacer(x.shape[2], problem.num_devices, self.hidden,
                                     self.bidirectional, self.temperature, self.tanh_constant)
        optimizer = torch.optim.Adam(policy.parameters(), lr=self.lr)
        baseline = EMABaseline(self.baseline_decay)
        ev = LocalEvaluator.from_budget(problem, budget)

        def sample(update: int) -> Batch:
            for group in optimizer.param_groups:
                group["lr"] = self.lr * min(1.0, (update + 1) / max(self.warmup, 1))
            actions, log_prob, entropy = policy(x, self.num_samples, generator)
            return Batch(actions.numpy()[:, groups], entropy,
                         lambda advantage, k: (advantage * log_prob[:k]
                                               - self.entropy_coef * entropy[:k]).mean())

        # -- training loop -----------------------------------------------------------------
        placement, stats = train(
            "rl-lstm", sample, ev=ev, budget=budget, init=base, config=config,
            modules={"policy": policy}, optimizer=optimizer, generator=generator,
            baseline=baseline, grad_bound=self.grad_bound, num_groups=num_groups,
            checkpoint_dir=self.checkpoint_dir, checkpoint_every=self.checkpoint_every,
            title=f"rl-lstm on {graph.name} ({problem.cluster.name}), seed {seed}",
            run_name=name, progress=self.progress)

        # -- result ------------------------------------------------------------------------
        if placement is None:
            placement = np.zeros(graph.num_nodes, np.int64)
        return compose(task, init, Plan(placement=placement)), stats
