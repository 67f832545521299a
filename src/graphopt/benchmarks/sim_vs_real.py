"""The simulator against real execution: plans of zoo models run on this machine's CPU
devices by graphopt.exec, beside the simulator's prediction on the calibrated cluster.

For each model (the zoo's ``-quick`` sizes, one training step a few tens of ms on a
core) and each method's plan on 2 devices:
- measured step time: the median over ``--steps`` steps after one warm-up, the plans of
  a model in turns, a step each (:func:`graphopt.exec.api.measure_plans`), on 2 worker
  processes pinned to their cores (one pool for the whole run);
- simulated step time: the calibrated cluster (``graphopt calibrate``: latency of a
  device change through the engine, bandwidth by ping-pong, the engine's per-op
  dispatch, transfers' host work) with every op's time measured on one worker as the
  engine runs it (a profile, by op signature), the model's own shared slowdown (its
  single-device program on both workers at once against one alone) and wake cost (its
  ops' extra time after a worker waits; the table's last line gives the errors and tau
  without it, on the same plans and measurements), and no fusion, in
  the searches as in the prediction, as the engine runs op by op
  (:func:`graphopt.exec.calibrate.engine_problem`). Nothing is fitted to the plans
  reported here.
Per model: Kendall tau between the simulated and the measured order of the plans,
and the speed-up of each plan over ``single``, measured and simulated. The one-device
error is ``single``'s (one worker runs it all); the two-device errors are the others'.

Usage:  .venv/bin/python bench/sim_vs_real.py [--size quick|cpu] [--models rnnlm-2,...]
        [--steps 30] [--budget 500] [--out FILE] [--docs docs/benchmarks.md]
"""

from __future__ import annotations

import platform
import statistics
import time
import warnings
import numpy as np
from scipy.stats import kendalltau
from graphopt.exec.api import PlacedProgram, measure_plans, trace_source
from graphopt.exec.calibrate import calibrate, engine_problem
from graphopt.exec.workers import CPUWorkers
from graphopt.optim import Budget, optimize
from graphopt.sim import ensure_compiled, simulate


MODELS = ("rnnlm-2", "gnmt-2", "transformer-xl-2", "inception-v3-b32", "wavenet-2x18", "bert-base")
#: ``--size cpu``: larger than the zoo's quick sizes, so that ops take about a millisecond
#: rather than tens of microseconds (a step of 0.1-0.5 s on a core).
CPU_SIZES = {
    "rnnlm": {"hidden": 512, "vocab": 2000, "seq_len": 10, "batch": 32, "dropout": 0.0},
    "gnmt": {"hidden": 256, "vocab": 2000, "src_len": 8, "tgt_len": 8, "batch": 16},
    "transformer_xl": {"d_model": 256, "heads": 4, "d_head": 64, "d_inner": 512, "vocab": 2000,
                       "seg_len": 32, "mem_len": 32, "batch": 8},
    "bert": {"layers": 2, "d_model": 256, "heads": 4, "d_inner": 512, "vocab": 2000, "seq_len": 64,
             "batch": 8},
    "wavenet": {"layers": 3, "residual": 32, "dilation_channels": 32, "skip": 64, "classes": 64,
                "length": 2048, "batch": 4},
    # the quick size's ops already take about a millisecond (a step of about 0.15 s)
    "inception_v3": {"image_size": 75, "batch": 2, "classes": 10},
}
METHODS = ("single", "expert", "metis", "m-etf", "sa", "go")


def traced_model(name: str, size: str):
    """The training step of zoo entry ``name`` at ``size`` (``quick`` or ``cpu``)."""
    from graphopt.frontends.torch import trace_program
    from graphopt.zoo import get_entry

    if size == "quick":
        return trace_source(f"zoo:{name}-quick")
    entry = get_entry(name)
    entry = entry.with_config(f"{name}-cpu", **CPU_SIZES[entry.family])
    model, inputs = entry.make()
    return trace_program(model, inputs, training=True, name=entry.name)


