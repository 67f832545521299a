"""Peak memory per device, measured and simulated, for plans run by ``graphopt.exec``.

For each model (zoo training steps at their ``-quick`` sizes, and ``transformers``
models built from small configurations, :mod:`graphopt.zoo.hf`) and each plan
(``single`` on one device; ``expert`` and ``m-etf`` on two, searched on the ``cpu``
preset), the plan runs on worker processes (one per device, the same pools for every
row), one warm-up step, then ``repeats`` steps each measuring every device's peak
(:meth:`graphopt.exec.api.PlacedProgram.peak_memory`: the bytes the worker held at the
step's start, its state, inputs and receive buffers, plus the highest running total of
the CPU allocator's events in the step, from PyTorch's profiler memory records); the
median of those steps is the measured peak. The simulated peak is
:func:`graphopt.exec.api.simulated_peak_memory` (no fusion; on two workers every
transfer's tensors held all step, as the engine holds them, with the copies its senders
pack strided values and values of several tensors into). Two ablations on the same
plans: the simulator's own transfer rule (freed when the transfer and the last reader are
done), and that rule with views costing their base nothing beyond their own readers
(the simulator before views kept their base alive). Nothing is fitted. The error of a
device is ``simulated / measured - 1``; the summary gives the median absolute error over
every device of every plan.
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import time
import warnings

import numpy as np

from graphopt.benchmarks import say
from graphopt.exec.api import PlacedProgram, simulated_peak_memory, trace_source
from graphopt.exec.workers import CPUWorkers
from graphopt.hardware import load_cluster
from graphopt.optim import Budget, optimize
from graphopt.sim import Problem, simulate

__all__ = ["METHODS", "MODELS", "run", "summarize", "to_markdown"]

#: Zoo training steps at CPU size, and models nobody on the team wrote (``transformers``'
#: BERT and GPT-2, random weights, small configurations): a step of 10-200 ms each.
MODELS = (
    "zoo:rnnlm-2-quick",
    "zoo:gnmt-2-quick",
    "zoo:transformer-xl-2-quick",
    "zoo:bert-base-quick",
    "zoo:wavenet-2x18-quick",
    "hf:bert:num_hidden_layers=2,hidden_size=64,num_attention_heads=2,intermediate_size=128,"
    "vocab_size=2000,seq=32,batch=4",
    "hf:gpt2:n_layer=2,n_embd=64,n_head=2,vocab_size=2000,seq=32,batch=4",
)
#: Each method's plan and the devices it runs on.
METHODS = {"single": 1, "expert": 2, "m-etf": 2}


def _without_views(prob: Problem) -> Problem:
    """``prob`` as the simulator priced it before a view kept its base alive (ablation)."""
    other = copy.copy(prob)
    other.alias = np.full(prob.num_nodes, -1, np.int64)
    return other


def run(models=MODELS, methods=tuple(METHODS), repeats: int = 3, budget: int = 50,
        seed: int = 0) -> dict:
    """Measure and simulate every (model, method); returns the rows and the summary."""
    rows = []
    with contextlib.ExitStack() as stack:
        pools = {c: stack.enter_context(CPUWorkers(c)) for c in sorted({METHODS[m] for m in methods})}
        for spec in models:
            t0 = time.perf_counter()
            load = os.getloadavg()[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = trace_source(spec)
            plans = []
            for method in methods:
                count = METHODS[method]
                devices = f"cpu:{count}"
                prob = Problem(traced.graph, load_cluster(devices))
                plan = optimize(prob, method, "placement", Budget(evals=budget), seed)[0]
                with PlacedProgram(traced, plan, devices, seed=seed, workers=True,
                                   pool=pools[count]) as placed:
                    placed()  # warm-up: the op cache, the allocator
                    steps = [placed.peak_memory() for _ in range(repeats)]
                measured = [statistics.median(s[d] for s in steps) for d in range(count)]
                simulated = simulated_peak_memory(prob, plan, devices, traced)
                unfused = plan.replace(fusion=np.zeros(prob.num_nodes))
                own = simulate(prob, unfused).peak_memory
                before = simulate(_without_views(prob), unfused).peak_memory
                plans.append({"method": method, "devices": count,
                              "measured": [float(x) for x in measured],
                              "measured_spread": [[min(s[d] for s in steps), max(s[d] for s in steps)]
                                                  for d in range(count)],
                              "simulated": simulated.tolist(),
                              "simulated_own_transfer_rule": own.tolist(),
                              "simulated_without_views": before.tolist(),
                              "error": [float(s / m - 1) for s, m in zip(simulated, measured)]})
            rows.append({"model": spec, "ops": traced.graph.num_nodes, "plans": plans,
                         "load_before": load, "seconds": time.perf_counter() - t0})
            say(f"{spec.split(':')[1]}: " + ", ".join(
                f"{p['method']} " + "/".join(f"{e * 100:+.0f}%" for e in p["error"]) for p in plans))
    return {"rows": rows, "repeats": repeats, "budget": budget, "seed": seed,
            "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict:
    """Median absolute error over every device of every plan: all, one device, two; and
    the two ablations."""
    def err(key: str, devices: set[int]) -> float | None:
        xs = [abs(s / m - 1) for r in rows for p in r["plans"] if p["devices"] in devices
              for s, m in zip(p[key], p["measured"]) if m > 0]
        return statistics.median(xs) if xs else None

    return {"median_abs_error": err("simulated", {1, 2}),
            "median_abs_error_one_device": err("simulated", {1}),
            "median_abs_error_two_devices": err("simulated", {2}),
            "median_abs_error_own_transfer_rule": err("simulated_own_transfer_rule", {1, 2}),
            "median_abs_error_without_views": err("simulated_without_views", {1, 2}),
            "worst_abs_error": max(abs(e) for r in rows for p in r["plans"] for e in p["error"])}


def to_markdown(res: dict) -> str:
    """The results as Markdown: one line per plan, then the summary."""
    lines = ["| model | ops | plan | measured MiB per device | simulated MiB | error | simulator's "
             "own transfer rule | before views kept their base | load |",
             "|---|---|---|---|---|---|---|---|---|"]

    def mib(xs: list[float]) -> str:
        return " / ".join(f"{x / 2**20:.2f}" for x in xs)

    def errs(p: dict, key: str) -> str:
        return " / ".join(f"{(s / m - 1) * 100:+.0f}%" for s, m in zip(p[key], p["measured"]))

    for r in res["rows"]:
        name = r["model"] if len(r["model"]) < 30 else r["model"].split(",")[0] + ",..."
        for p in r["plans"]:
            lines.append(f"| {name} | {r['ops']} | {p['method']} | {mib(p['measured'])} | "
                         f"{mib(p['simulated'])} | {errs(p, 'simulated')} | "
                         f"{errs(p, 'simulated_own_transfer_rule')} | "
                         f"{errs(p, 'simulated_without_views')} | {r['load_before']:.2f} |")
    s = res["summary"]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    lines += ["", f"Median absolute error over every device of every plan: "
                  f"**{pct(s['median_abs_error'])}** (target <= 10%; one device "
                  f"{pct(s['median_abs_error_one_device'])}, two "
                  f"{pct(s['median_abs_error_two_devices'])}; worst {pct(s['worst_abs_error'])}). "
                  f"With the simulator's own transfer rule: {pct(s['median_abs_error_own_transfer_rule'])}; "
                  f"before views kept their base alive as well: "
                  f"{pct(s['median_abs_error_without_views'])}. Measured: the median of "
                  f"{res['repeats']} steps after a warm-up; plans from {res['budget']} "
                  f"evaluations, seed {res['seed']}."]
    return "\n".join(lines)
