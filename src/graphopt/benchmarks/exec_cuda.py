"""graphopt.exec on a GPU: placed training steps on CUDA devices, their numerics against
the unplaced program, and their measured step times.

With fewer GPUs than the plan has devices (the one-GPU machines this project is lent),
device ``d`` of a plan runs on GPU ``d % GPUs`` with a stream of its own: the engine's
ordering (one stream per device, a copy stream per link, events for every dependency
and for in-place writes after a send) is exercised as on separate GPUs, but transfers
are copies within one GPU and the devices share its compute, so the times say how
the streams overlap, not what two GPUs would give.

For each model (the zoo's ``-quick`` sizes; ``--size full``, its own) and each plan
(``single``, ``expert``, ``m-etf``, ``sa`` and random placements with random priorities, made for ``h100:2``):
``--steps`` training steps, then
- the loss of every step and every updated parameter against ``single`` on the GPU
  (bitwise equal, or the largest relative difference);
- ``single`` on the GPU against the CPU engine (different kernels: a relative
  difference, reported, for models without dropout, whose random numbers differ);
- the median step time over the steps after the first, host issue to last kernel;
- for ``single``, the simulator's step time on ``h100:1`` with the engine's dispatch
  cost per op measured on this GPU (a chain of 200 tiny additions: step time / ops),
  the only figure taken from this machine; the roofline is the H100 preset's.
``--deterministic`` turns on PyTorch's deterministic algorithms (and cuBLAS's fixed
workspace), which tells nondeterministic kernels (atomics) apart from ordering bugs.
One Chrome trace per model (``--trace-dir``) shows each device's ops as the GPU ran them.

Usage:  python bench/exec_cuda.py [--models rnnlm-2,...] [--steps 6] [--out FILE]
        [--trace-dir DIR] [--deterministic] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
import warnings
from pathlib import Path
import numpy as np
import torch
from graphopt.exec.api import PlacedProgram, StepResult, apply, save_trace, trace_source
from graphopt.exec.calibrate import _Chain
from graphopt.exec.program import compile_program
from graphopt.exec.runner import run_inprocess
from graphopt.hardware.presets import load_cluster
from graphopt.optim import Budget, optimize
from graphopt.hardware import Cluster
from graphopt.sim import Plan, Problem, simulate


MODELS = ("rnnlm-2", "gnmt-2", "transformer-xl-2", "inception-v3-b32", "wavenet-2x18", "bert-base")
METHODS = ("single", "expert", "m-etf", "sa")


def run_plan(traced, plan: Plan | None, devices: int, steps: int, seed: int = 0) -> dict:
    """``steps`` training steps of ``plan`` on ``devices`` devices laid over this
    machine's GPUs (as :class:`PlacedProgram` does with one GPU per device)."""
    prog = compile_program(traced, plan, devices)
    gpus = [torch.device("cuda", d % torch.cuda.device_count()) for d in range(devices)]
    values = {n: (d, v.clone() if isinstance(v, torch.Tensor) else v) for n, (d, v) in prog.feeds.items()}
    losses, times, last = [], [], None
    for step in range(steps):
        per_device = [[] for _ in range(devices)]
        outputs, table = run_inprocess(prog, seed * 1_000_003 + step, values, gpus, per_device)
        values = {n: (d, table[n]) for n, (d, _) in values.items()}
        losses.append(outputs[0].detach().cpu())
        events = [(kind, d, name, a, b) for d, evs in enumerate(per_device) for kind, name, a, b, _ in evs]
        step_ev = next(e for e in events if e[0] == "step")
        times.append(step_ev[4] - step_ev[3])
        last = StepResult(outputs, times[-1], events)
    state = {name: values[n][1].detach().cpu() for n, name in prog.state.items()}
    return {"losses": torch.stack(losses), "state": state, "times": times, "last": last,
            "transfers": len(prog.transfers)}


