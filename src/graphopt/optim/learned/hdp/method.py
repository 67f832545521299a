"""``hdp``: the hierarchical device placer (Mirhoseini, Goldie, Pham, Steiner, Le and
Dean, ICLR 2018), with the values of TensorFlow grappler's ``hierarchical_controller``.

Reads top to bottom: hyperparameters → grouper module → seeding → op inputs → grouper,
placer and optimizer (resumed from a checkpoint when one fits) → the training loop →
the best placement seen and the run's statistics.

1. **Grouper.** A feed-forward network gives every op a softmax over ``num_groups``
   groups (default ``min(256, 20 · devices)``, grappler's) and one grouping is sampled.
   Op inputs: a learned op-type embedding, standardized node features (output shape,
   sizes, degree, position) and HDP's adjacency slots (:func:`graphopt.rl.op_inputs`).
   A prior ``−locality · (r_i·G/N − c_g)²`` on op ``i``'s logit of group ``g`` (``r_i``
   the op's place in the model's layer order, :func:`graphopt.ir.features.layer_order`;
   ``c_g`` a learned centre, starting at ``g + ½``) makes the first groupings contiguous
   blocks of that order, the model's layers one after another; the network's output
   layer starts at zero and learns departures from them.
2. **Placer.** The groups of that grouping (:class:`graphopt.rl.GroupFeatures`:
   adjacency rows, op-type histogram, sizes) go to a bidirectional LSTM encoder; an
   LSTM decoder with attention samples ``placer_samples`` placements of the groups
   (:class:`graphopt.nn.AttentionLSTMPlacer`), logits ``C·tanh(z/T)`` with grappler's
   C = T = 1, plus a layout prior (ours, :func:`layout_prior`): group ``g`` leans to
   device ``floor((g + ½)·D/G)``, so a fresh placer's samples are the grouper's layer
   blocks in D contiguous runs, about ``layout_prior`` of the groups elsewhere; the
   prior fades linearly to nothing over ``layout_updates`` updates. Every
   ``greedy_every`` updates the policy's most likely placement is evaluated too (at
   update 0, the layout's own plan).
3. **Colocation.** A sampled grouping may split a colocation group across groups and so
   across devices. Each placement is expanded to ops and then every colocation group is
   moved, whole, to the device most of its members were given (ties: the lower device)
   before it is simulated; the policy is credited with the cost of that repaired plan.
4. **Training.** Grouper and placer are trained jointly by REINFORCE:
   ``loss = mean((c − b) / b · (log π_place + log π_group)) − β · (H_place + H_group)``,
   cost ``c = √(step time)``, an
   invalid plan (out of memory) charged √(``INVALID_PENALTY**2``) seconds; the baseline ``b``
   is an exponential moving average (0.9) of the costs of non-failing samples. Adam
   with learning rate 0.003, ×0.95 every 50 updates from update 400; gradients clipped
   to norm 1; Gaussian noise (0.5 × the logits' RMS) on every logit for the first 750
   updates. The best placement sampled is the result.

Departures from grappler, kept small: one output shape per op (our IR's) instead of
five; node features and an op-type embedding where grappler feeds the raw type index and
raw dimensions; a ReLU between the grouper's two layers (grappler has none, which makes
them one linear map); the grouper's block prior (``locality``) and the placer's layout
prior (``layout_prior``); Adam at 0.003, not 0.1;
the baseline starts at the first batch's mean, not at the failing signal; the advantage
divided by the baseline (``(c − b) / b``, so one learning rate suits graphs of any step
time); an optional learning-rate warm-up and entropy bonus ``β`` (``warmup``,
``entropy_coef``, both off by default). Only the placement is learned; priorities and
fusion come from ``init`` (or stay the compiler defaults).

Why it used to end on one device (issue 14; instrumented on rnnlm-2, 2 P100s, with the
paper's values: Adam at 0.1, C = 5, T = 10, no prior; ``docs/learned.md``):

- the grouper's first groupings scatter: a Glorot-initialised network over standardized
  features puts 3,166 of 4,483 consecutive ops in different groups, so a split of the
  groups cuts every layer (random placements of random groups: 786 ms median against one
  device's 191 ms, ``bench/hdp_groups.py``). The block prior makes the first groupings
  contiguous (223 cuts; the first batch 295 ms);
- one Adam step at 0.1 (and at 0.003, and 0.0003 within 20 updates) moves every weight
  of the 512-unit LSTMs the same way and saturates the placer: its entropy falls from
  0.69 nats per decision (uniform over 2 devices) to 0.01 after the first update, every
  group on one device; ``tanh`` then passes no gradient to leave it. Grappler's
  C = T = 1 bound the logits to [−1, 1], so each group keeps at least a 12% chance of
  the other device and the placer keeps sampling splits near the one-device plan, where
  a few groups moved are faster (on rnnlm-2, 5 of the 40 block groups moved alone are
  faster than one device, by up to 4.8%); at 0.003 the grouper's blocks drift slowly (223 to
  about 900 cuts in 500 updates), where at 0.1 they scatter within 20 updates.

On rnnlm-2 the policy's own samples still average above one device's step time; what
``hdp`` returns is the best of the placements it samples. On four devices C = 1 caps the
likeliest device at 71%, the placer settles on a mix of devices, and the best sample
stays behind one device (transformer-xl-4: 303.5 against 203.7 ms; ``docs/learned.md``).

With ``checkpoint_dir``, both networks, Adam's state, the sampling generator, the
baseline, the best plan and the history are saved every ``checkpoint_every`` updates and
at the end (safetensors + JSON), always between whole updates (Ctrl-C ends the run at
the next one; an update whose batch was not yet simulated is undone), with a
learning-curve PNG; a later run with the same config resumes where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from graphopt.evaluate.local import LocalEvaluator
from graphopt.errors import UsageError, MAX_THREADS
from graphopt.ir.features import layer_order
from graphopt.nn import AttentionLSTMPlacer
from graphopt.optim.learned.hdp.grouper import Grouper
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.heuristics._common import unify_groups
from graphopt.rl import EMABaseline, GroupFeatures, op_inputs, staircase_lr
from graphopt.rl.config import run_hparams
from graphopt.rl.reinforce import Batch, plan_rows, train
from graphopt.runs import run_name, seed_everything
from graphopt.sim import Plan, Problem

__all__ = ["HDP"]


def layout_prior(groups: int, devices: int, off: float) -> torch.Tensor | None:
    """Placer logits ``(groups, devices)``: ``ln((1 − off)(D − 1) / off)`` on device
    ``floor((g + ½)·D / G)`` of group ``g``, so that a placer whose own logits are even
    puts a share ``off`` of the groups elsewhere; None where ``off >= 1 − 1/D`` (no
    preference) or with one device.

    >>> layout_prior(4, 2, 0.1).argmax(1).tolist()
    [0, 0, 1, 1]
    """
    if devices < 2 or off >= 1 - 1 / devices:
        return None
    prior = torch.zeros(groups, devices)
    home = ((torch.arange(groups) + 0.5) * devices / groups).long()
    prior[torch.arange(groups), home] = float(np.log((1 - off) * (devices - 1) / off))
    return prior


@register("hdp")
@dataclass
class HDP:
    """Hierarchical placer: feed-forward grouper + LSTM placer, trained jointly by REINFORCE.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(layers=2, hidden=64), load_cluster("dgx1-v100:2"))
    >>> plan, stats = HDP(hidden=16, progress=False).optimize(
    ...     prob, frozenset({"placement"}), Budget(evals=16), seed=0)
    >>> stats["evals"], stats["updates"], stats["groups"]
    (16, 4, 40)

    References
    ----------
    A. Mirhoseini, A. Goldie, H. Pham, B. Steiner, Q. V. Le and J. Dean, "A Hierarchical
    Model for Device Placement", ICLR 2018. TensorFlow,
    ``tensorflow/python/grappler/hierarchical_controller.py``.
    """

    objectives: ClassVar[tuple[str, ...]] = ("runtime",)  # its reward is step time

    num_groups: int | None = field(default=None, metadata={"min": 1,
        "help": "Groups the grouper assigns ops to (None: min(256, 20 · devices), grappler's)."})
    hidden: int = field(default=512, metadata={"min": 1, "max": 8192,
        "help": "LSTM units of the placer (grappler: 512; the encoder has half per direction)."})
    grouping_hidden: int = field(default=64, metadata={"min": 1, "max": 8192,
        "help": "Hidden units of the feed-forward grouper (grappler: 64)."})
    type_embedding: int = field(default=16, metadata={"min": 1, "max": 8192,
        "help": "Width of the grouper's learned op-type embedding (ours)."})
    adj_slots: int = field(default=10, metadata={"min": 0, "max": 1024,
        "help": "Neighbours per op in the grouper's input, two numbers each (grappler: adj_embed_dim 20)."})
    locality: float = field(default=20.0, metadata={"min": 0,
        "help": "Weight of the grouper's prior toward contiguous blocks of the model's layer "
                "order (ours; 0: none, the first groupings scatter every layer)."})
    layout_prior: float = field(default=0.1, metadata={"gt": 0, "max": 1,
        "help": "Share of groups a fresh placer sends off the contiguous layout, group g on "
                "device floor((g + 1/2) D / G): the grouper's first blocks in layer order, so the "
                "model's layers in D contiguous runs, the expert's rule of thumb (ours; "
                "1 - 1/D or more: no prior)."})
    layout_updates: int = field(default=500, metadata={"min": 1,
        "help": "Updates over which the layout prior fades linearly to nothing (ours; 500: "
                "about a run of 2,000 evaluations)."})
    greedy_every: int = field(default=100, metadata={"min": 0,
        "help": "Updates between evaluations of the policy's most likely placement (each op's "
                "likeliest group, each group's likeliest device; the first at update 0, the "
                "layout prior's own plan), one evaluation each (ours; 0: never)."})
    bidirectional: bool = field(default=True, metadata={"help": "Bidirectional encoder (grappler: bi_lstm)."})
    placer_samples: int = field(default=4, metadata={"min": 1, "limit": 10_000,
        "help": "Placements sampled per grouping and update (HDP §4: k = 4)."})
    lr: float = field(default=0.003, metadata={"gt": 0,
        "help": "Adam learning rate at the start (ours; HDP and grappler: 0.1, which makes the "
                "placer deterministic in one update)."})
    warmup: int = field(default=0, metadata={"min": 0,
        "help": "Updates over which the learning rate rises linearly from lr / warmup to lr "
                "(ours; 0: none)."})
    lr_decay: float = field(default=0.95, metadata={"gt": 0, "max": 1,
        "help": "Learning-rate factor per decay_steps updates once decay starts (grappler: 0.95)."})
    start_decay_step: int = field(default=400, metadata={"min": 0,
        "help": "Update at which the learning rate starts to decay (grappler: 400)."})
    decay_steps: int = field(default=50, metadata={"min": 1,
        "help": "Updates per decay step (grappler: 50)."})
    grad_bound: float = field(default=1.0, metadata={"gt": 0,
        "help": "Gradients clipped to this global norm (grappler: 1.0)."})
    entropy_coef: float = field(default=0.0, metadata={"min": 0,
        "help": "Weight of grouper and placer entropy (summed over decisions) in the loss (ours; 0: none)."})
    logits_noise: float = field(default=0.5, metadata={"min": 0,
        "help": "Std of the noise on grouper and placer logits, relative to their RMS (grappler: 0.5)."})
    stop_noise_step: int = field(default=750, metadata={"min": 0,
        "help": "Update from which logits are no longer noised (grappler: 750)."})
    temperature: float = field(default=1.0, metadata={"gt": 0,
        "help": "Placer logits divided by this before the tanh (grappler: 1; HDP §4: T = 10)."})
    tanh_constant: float = field(default=1.0, metadata={"gt": 0,
        "help": "Placer logits squashed into [−C, C] (grappler: 1; HDP §4: C = 5)."})
    baseline_decay: float = field(default=0.9, metadata={"min": 0, "max": 1,
        "help": "Decay of the moving-average baseline, updated on non-failing samples (grappler: 0.9)."})
    threads: int = field(default=1, metadata={"min": 1, "limit": MAX_THREADS,
        "help": "torch CPU threads for the networks (the simulator has its own)."})
    checkpoint_every: int = field(default=50, metadata={"min": 1,
        "help": "Policy updates between checkpoints (with checkpoint_dir)."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})
    checkpoint_dir: str | None = field(default=None, metadata={"output": "run",
        "help": "Folder to save the run in and resume it from (None: no checkpoints)."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        if "placement" not in task:
            raise UsageError(f"hdp decides placement; task {sorted(task)} leaves it out")
        graph, base, devices = problem.graph, init or Plan(), problem.num_devices
        num_groups = self.num_groups or min(256, 20 * devices)
        hparams = run_hparams(self)
        config = {"method": "hdp", "graph": graph.name, "nodes": graph.num_nodes,
                  "edges": graph.num_edges, "cluster": problem.cluster.name, "seed": seed,
                  "task": sorted(task), **hparams, "num_groups": num_groups}
        name = run_name(graph.name, "hdp", seed=seed)

        # -- seeding --------------------------------------------------------------------
        generator = seed_everything(seed, self.threads)

        # -- op inputs ------------------------------------------------------------------------
        types, feats = op_inputs(graph, self.adj_slots)
        op_type, op_x = torch.as_tensor(types), torch.as_tensor(feats)
        order = torch.as_tensor(layer_order(graph))
        prior = layout_prior(num_groups, devices, self.layout_prior)
        features = GroupFeatures(graph)

        # -- grouper, placer, optimizer, resume --------------------------------------------
        grouper = Grouper(int(op_type.max()) + 1, op_x.shape[1], num_groups,
                          self.grouping_hidden, self.type_embedding, self.locality)
        placer = AttentionLSTMPlacer(features.dim(num_groups), devices, self.hidden,
                                     self.bidirectional, self.temperature, self.tanh_constant)
        modules = {"grouper": grouper, "placer": placer}
        optimizer = torch.optim.Adam([*grouper.parameters(), *placer.parameters()], lr=self.lr)
        baseline = EMABaseline(self.baseline_decay)
        ev = LocalEvaluator.from_budget(problem, budget)

        def sample(step: int) -> Batch:
            for group in optimizer.param_groups:
                group["lr"] = staircase_lr(step, self.lr, self.lr_decay, self.start_decay_step,
                                           self.decay_steps) * min(1.0, (step + 1) / max(self.warmup, 1))
            noise = self.logits_noise if step < self.stop_noise_step else 0.0
            # the layout is where the placer starts, not where it must stay
            fade = None if prior is None else prior * max(0.0, 1 - step / self.layout_updates)
            if self.greedy_every and step % self.greedy_every == 0:
                with torch.no_grad():
                    likeliest = grouper(op_type, op_x, order=order, greedy=True)[0]
                    device = placer(features(likeliest[None], num_groups), prior=fade,
                                    greedy=True)[0][0]
                ev.evaluate(unify_groups(graph, device.numpy()[likeliest.numpy()], devices)[None],
                            plan_rows(base.priority, 1, graph.num_nodes),
                            plan_rows(base.fusion, 1, graph.num_nodes))
            groups, group_log_prob, group_entropy = grouper(op_type, op_x, generator, noise, order)
            x = features(groups[None], num_groups)
            actions, place_log_prob, place_entropy = placer(x, self.placer_samples, generator,
                                                            noise, fade)
            placements = np.stack([unify_groups(graph, a[groups.numpy()], devices)
                                   for a in actions.numpy()])
            return Batch(placements, place_entropy, lambda advantage, k: (
                (advantage * (place_log_prob[:k] + group_log_prob)).mean()
                - self.entropy_coef * (place_entropy[:k].mean() + group_entropy)))

        # -- training loop -----------------------------------------------------------------
        placement, stats = train(
            "hdp", sample, ev=ev, budget=budget, init=base, config=config, modules=modules,
            optimizer=optimizer, generator=generator, baseline=baseline,
            grad_bound=self.grad_bound,
            num_groups=num_groups, checkpoint_dir=self.checkpoint_dir,
            checkpoint_every=self.checkpoint_every,
            title=f"hdp on {graph.name} ({problem.cluster.name}), seed {seed}",
            run_name=name, progress=self.progress)

        # -- result ------------------------------------------------------------------------
        if placement is None:
            placement = unify_groups(graph, np.zeros(graph.num_nodes, np.int64), devices)
        return compose(task, init, Plan(placement=placement)), stats

