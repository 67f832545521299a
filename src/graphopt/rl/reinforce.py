"""REINFORCE as the learned placers (rl-lstm, hdp) run it, written once: the training
loop (:func:`train`, each update's samples a :class:`Batch`), the √(step time) cost, the
moving-average baseline, the learning-rate schedule, convergence figures, and saving and
restoring a run.

Costs here are *lower is better*: a placement's cost is √(step time in seconds), and an
invalid placement (out of memory, split colocation group) costs √(a large constant
step time), as in Mirhoseini et al. (2017) and grappler's hierarchical controller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
from graphopt.errors import BudgetExhausted
from graphopt.runs.checkpoint import load_checkpoint, save_checkpoint
from graphopt.runs.run import CURVE_FILE, LOG_FILE, write_log
from graphopt.sim import Plan
from graphopt.sim.plan import INVALID_PENALTY
from graphopt.viz.curves import learning_curve

__all__ = ["Batch", "EMABaseline", "new_run_state", "plan_rows", "record_update", "restore_run",
           "run_stats", "save_run", "sqrt_cost", "staircase_lr", "time_to_within", "train"]


def sqrt_cost(step_time: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """√(step time), an invalid plan charged ``INVALID_PENALTY**2`` seconds (a cost of
    :data:`~graphopt.sim.plan.INVALID_PENALTY`; grappler's 100 s).

    The square root separates short step times better than the time itself
    (Mirhoseini et al. 2017, §3).

    >>> sqrt_cost(np.array([0.04, 0.09]), np.array([True, False])).tolist()
    [0.2, 10.0]
    """
    return np.sqrt(np.where(valid, step_time, INVALID_PENALTY**2))


@dataclass
class EMABaseline:
    """Exponential moving average of the costs of valid samples: ``b ← decay·b + (1 −
    decay)·mean(cost[valid])``. Starts at the first batch's valid mean (None until then);
    a batch without a valid sample leaves it unchanged (grappler's
    ``always_update_baseline=False``).

    >>> b = EMABaseline(0.9)
    >>> b.update(np.array([1.0, 3.0]), np.array([True, True])); b.value
    2.0
    >>> b.update(np.array([4.0, 9.0]), np.array([True, False])); round(b.value, 6)
    2.2
    """

    decay: float
    value: float | None = None

    def update(self, cost: np.ndarray, valid: np.ndarray) -> None:
        if not valid.any():
            return
        m = float(cost[valid].mean())
        self.value = m if self.value is None else self.decay * self.value + (1 - self.decay) * m

    def advantage(self, cost: np.ndarray) -> np.ndarray:
        """``(cost − b) / b`` (``b`` the batch mean when no baseline exists yet): positive
        is worse. Divided by ``b`` (ours; the papers use ``cost − b``) so that a learning
        rate and an entropy coefficient mean the same on a 10 ms and a 1 s graph.

        >>> EMABaseline(0.9, value=2.0).advantage(np.array([1.0, 3.0])).tolist()
        [-0.5, 0.5]
        """
        ref = float(cost.mean()) if self.value is None else self.value
        return (cost - ref) / ref


def staircase_lr(step: int, lr: float, decay: float, start: int, every: int) -> float:
    """``lr`` until ``start`` updates, then ``lr · decay^⌊(step − start) / every⌋``
    (grappler's schedule: 0.1, ×0.95 every 50 updates from update 400).

    >>> staircase_lr(399, 0.1, 0.95, 400, 50), round(staircase_lr(500, 0.1, 0.95, 400, 50), 6)
    (0.1, 0.09025)
    """
    if step < start:
        return lr
    return lr * decay ** ((step - start) // every)


def time_to_within(history: Sequence[Sequence], fraction: float = 0.02) -> tuple[int | None,
                                                                                float | None]:
    """Evaluations and seconds at which the best step time first came within
    ``fraction`` of the final best.

    ``history`` rows are ``(evals, seconds, best)`` (``best`` None or inf before the first
    valid plan). Returns ``(None, None)`` when no valid plan was seen.

    >>> time_to_within([(10, 1.0, 2.0), (20, 2.0, 1.01), (30, 3.0, 1.0)])
    (20, 2.0)
    """
    best = [(e, s, t) for e, s, t in history if t is not None and math.isfinite(t)]
    if not best:
        return None, None
    final = best[-1][2]
    e, s, _ = next(r for r in best if r[2] <= final * (1 + fraction))
    return int(e), float(s)


def new_run_state() -> dict:
    """The trainer state a checkpoint carries besides the weights: update and evaluation
    counts, the baseline, the best plan, the convergence records and the metric log."""
    return {"update": 0, "evals": 0, "seconds": 0.0, "baseline": None, "best": None,
            "best_time": None, "initial_step_time": None, "history": [], "curve": [],
            "entropy": [], "log": []}


def record_update(state: dict, ev, res, entropy: float, loss: float) -> None:
    """Count one policy update of evaluator ``ev`` whose batch gave ``res``: the batch's
    mean valid step time goes to ``curve``, ``(evals, seconds, best)`` to ``history``, the
    policy's mean entropy per decision (nats; ln 2 = 0.69 is uniform over two devices, 0
    a collapsed policy) to ``entropy``, and a row of CleanRL-grouped metrics (step times
    in seconds, ``loss`` the update's) to ``log``."""
    state["update"] += 1
    state["entropy"].append(entropy)
    evals, mean = state["evals"] + ev.evals, None
    if res.valid.any():
        mean = float(res.step_time[res.valid].mean())
        if state["initial_step_time"] is None:
            state["initial_step_time"] = mean
    best = ev.best_time if ev.best_plan is not None else None
    seconds = state["seconds"] + ev.elapsed
    state["curve"].append([evals, mean])
    state["history"].append([evals, seconds, best])
    state["log"].append({"update": state["update"], "evals": evals, "seconds": round(seconds, 3),
                         "charts/mean_step_time": mean, "charts/best_step_time": best,
                         "charts/valid_fraction": float(res.valid.mean()),
                         "losses/loss": loss, "losses/entropy": entropy})


def run_stats(state: dict, ev, **extra) -> dict:
    """The stats a learned placer returns: this call's evaluations and seconds, the best
    step time, convergence figures (:func:`time_to_within`) and the records."""
    best = ev.best_plan is not None
    evals_2pct, seconds_2pct = time_to_within(state["history"], 0.02)
    return {"evals": ev.evals, "seconds": ev.elapsed, "valid": best,
            "step_time": ev.best_time if best else None,
            "initial_step_time": state["initial_step_time"], "updates": state["update"],
            "total_evals": state["evals"], "evals_to_within_2pct": evals_2pct,
            "seconds_to_within_2pct": seconds_2pct, "history": state["history"],
            "curve": state["curve"], "entropy": state["entropy"], **extra}


def restore_run(checkpoint_dir: str | None, config: dict, modules: dict, optimizer,
                generator: torch.Generator, baseline: EMABaseline, ev) -> dict:
    """The run state of ``checkpoint_dir`` (a new one when None or empty), with the
    modules, optimizer, generator, baseline and evaluator ``ev``'s best plan restored."""
    state = new_run_state()
    if checkpoint_dir is not None:
        state = load_checkpoint(checkpoint_dir, config, modules, optimizer, generator,
                                fresh=state) or state
    baseline.value = state["baseline"]
    if state["best"] is not None:
        # these trainers minimise step time, so the best value is the best step time
        ev.best_plan, ev.best_time = Plan(placement=state["best"]), state["best_time"]
        ev.best_value = ev.best_time
    return state


def save_run(folder: str, config: dict, modules: dict, optimizer, generator: torch.Generator,
             state: dict, baseline: EMABaseline, ev, title: str) -> None:
    """Checkpoint a run into ``folder`` (the inverse of :func:`restore_run`) and write its
    metric log (``log.csv``) and learning curve (``curve.png``) there."""
    best = ev.best_plan
    state.update(baseline=baseline.value, best_time=None if best is None else ev.best_time,
                 best=None if best is None else np.asarray(best.placement).tolist())
    save_checkpoint(folder, config, modules, optimizer, generator, state)
    write_log(state["log"], f"{folder}/{LOG_FILE}")
    learning_curve(state["history"], f"{folder}/{CURVE_FILE}", state["curve"], title=title)


def plan_rows(a: np.ndarray | None, b: int, n: int) -> np.ndarray | None:
    """``b`` rows of a plan part ``a`` of ``n`` nodes (None stays None): what a batch of
    ``b`` placements is evaluated with.

    >>> plan_rows(np.arange(3), 2, 3).tolist(), plan_rows(None, 2, 3)
    ([[0, 1, 2], [0, 1, 2]], None)
    """
    return None if a is None else np.broadcast_to(a, (b, n))


@dataclass
class Batch:
    """One update's samples: the ``placements`` to price (``[S, N]``), the policy's
    ``entropy`` per sample (``[S]``, summed over its decisions) and ``loss``, which turns
    the advantages of the first ``k`` samples priced (``(advantage [k], k)``) into the
    loss the update minimises."""

    placements: np.ndarray
    entropy: torch.Tensor
    loss: Callable[[torch.Tensor, int], torch.Tensor]


def train(label: str, sample: Callable[[int], Batch], *, ev, budget, init: Plan, config: dict,
          modules: dict, optimizer: torch.optim.Optimizer, generator: torch.Generator,
          baseline: EMABaseline, grad_bound: float, num_groups: int,
          checkpoint_dir: str | None, checkpoint_every: int, title: str, run_name: str,
          progress: bool = True) -> tuple[np.ndarray | None, dict]:
    """REINFORCE on √(step time) until evaluator ``ev`` is out of budget (or Ctrl-C): the
    run of ``checkpoint_dir`` resumed (:func:`restore_run`), then per update
    ``sample(update)`` gives a :class:`Batch` (setting the learning rate, noise or prior
    of that update), its placements are priced with ``init``'s priorities and fusion,
    the advantage over ``baseline`` weighs the loss, gradients are clipped to
    ``grad_bound`` over ``modules``' parameters, and the run is checkpointed every
    ``checkpoint_every`` updates and at the end. An update the budget cuts short is undone
    (its sampling too), so a resumed run draws what an uninterrupted one would.

    Returns the best placement (the last batch's first one without a valid plan, None
    without a batch) and :func:`run_stats` (``groups`` is ``num_groups``).
    """
    n = ev.problem.graph.num_nodes
    state = restore_run(checkpoint_dir, config, modules, optimizer, generator, baseline, ev)
    resumed_from = state["update"]
    parameters = [p for module in modules.values() for p in module.parameters()]

    def checkpoint(folder: str) -> None:
        save_run(folder, config, modules, optimizer, generator, state, baseline, ev, title)

    interrupted, torn, placements = False, False, None
    columns = (TextColumn(label), BarColumn(), TextColumn("{task.completed:,} evals"),
               TextColumn("best {task.fields[best]}"), TimeElapsedColumn())
    with Progress(*columns, disable=not progress, transient=True) as bar, stop_on_interrupt():
        task = bar.add_task("train", total=budget.evals, best="-")
        try:
            while not ev.exhausted():
                torn, drawn = True, generator.get_state()  # torn until the bookkeeping
                batch = sample(state["update"])
                placements = batch.placements
                res = ev.evaluate(placements, plan_rows(init.priority, len(placements), n),
                                  plan_rows(init.fusion, len(placements), n))
                k = len(res.step_time)
                cost = sqrt_cost(res.step_time, res.valid)
                advantage = torch.as_tensor(baseline.advantage(cost), dtype=torch.float32)
                loss = batch.loss(advantage, k)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(parameters, grad_bound)
                optimizer.step()
                baseline.update(cost, res.valid)

                record_update(state, ev, res, float(batch.entropy[:k].detach().mean()) / num_groups,
                              float(loss.detach()))
                torn = False
                bar.update(task, completed=ev.evals,
                           best=f"{ev.best_time * 1e3:.3f} ms" if ev.best_plan else "-")
                if checkpoint_dir and state["update"] % checkpoint_every == 0:
                    checkpoint(checkpoint_dir)
        except BudgetExhausted:  # the budget ran out, or Ctrl-C, before the batch
            generator.set_state(drawn)  # the update never happened: undo its sampling
            torn = False
        except KeyboardInterrupt:  # a second Ctrl-C: the last checkpoint stands
            interrupted = True
        interrupted = interrupted or stop_requested()
    state["evals"] += ev.evals
    state["seconds"] += ev.elapsed
    if checkpoint_dir is not None and not torn:
        checkpoint(checkpoint_dir)

    if ev.best_plan is not None:
        placement = ev.best_plan.placement
    else:
        placement = None if placements is None else placements[0]
    return placement, run_stats(state, ev, resumed_from_update=resumed_from, groups=num_groups,
                                interrupted=interrupted, run_name=run_name, config=config)