def differences(a: dict, b: dict) -> dict:
    """How far run ``a`` is from run ``b``: the largest relative difference of a step's
    loss, and of the state as one vector (so that a parameter still near zero, a fresh
    bias, does not turn noise into a large ratio)."""
    loss = float(((a["loss"] - b["loss"]).abs() / b["loss"].abs().clamp_min(1e-12)).max())
    keys = [k for k in b if k != "loss" and b[k].is_floating_point()]
    diff = sum(float((a[k].double() - b[k].double()).square().sum()) for k in keys) ** 0.5
    norm = sum(float(b[k].double().square().sum()) for k in keys) ** 0.5
    return {"loss_rel": loss, "state_rel": diff / max(norm, 1e-300)}


def bitwise(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _summary(p: dict) -> str:
    if "error" in p:
        return f"{p['method']} {p['error'][:80]}"
    return f"{p['method']} {_same(p)} {p['step_ms']:.1f} ms (single {p['single_ms']:.1f})"


def _same(d: dict) -> str:
    if not d:
        return "not run"
    return "bitwise" if d.get("bitwise") else f"loss {d['loss_rel']:.1e} state {d['state_rel']:.1e}"


def dispatch_per_op(ops: int = 200, steps: int = 10) -> float:
    """The engine's cost per op on this GPU: a chain of tiny additions, step time / ops."""
    with apply(_Chain(ops), (torch.zeros(1),), devices="cuda:1", training=False) as placed:
        return placed.measure(steps=steps, warmup=2)["median"] / ops


def run(models=MODELS, methods=METHODS, steps: int = 6, randoms: int = 3, budget: int = 300,
        seed: int = 0, trace_dir: str | None = None, size: str = "quick", out: str | None = None) -> dict:
    """Run the check; ``out`` gets the results so far after each model (JSON)."""
    torch.backends.cuda.matmul.allow_tf32 = False  # compare against the CPU in float32
    torch.backends.cudnn.allow_tf32 = False
    cluster = load_cluster("h100:2")
    dispatch = dispatch_per_op()
    one = load_cluster("h100:1")
    one = Cluster(f"h100:1+dispatch {dispatch * 1e6:.0f} us",
                  tuple(dataclasses.replace(d, dispatch_overhead=dispatch) for d in one.devices),
                  one.bandwidth, one.latency)
    print(f"engine dispatch on this GPU: {dispatch * 1e6:.1f} us per op", flush=True)
    rows = []
    for name in models:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = trace_source(f"zoo:{name}-quick" if size == "quick" else f"zoo:{name}")
        prob = Problem(traced.graph, cluster)
        off = np.zeros(prob.num_nodes)
        plans: dict[str, Plan] = {}
        for method in methods:
            plan, _ = optimize(prob, method, "placement", Budget(evals=budget), seed)
            plans[method] = plan.replace(fusion=off)
        rng = np.random.default_rng(seed)
        for r in range(randoms):
            plans[f"random-{r}"] = Plan(placement=rng.integers(0, 2, prob.num_nodes),
                                        priority=rng.random(prob.num_nodes))
        ref = run_plan(traced, None, 1, steps, seed)
        ref_flat = {"loss": ref["losses"], **ref["state"]}
        again = run_plan(traced, None, 1, steps, seed)  # the GPU's own nondeterminism
        again_flat = {"loss": again["losses"], **again["state"]}
        repeat = {"bitwise": bitwise(again_flat, ref_flat), **differences(again_flat, ref_flat)}
        cpu_losses, cpu_check = None, None
        if size == "quick":  # a full-size step takes seconds to minutes on a CPU
            with PlacedProgram(traced, None, "cpu:1", seed=seed) as cpu:
                cpu_losses = torch.stack([cpu().outputs[0].detach() for _ in range(steps)])
                cpu_check = differences(ref_flat, {"loss": cpu_losses, **cpu.state_dict()})
        single_sim = simulate(Problem(traced.graph, one), Plan(fusion=off)).step_time
        single_ms = statistics.median(ref["times"][1:]) * 1e3
        row = {"model": traced.graph.name, "ops": prob.num_nodes, "gpu_vs_cpu": cpu_check,
               "repeat": repeat,
               "losses": [ref["losses"].tolist(), None if cpu_losses is None else cpu_losses.tolist()],
               "single_ms": single_ms, "single_sim_ms": single_sim * 1e3,
               "single_error": single_sim * 1e3 / single_ms - 1, "plans": []}
        for method, plan in plans.items():
            try:
                res = run_plan(traced, plan, 2, steps, seed)
            except Exception as err:  # a failure is a finding: record it and go on
                row["plans"].append({"method": method, "error": f"{type(err).__name__}: {err}"})
                print(f"  {name} {method}: {type(err).__name__}: {err}", flush=True)
                continue
            flat = {"loss": res["losses"], **res["state"]}
            row["plans"].append({
                "method": method, "devices_used": int(len(np.unique(plan.placement))),
                "transfers": res["transfers"], "bitwise": bitwise(flat, ref_flat),
                **differences(flat, ref_flat),
                "step_ms": statistics.median(res["times"][1:]) * 1e3,
                "single_ms": single_ms})
            if trace_dir and method == "expert":
                Path(trace_dir).mkdir(parents=True, exist_ok=True)
                save_trace(res["last"], Path(trace_dir) / f"{name}-expert.json", 2)
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        if out:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(json.dumps(_result(rows, dispatch, steps, budget, seed, size), indent=1))
        print(f"{name}: single {single_ms:.1f} ms, simulated {single_sim * 1e3:.1f} ms; "
              f"again {_same(row['repeat'])}, on the CPU {_same(row['gpu_vs_cpu'] or {})}; "
              + "; ".join(_summary(p) for p in row["plans"]) + f" ({row['seconds']:.0f} s)", flush=True)
    return _result(rows, dispatch, steps, budget, seed, size)


def _result(rows: list[dict], dispatch: float, steps: int, budget: int, seed: int, size: str) -> dict:
    return {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "size": size,
            "dispatch_us": dispatch * 1e6, "deterministic": torch.are_deterministic_algorithms_enabled(),
            "torch": torch.__version__, "steps": steps, "budget": budget, "seed": seed, "rows": rows}


def to_markdown(res: dict) -> str:
    """The run as a table: per model, the repeat and the CPU check, then each plan."""
    det = ", deterministic algorithms" if res["deterministic"] else ""
    lines = [f"{res['gpu']} ({res['gpus']} GPU, torch {res['torch']}{det}); {res['steps']} training "
             f"steps per plan; a plan's 2 devices are 2 streams of one GPU. Engine dispatch "
             f"{res['dispatch_us']:.1f} us per op (chain of tiny additions).", "",
             "| model | ops | single: measured / simulated (h100:1 + dispatch) | single again | "
             "single vs CPU engine (loss, state) | 2-device plans equal to single | "
             "plan step times, ms |",
             "|---|---:|---|---|---|---|---|"]
    for row in res["rows"]:
        plans = [p for p in row["plans"] if "error" not in p]
        equal = sum(p["bitwise"] for p in plans)
        worst = max((p["state_rel"] for p in plans), default=0.0)
        eq = f"{equal}/{len(plans)} bitwise" + ("" if equal == len(plans) else
                                                 f" (state within {worst:.0e})")
        eq += "".join(f"; {p['method']} failed" for p in row["plans"] if "error" in p)
        times = ", ".join(f"{p['method']} {p['step_ms']:.1f}" for p in plans)
        rep = row["repeat"]
        again = "bitwise" if rep["bitwise"] else f"loss {rep['loss_rel']:.0e}, state {rep['state_rel']:.0e}"
        cpu = row["gpu_vs_cpu"]
        cpu = "not run" if cpu is None else f"{cpu['loss_rel']:.0e}, {cpu['state_rel']:.0e}"
        lines.append(f"| {row['model']} | {row['ops']} | {row['single_ms']:.1f} / {row['single_sim_ms']:.1f} "
                     f"ms ({row['single_error']:+.0%}) | {again} | {cpu} | {eq} | "
                     f"{times} |")
    return "\n".join(lines)
