"""PPO for GO's whole-graph decisions, in one file (CleanRL's layout: the loop top to
bottom; its hyperparameters, :class:`~graphopt.rl.config.PPOConfig`, live in
:mod:`graphopt.rl.config`, where the command line reads them without importing torch).

An *episode* is one decision for a whole graph: the policy gives every node a
distribution per task (device, scheduling priority, fusion priority), a batch of
``num_samples`` plans is drawn from it and simulated together with ``simulate_batch``,
and each plan's reward is ``−√(step time / lower bound)`` (``−√INVALID_PENALTY`` for a plan
that runs out of memory). Episodes are one step long, so there is no critic: the
advantage is the reward standardized within its batch — all plans of a batch come from
the same graph, so the batch mean is the right baseline.

The update is PPO's clipped objective with the ratio taken **per node**: each node's
choice counts as one action, credited with its plan's advantage. The ratio of the
joint probability of N choices would leave the trust region after any update; per node
it stays near 1, and the clip does its job (as in GO, whose policy factorizes over
nodes). Then ``update_epochs`` gradient steps on the same batch, an entropy bonus,
global gradient clipping and Adam. With ``tune="heads"`` (fine-tuning a pre-trained
policy) the trunk's embedding of each graph
(:meth:`~graphopt.optim.learned.go.policy.GOPolicy.embed`) is computed once,
without autograd, and only the per-task layers train: an update then costs a forward and
backward pass of those layers alone.

With several graphs (pre-training), each update takes the next graph in turn.
``train`` checkpoints (safetensors + JSON) every ``checkpoint_every`` updates and when
it stops, always between whole updates: Ctrl-C ends the run at the next boundary (the
update under way finishes, or is undone when its batch was not yet simulated; a second
Ctrl-C abandons it and keeps the last checkpoint). Called again with
the same folder and config it resumes where it stopped,
drawing what an uninterrupted run would have drawn, and it writes a CSV log (one row
per update, metrics grouped as CleanRL does: ``charts/...`` step time over the lower
bound, valid fraction, learning rate, plans simulated per second; ``losses/...`` loss,
entropy, approximate KL, clip fraction) and a training-curve PNG there.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from torch import Tensor

from graphopt._files import save_figure
from graphopt.evaluate.backend import make_evaluator
from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
from graphopt.errors import BudgetExhausted
from graphopt.evaluate.local import LocalEvaluator
from graphopt.runs.checkpoint import load_checkpoint, save_checkpoint
from graphopt.rl.config import PPOConfig
from graphopt.runs.run import CURVE_FILE, LOG_FILE, seed_everything, write_log
from graphopt.sim import Plan
from graphopt.sim.plan import INVALID_PENALTY

__all__ = ["PPOConfig", "log_prob", "reward", "sample", "train"]


# -- the policy's distribution ---------------------------------------------------------------
def sample(logits: dict[str, Tensor], k: int, generator: torch.Generator,
           greedy: bool = False) -> dict[str, np.ndarray]:
    """``k`` choices per node and task, ``{task: int64 array (k, N)}``; with ``greedy``
    the most likely choice (``k`` identical rows)."""
    out = {}
    for t, z in logits.items():
        if greedy:
            a = z.argmax(1).expand(k, -1)
        else:
            p = torch.softmax(z.detach(), dim=1)
            a = torch.multinomial(p, k, replacement=True, generator=generator).T
        out[t] = a.numpy().copy()
    return out


def log_prob(logits: dict[str, Tensor], actions: dict[str, np.ndarray]) -> tuple[Tensor, Tensor]:
    """Log-probability per plan and node summed over tasks, (k, N); and the entropy per
    node summed over tasks, (N,)."""
    lp, ent = 0.0, 0.0
    for t, z in logits.items():
        logp = torch.log_softmax(z, dim=1)
        a = torch.as_tensor(actions[t])
        lp = lp + logp.gather(1, a.T).T
        p = logp.exp()
        ent = ent - (p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(1)
    return lp, ent


def reward(step_time: np.ndarray, valid: np.ndarray, reference: float) -> np.ndarray:
    """``−√(step time / reference)``, ``−√INVALID_PENALTY`` for an invalid plan (as if
    its step time were :data:`~graphopt.sim.plan.INVALID_PENALTY` references).

    >>> reward(np.array([4.0, 1.0]), np.array([True, False]), 1.0).tolist()
    [-2.0, -3.1622776601683795]
    """
    return -np.sqrt(np.where(valid, step_time / reference, INVALID_PENALTY))


# -- the training loop -----------------------------------------------------------------------
@dataclass
class _EnvRecord:
    best_time: float = float("inf")
    best: dict | None = None


def train(policy: torch.nn.Module, envs: list, cfg: PPOConfig, *, seed: int,
          evals: int | None = None, updates: int | None = None, seconds: float | None = None,
          checkpoint_dir: str | None = None, checkpoint_every: int = 50,
          run_config: dict | None = None, progress: bool = True,
          label: str = "go") -> dict:
    """Train ``policy`` on ``envs`` until ``evals`` simulations or ``seconds`` of this call,
    or until the run (resumed from ``checkpoint_dir`` or new) counts ``updates`` updates:
    the first bound reached; at least one must be set. ``policy`` is GO's network
    (:class:`graphopt.optim.learned.go.policy.GOPolicy`, or MCM's chiplet variant) and
    ``envs`` its environments (:class:`graphopt.optim.learned.go.env.GOEnv`, one graph
    each); the two methods that share this trainer own them.
    With ``cfg.anneal_lr`` the learning rate falls linearly to 0 over the ``updates`` (or
    ``evals``) bound, never by the clock unless ``seconds`` alone bounds the run, so that a
    run stopped early and resumed learns exactly as one that never stopped.

    Returns a dict: ``best`` (per env: ``(Plan, step time)``, None before a valid plan), ``history``
    (``[evals, seconds, best step time]`` per update of the first env), ``curve`` (batch
    means), ``log`` (one row per update), counts and whether it was interrupted.
    """
    if evals is None and updates is None and seconds is None:
        raise ValueError("train needs a bound: evals, updates or seconds")
    generator = seed_everything(seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    config = {"ppo": asdict(cfg), "policy": policy.config_dict(), "seed": seed,
              "envs": [f"{e.problem.graph.name}@{e.problem.cluster.name}" for e in envs],
              "tasks": [list(e.tasks) for e in envs], **(run_config or {})}
    state: dict = {"update": 0, "evals": 0, "seconds": 0.0, "history": [], "curve": [],
                   "log": [], "best": {}}
    if checkpoint_dir is not None:
        state = load_checkpoint(checkpoint_dir, config, {"policy": policy}, optimizer, generator,
                                fresh=state) or state
    resumed_from = state["update"]
    records = [_EnvRecord() for _ in envs]
    for i, rec in enumerate(records):
        saved = state["best"].get(str(i))
        if saved:
            rec.best_time, rec.best = saved["time"], saved["plan"]
    embedded: dict[int, tuple[Tensor, Tensor]] = {}

    def forward(i: int, env) -> dict[str, Tensor]:
        if cfg.tune == "all":
            return env.with_prior(policy(*env.inputs(), tasks=env.tasks))
        if i not in embedded:  # the frozen trunk: one pass per graph for the whole run
            with torch.no_grad():
                embedded[i] = policy.embed(*env.inputs())
        return env.with_prior(policy.decide(*embedded[i], env.problem.num_devices, env.tasks))

    # the evaluator owns this call's evals and seconds; updates count over the whole run.
    # make_evaluator: the rollouts' simulations run on the backend in use (a Ray pool)
    ev = make_evaluator(envs[0].problem, evals, seconds, default=LocalEvaluator)

    def done() -> bool:
        return ev.exhausted() or (updates is not None and state["update"] >= updates)

    def progress_fraction() -> float:
        # counts, never the clock, where a count bounds the run: a run stopped by --minutes
        # and resumed then anneals exactly as one that never stopped
        if updates is None and evals is None:
            return ev.fraction_spent()  # seconds alone bound this call
        return max(0.0 if updates is None else state["update"] / updates,
                   0.0 if evals is None else ev.evals / evals)

    def checkpoint() -> None:
        state["best"] = {str(i): {"time": r.best_time, "plan": r.best}
                         for i, r in enumerate(records) if r.best is not None}
        save_checkpoint(checkpoint_dir, config, {"policy": policy}, optimizer, generator, state)
        write_log(state["log"], f"{checkpoint_dir}/{LOG_FILE}")
        _plot(state, envs, f"{checkpoint_dir}/{CURVE_FILE}", label)

    interrupted, torn = False, False
    columns = (TextColumn(label), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
               TextColumn("{task.fields[info]}"), TimeElapsedColumn())
    total = evals if evals is not None else (updates if updates is not None else seconds)
    with Progress(*columns, disable=not progress, transient=True) as bar, stop_on_interrupt():
        task = bar.add_task("train", total=total, info="")
        try:
            while not done():
                torn, drawn = True, generator.get_state()  # torn until the bookkeeping
                i = state["update"] % len(envs)
                env, rec = envs[i], records[i]
                k = cfg.num_samples if ev.remaining is None else min(cfg.num_samples, ev.remaining)
                step_t0 = time.perf_counter()
                if cfg.anneal_lr:
                    optimizer.param_groups[0]["lr"] = cfg.lr * (1.0 - progress_fraction())

                # -- rollout: k whole-graph plans from one forward pass ---------------------
                logits = forward(i, env)
                actions = sample(logits, k, generator)
                # the env turns the choices into plans and prices them (GOEnv simulates
                # them; MCM's env repairs proposals first and prices their pipeline)
                place, prio, fuse, res, ref = env.rollout(ev, actions, logits)
                r = reward(res.step_time, res.valid, ref)
                ok = np.flatnonzero(res.valid)
                if len(ok) and res.step_time[ok].min() < rec.best_time:
                    j = int(ok[np.argmin(res.step_time[ok])])
                    rec.best_time = float(res.step_time[j])
                    rec.best = Plan(placement=place[j], priority=None if prio is None else prio[j],
                                    fusion=None if fuse is None else fuse[j]).to_dict()

                # -- PPO update: update_epochs steps on this batch -------------------------
                adv = torch.as_tensor((r - r.mean()) / (r.std() + 1e-8), dtype=torch.float32)
                old_lp = None
                stats = {"losses/loss": 0.0, "losses/entropy": 0.0, "losses/approx_kl": 0.0,
                         "losses/clipfrac": 0.0}
                for epoch in range(cfg.update_epochs if k > 1 else 0):
                    if epoch > 0:
                        logits = forward(i, env)
                    lp, ent = log_prob(logits, actions)
                    if old_lp is None:
                        old_lp = lp.detach()
                    log_ratio = lp - old_lp
                    ratio = log_ratio.exp()
                    pg = torch.max(-adv[:, None] * ratio,
                                   -adv[:, None] * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef))
                    loss = pg.mean() - cfg.ent_coef * ent.mean()
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                    with torch.no_grad():
                        stats = {"losses/loss": float(loss.detach()), "losses/entropy": float(ent.mean()),
                                 "losses/approx_kl": float(((ratio - 1) - log_ratio).mean()),
                                 "losses/clipfrac": float(((ratio - 1).abs() > cfg.clip_coef)
                                                          .float().mean())}

                # -- bookkeeping --------------------------------------------------------------
                step_s = time.perf_counter() - step_t0
                state["update"] += 1
                state["evals"] += len(r)
                state["seconds"] += step_s
                mean = float(res.step_time[ok].mean()) if len(ok) else None
                if i == 0:
                    state["history"].append([state["evals"], state["seconds"],
                                             rec.best_time if rec.best else None])
                    state["curve"].append([state["evals"], mean])
                state["log"].append({
                    "update": state["update"], "env": i, "evals": state["evals"],
                    "seconds": round(state["seconds"], 3),
                    "charts/mean_ratio": None if mean is None else mean / ref,
                    "charts/best_ratio": rec.best_time / ref if rec.best else None,
                    "charts/valid_fraction": float(res.valid.mean()),
                    "charts/learning_rate": optimizer.param_groups[0]["lr"],
                    "charts/plans_per_s": len(r) / max(step_s, 1e-9), **stats})
                bar.update(task, completed=ev.evals if evals is not None else (
                    state["update"] if updates is not None else ev.elapsed),
                    info=f"{env.problem.graph.name}: best {rec.best_time * 1e3:.2f} ms"
                    if rec.best else "")
                torn = False
                if checkpoint_dir and state["update"] % checkpoint_every == 0:
                    checkpoint()
        except BudgetExhausted:  # the seconds ran out, or Ctrl-C, before the batch
            generator.set_state(drawn)  # the update never happened: undo its sampling
            torn = False
        except KeyboardInterrupt:
            interrupted = True
        interrupted = interrupted or stop_requested()
    if checkpoint_dir is not None and not torn:
        checkpoint()
    return {"best": [(Plan.from_dict(r.best), r.best_time) if r.best is not None else None
                     for r in records],
            "history": state["history"], "curve": state["curve"], "log": state["log"],
            "updates": state["update"], "total_evals": state["evals"],
            "evals": ev.evals, "seconds": ev.elapsed, "resumed_from_update": resumed_from,
            "interrupted": interrupted}


def _plot(state: dict, envs: list, path: str, label: str) -> None:
    """Mean and best step time over the lower bound, per graph, against updates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for i, env in enumerate(envs[:12]):
        rows = [r for r in state["log"] if r["env"] == i and r["charts/mean_ratio"] is not None]
        if rows:
            line, = ax.plot([r["update"] for r in rows], [r["charts/mean_ratio"] for r in rows],
                            lw=0.8, alpha=0.6, label=env.problem.graph.name)
            ax.plot([r["update"] for r in rows], [r["charts/best_ratio"] for r in rows], lw=1.2,
                    color=line.get_color())
    ax.set_xlabel("PPO update")
    ax.set_ylabel("step time / lower bound")
    ax.set_yscale("log")
    ax.set_title(f"{label}: batch mean (thin) and best (thick)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
