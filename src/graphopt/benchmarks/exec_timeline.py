"""Where a placed step loses time against the simulator: each op's real start beside its
simulated start, and each transfer's arrival delay, on 2 CPU workers.

For one model at one of ``bench/sim_vs_real.py``'s sizes (``--size``, CPU size by
default) and each method's plan (searched on
:func:`graphopt.exec.calibrate.engine_problem`, as that benchmark does), the plans run
in turns for ``--steps`` steps after a warm-up. Per plan and device:
- drift: the median over steps of (real start - simulated start) of the device's ops,
  read at each eighth of its ops in real order, in ms;
- arrival delay: from a value's producer ending to its arrival being seen on the other
  worker, real (p50, p90 over steps and transfers) and simulated, in ms; and the same
  for the transfers the engine posts only after an in-place write (``Transfer.after``);
- busy: the sum of the device's op times, real (median over steps) and simulated, in ms;
- falls behind: per device, the op at which the drift grows most from the op before it
  (in real order), by how much, and for each of its inputs from the other device when
  it ended there and arrived here, real and simulated (ms from the step's start);
- simulated with real op times: the plan simulated again with every op's time replaced
  by its mean over this plan's measured steps. Where that lands near the measured step,
  the simulator's schedule and transfers are right and its miss is in the op times
  (ops that run slower in this plan than in the profile); where it does not, the miss
  is in what happens between ops.

Usage:  .venv/bin/python bench/exec_timeline.py [--model gnmt-2] [--methods single,go,metis,expert]
        [--steps 9] [--size cpu] [--out runs/bench/exec_timeline.json]
"""

from __future__ import annotations

import statistics
import warnings
import numpy as np
from graphopt.exec.api import PlacedProgram
from graphopt.exec.calibrate import calibrate, engine_problem
from graphopt.exec.workers import CPUWorkers
from graphopt.optim import Budget, optimize
from graphopt.sim import ensure_compiled, simulate
from graphopt.benchmarks.sim_vs_real import traced_model


def _ms(xs: list[float], q: float) -> float | None:
    return round(float(np.quantile(xs, q)) * 1e3, 3) if xs else None