def run(models=MODELS, methods=METHODS, steps: int = 30, budget: int = 500, seed: int = 0,
        size: str = "quick") -> dict:
    ensure_compiled()
    cluster = calibrate(2)
    cal = cluster.calibration
    rows = []
    with CPUWorkers(2) as pool:
        for name in models:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                traced = traced_model(name, size)
            prob = engine_problem(traced, cluster, pool)
            slowdown = prob.cluster.devices[0].shared_slowdown
            found = [optimize(prob, m, "placement", Budget(evals=budget), seed)[0] for m in methods]
            placed = [PlacedProgram(traced, p, "cpu:2", pool=pool, seed=seed) for p in found]
            timings = measure_plans(placed, steps=steps)
            for p in placed:
                p.close()
            plans = []
            still = prob.with_wake_cost(())  # what the simulator predicts without waking
            for method, plan, timing in zip(methods, found, timings):
                sim = simulate(prob, plan).step_time
                plans.append({"method": method, "simulated": sim, "measured": timing["median"],
                              "simulated_without_wake": simulate(still, plan).step_time,
                              "spread": [timing["min"], timing["max"]], "times": timing["times"],
                              "error": sim / timing["median"] - 1,
                              "devices_used": int(len(np.unique(plan.placement)))})
            single = next(p for p in plans if p["method"] == "single")
            for p in plans:
                p["speedup_measured"] = single["measured"] / p["measured"]
                p["speedup_simulated"] = single["simulated"] / p["simulated"]
            tau, tau_still = (kendalltau([p[k] for p in plans], [p["measured"] for p in plans]).statistic
                              for k in ("simulated", "simulated_without_wake"))
            rows.append({"model": f"{name}-{size}", "ops": traced.graph.num_nodes, "plans": plans,
                         "shared_slowdown": slowdown,
                         "wake_cost_us": [[i * 1e6, c * 1e6] for i, c in prob.cluster.devices[0].wake_cost],
                         "engine_us_per_op": prob.cluster.devices[0].dispatch_overhead * 1e6,
                         "kendall_tau": None if np.isnan(tau) else float(tau),
                         "kendall_tau_without_wake": None if np.isnan(tau_still) else float(tau_still),
                         "seconds": time.perf_counter() - t0})
            print(f"{name}: tau {tau:.2f}, " + ", ".join(
                f"{p['method']} {p['measured'] * 1e3:.1f}/{p['simulated'] * 1e3:.1f} ms" for p in plans),
                flush=True)
    return {"calibration": {"latency_us": cal.latency * 1e6, "bandwidth_gbps": cal.bandwidth / 1e9,
                            "dispatch_us": cal.dispatch * 1e6,
                            "transfer_cpu_ns_per_byte": cal.transfer_cpu * 1e9,
                            "transfer_cpu_us_per_message": cal.transfer_overhead * 1e6,
                            "shared_slowdown": cal.shared_slowdown,
                            "matmul_gflops": cal.matmul_flops / 1e9},
            "rows": rows, "steps": steps, "budget": budget, "seed": seed, "size": size,
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
            "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict:
    one = [abs(p["error"]) for r in rows for p in r["plans"] if p["devices_used"] == 1]
    two = [abs(p["error"]) for r in rows for p in r["plans"] if p["devices_used"] > 1]
    taus = [r["kendall_tau"] for r in rows if r["kendall_tau"] is not None]
    still = [r["kendall_tau_without_wake"] for r in rows if r["kendall_tau_without_wake"] is not None]
    two_still = [abs(p["simulated_without_wake"] / p["measured"] - 1)
                 for r in rows for p in r["plans"] if p["devices_used"] > 1]
    wrong = []  # pairs the simulator calls >= 10% apart that measure the other way round
    apart = right = 0  # pairs measured >= 5% apart, and those the simulator orders the same way
    for r in rows:
        for a in r["plans"]:
            for b in r["plans"]:
                if a["simulated"] * 1.1 <= b["simulated"] and a["measured"] >= b["measured"]:
                    wrong.append(f"{r['model']}: {a['method']} vs {b['method']}")
                if a["measured"] * 1.05 <= b["measured"]:
                    apart += 1
                    right += a["simulated"] < b["simulated"]
    return {"median_abs_error_one_device": statistics.median(one) if one else None,
            "median_abs_error_two_devices": statistics.median(two) if two else None,
            "mean_kendall_tau": statistics.mean(taus) if taus else None,
            "mean_kendall_tau_without_wake": statistics.mean(still) if still else None,
            "median_abs_error_two_devices_without_wake": statistics.median(two_still) if two_still else None,
            "inverted_pairs": wrong, "pairs_measured_5pct_apart": apart,
            "of_which_simulated_in_order": right}


def to_markdown(res: dict) -> str:
    s, c = res["summary"], res["calibration"]
    size = "" if res.get("size", "quick") == "quick" else f" --size {res['size']}"
    lines = [
        f"Measured by `.venv/bin/python bench/sim_vs_real.py{size}` on " + res["machine"] + ": 2 worker "
        f"processes, one core each; {res['steps']} timed steps after a warm-up, the plans of a "
        f"model in turns; plans from "
        f"{res['budget']} evaluations, seed {res['seed']}. Calibration: link latency "
        f"{c['latency_us']:.0f} us, bandwidth {c['bandwidth_gbps']:.2f} GB/s, dispatch "
        f"{c['dispatch_us']:.1f} us per op (a chain of tiny ops; each model is priced with its "
        f"own, below), transfers' host work "
        f"{c.get('transfer_cpu_ns_per_byte', 0):.2f} ns per byte"
        + (f" and {c['transfer_cpu_us_per_message']:.1f} us per message"
           if "transfer_cpu_us_per_message" in c else "") + " at each end, shared slowdown "
        "and wake cost per model (below).",
        "",
        "| model | ops | method | measured ms | simulated ms | error | speed-up measured | "
        "speed-up simulated |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        for p in r["plans"]:
            lines.append(f"| {r['model']} | {r['ops']} | {p['method']} | {p['measured'] * 1e3:.1f} | "
                         f"{p['simulated'] * 1e3:.1f} | {p['error'] * 100:+.0f}% | "
                         f"{p['speedup_measured']:.2f}x | {p['speedup_simulated']:.2f}x |")
    lines += ["", "| model | Kendall tau | shared slowdown | engine us per op | wake cost: us after an idle "
              "of us |", "|---|---|---|---|---|"]
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x * 100:.0f}%"

    lines += [f"| {r['model']} | {'n/a' if r['kendall_tau'] is None else round(r['kendall_tau'], 2)} | "
              f"{r['shared_slowdown']:.3f} | "
              + (f"{r['engine_us_per_op']:.2f} |" if "engine_us_per_op" in r else "- |")
              + (f" {', '.join(f'{c:.0f} after {i:.0f}' for i, c in r['wake_cost_us'])} |"
                 if r.get("wake_cost_us") else " - |")
              for r in res["rows"]]
    lines += ["",
              f"Median absolute error: one device {fmt(s['median_abs_error_one_device'])} "
              f"(target <= 10%), two devices {fmt(s['median_abs_error_two_devices'])} (target <= 15%). "
              f"Mean Kendall tau {s['mean_kendall_tau']:.2f} (target >= 0.8). Pairs the simulator "
              f"calls at least 10% apart that measure the other way: {len(s['inverted_pairs'])}. "
              f"Of the {s['pairs_measured_5pct_apart']} pairs of plans of a model measured at least 5% "
              f"apart, the simulator orders {s['of_which_simulated_in_order']} the same way. "
              f"Without the wake cost, on the same plans and measurements: two devices "
              f"{fmt(s['median_abs_error_two_devices_without_wake'])}, mean Kendall tau "
              f"{s['mean_kendall_tau_without_wake']:.2f}."]
    return "\n".join(lines)
