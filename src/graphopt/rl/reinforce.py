"""REINFORCE pieces the learned placers share: the √(step time) cost, the
moving-average baseline, the learning-rate schedule, convergence figures, and saving and
restoring a run.

Costs here are *lower is better*: a placement's cost is √(step time in seconds), and an
invalid placement (out of memory, split colocation group) costs √(a large constant
step time), as in Mirhoseini et al. (2017) and grappler's hierarchical controller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from graphopt.rl.checkpoint import load_checkpoint, save_checkpoint
from graphopt.rl.run import CURVE_FILE, LOG_FILE, write_log
from graphopt.sim import Plan
from graphopt.sim.plan import INVALID_PENALTY
from graphopt.viz.curves import learning_curve

__all__ = ["EMABaseline", "new_run_state", "record_update", "restore_run", "run_stats",
           "save_run", "sqrt_cost", "staircase_lr", "time_to_within"]


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