def analyse(traced, prob, plan, placed: PlacedProgram, runs) -> dict:
    """Drift per device and arrival delays of one plan's measured steps."""
    tl = simulate(prob, plan, timeline=True).timeline
    sim_start = dict(zip(tl.kernel.tolist(), tl.start.tolist()))
    sim_end = dict(zip(tl.kernel.tolist(), tl.end.tolist()))
    sim_arrival = {(k, d): e for k, d, e in zip(tl.transfer_kernel.tolist(), tl.transfer_dst.tolist(),
                                                tl.transfer_end.tolist())}
    node = {name: traced.graph.index.get(traced.ir_names.get(name, "")) for name in traced.ir_names}
    starts: dict[tuple[int, str], list[float]] = {}
    real, gated_real = [], []
    gated = {t.name for t in placed.program.transfers if t.after}
    for r in runs:
        t0 = min(e[3] for e in r.events if e[0] in ("op", "step"))
        ends = {name: end for kind, _, name, _, end in r.events if kind == "op"}
        for kind, d, name, start, _ in r.events:
            if kind == "op":
                starts.setdefault((d, name), []).append(start - t0)
            elif kind == "recv" and name in ends:
                (gated_real if name in gated else real).append(start - ends[name])
    durations: dict[int, list[float]] = {}
    for r in runs:
        for kind, _, name, start, end in r.events:
            if kind == "op" and node.get(name) is not None:
                durations.setdefault(node[name], []).append(end - start)
    busy = {dev: [_ms([sum(e - s for kind, d, _, s, e in r.events if kind == "op" and d == dev)
                       for r in runs], 0.5),
                  round(float((tl.end - tl.start)[tl.device == dev].sum()) * 1e3, 3)]
            for dev in range(placed.devices)}
    real_times = prob.costs.time.copy()
    for n, v in durations.items():
        real_times[n, :] = statistics.fmean(v)
    with_real_ops = simulate(prob.with_op_times(real_times), plan).step_time * 1e3
    drift, behind = {}, {}
    for dev in range(placed.devices):
        ops = sorted((statistics.median(v), name) for (d, name), v in starts.items() if d == dev
                     and node.get(name) in sim_start)
        deltas = [(t - sim_start[node[name]]) * 1e3 for t, name in ops]
        drift[dev] = [round(deltas[min(len(deltas) - 1, i * len(deltas) // 8)], 1)
                      for i in range(9)] if deltas else []
        if len(deltas) > 1:
            i = max(range(1, len(deltas)), key=lambda j: deltas[j] - deltas[j - 1])
            behind[dev] = _falls_behind(prob, plan, ops[i][1], deltas[i] - deltas[i - 1], node,
                                        runs, sim_end, sim_arrival, dev)
    sim = [sim_arrival[(node[t.name], t.dst)] - sim_end[node[t.name]] for t in placed.program.transfers
           if (node.get(t.name), t.dst) in sim_arrival]
    return {"drift_ms": drift, "falls_behind": behind, "busy_ms": busy,
            "simulated_with_real_op_times_ms": round(with_real_ops, 3),
            "transfers": len(placed.program.transfers), "gated": len(gated),
            "arrival_ms": {"real": [_ms(real, 0.5), _ms(real, 0.9)], "sim": [_ms(sim, 0.5), _ms(sim, 0.9)],
                           "real_after_in_place_write": [_ms(gated_real, 0.5), _ms(gated_real, 0.9)]}}


def _falls_behind(prob, plan, name: str, jump: float, node: dict, runs, sim_end: dict,
                  sim_arrival: dict, dev: int) -> dict:
    """The op ``name`` on ``dev`` where the drift grows most, and its inputs from other
    devices: their producers' end and their arrival here, real (median over ``runs``)
    and simulated, in ms from the step's start."""
    k = node[name]
    ir = {i: n for n, i in node.items() if i is not None}
    inputs = []
    for p in prob.pred_idx[prob.pred_ptr[k]:prob.pred_ptr[k + 1]].tolist():
        if plan.placement[p] == dev or p not in ir:
            continue
        ends, arrivals = [], []
        for r in runs:
            t0 = min(e[3] for e in r.events if e[0] in ("op", "step"))
            ends += [e - t0 for kind, _, n, _, e in r.events if kind == "op" and n == ir[p]]
            arrivals += [s - t0 for kind, d, n, s, _ in r.events
                         if kind == "recv" and n == ir[p] and d == dev]
        inputs.append({"input": ir[p], "real_end": _ms(ends, 0.5), "sim_end": round(sim_end[p] * 1e3, 3),
                       "real_arrival": _ms(arrivals, 0.5),
                       "sim_arrival": round(sim_arrival.get((p, dev), float("nan")) * 1e3, 3)})
    return {"op": name, "jump_ms": round(jump, 1), "remote_inputs": inputs}


def run(model: str, methods: tuple[str, ...], steps: int, budget: int = 500, seed: int = 0,
        size: str = "cpu") -> dict:
    ensure_compiled()
    cluster = calibrate(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = traced_model(model, size)
    rows = []
    with CPUWorkers(2) as pool:
        prob = engine_problem(traced, cluster, pool)
        plans = [optimize(prob, m, "placement", Budget(evals=budget), seed)[0] for m in methods]
        placed = [PlacedProgram(traced, p, "cpu:2", pool=pool, seed=seed) for p in plans]
        for p in placed:
            p()
        runs: list[list] = [[] for _ in placed]
        for _ in range(steps):  # in turns, as measure_plans does, keeping every step's events
            for i, p in enumerate(placed):
                runs[i].append(p())
        for method, plan, p, rs in zip(methods, plans, placed, runs):
            rows.append({"method": method, "measured_ms": statistics.median(r.seconds for r in rs) * 1e3,
                         "simulated_ms": simulate(prob, plan).step_time * 1e3,
                         **analyse(traced, prob, plan, p, rs)})
            print(rows[-1], flush=True)
    return {"model": f"{model}-{size}", "steps": steps, "budget": budget, "seed": seed, "rows": rows}
