"""Simulator speed: evaluations per second of ``simulate`` and ``simulate_batch`` on a
layered graph and a zoo graph, against a pure-Python event simulator of the kind earlier
placement work used and, where given, an earlier engine, side by side in one run
(``bench/sim_speed.py`` says how it is measured)."""

from __future__ import annotations

import heapq
import os
import platform
import time

import numba
import numpy as np

from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.sim import Plan, Problem, ensure_compiled, simulate, simulate_batch
from graphopt.sim.problem import _plan_arrays

__all__ = ["markdown", "per_call", "python_simulate", "run"]


def python_simulate(prob: Problem, place: np.ndarray) -> tuple[float, np.ndarray]:
    """Reference event simulator in plain Python (no fusion, FIFO by readiness)."""
    g, n, D = prob.graph, prob.num_nodes, prob.num_devices
    dur = prob.costs.time[np.arange(n), place].tolist()
    dev = place.tolist()
    preds = [g.predecessors(i).tolist() for i in range(n)]
    sp = prob.succ_ptr
    succs = [list(zip(g.successors(i).tolist(), prob.succ_bytes[sp[i]:sp[i + 1]].tolist()))
             for i in range(n)]
    out_b, tmp_b = prob.out_bytes.tolist(), prob.temp_bytes.tolist()
    bw, lat = prob.bandwidth.tolist(), prob.latency.tolist()
    pending = [len(p) for p in preds]
    ready = [[] for _ in range(D)]
    head = [0] * D
    busy = [False] * D
    link_q: dict[tuple[int, int], list] = {}
    link_busy: dict[tuple[int, int], bool] = {}
    out_ref = [0] * n
    recv_ref: dict[tuple[int, int], int] = {}
    recv_bytes: dict[tuple[int, int], float] = {}
    mem, peak = [0.0] * D, [0.0] * D
    events: list = []
    for i in range(n):
        if pending[i] == 0:
            ready[dev[i]].append(i)
    t, step = 0.0, 0.0
    dirty_d, dirty_l = set(range(D)), set()
    while True:
        for d in sorted(dirty_d):
            if not busy[d] and head[d] < len(ready[d]):
                k = ready[d][head[d]]
                head[d] += 1
                busy[d] = True
                mem[d] += out_b[k] + tmp_b[k]
                peak[d] = max(peak[d], mem[d])
                heapq.heappush(events, (t + dur[k], 0, k))
        for li in sorted(dirty_l):
            q = link_q.get(li)
            if not link_busy.get(li) and q:
                k, b, nbytes, _ = q.pop(0)
                link_busy[li] = True
                mem[b] += nbytes
                peak[b] = max(peak[b], mem[b])
                heapq.heappush(events, (t + lat[li[0]][b] + nbytes / bw[li[0]][b], 1, (k, b)))
        dirty_d, dirty_l = set(), set()
        if not events:
            break
        t = events[0][0]
        while events and events[0][0] == t:
            _, typ, x = heapq.heappop(events)
            step = t
            if typ == 0:
                k, d = x, dev[x]
                busy[d] = False
                mem[d] -= tmp_b[k]
                dirty_d.add(d)
                for p in preds[k]:
                    if dev[p] == d:
                        out_ref[p] -= 1
                        if out_ref[p] == 0:
                            mem[d] -= out_b[p]
                    else:
                        recv_ref[p, d] -= 1
                        if recv_ref[p, d] == 0:
                            mem[d] -= recv_bytes[p, d]
                nref, remote = 0, {}
                for c, nbytes in succs[k]:
                    if dev[c] == d:
                        nref += 1
                        pending[c] -= 1
                        if pending[c] == 0:
                            ready[d].append(c)
                    else:
                        remote[dev[c]] = max(remote.get(dev[c], -1.0), nbytes)
                        recv_ref[k, dev[c]] = recv_ref.get((k, dev[c]), 0) + 1
                for b in sorted(remote):
                    nref += 1
                    recv_bytes[k, b] = remote[b]
                    link_q.setdefault((d, b), []).append((k, b, remote[b], t))
                    dirty_l.add((d, b))
                out_ref[k] = nref
                if nref == 0:
                    mem[d] -= out_b[k]
            else:
                k, b = x
                a = dev[k]
                link_busy[a, b] = False
                dirty_l.add((a, b))
                out_ref[k] -= 1
                if out_ref[k] == 0:
                    mem[a] -= out_b[k]
                for c, _ in succs[k]:
                    if dev[c] == b:
                        pending[c] -= 1
                        if pending[c] == 0:
                            ready[b].append(c)
                dirty_d.add(b)
    for i in range(n):
        peak[dev[i]] += prob.persistent[i]
    return step, np.array(peak)


def per_call(fn, seconds: float, clock=time.perf_counter) -> float:
    """Median seconds per call of ``fn`` over about ``seconds`` (after a warm-up call),
    timed by ``clock``."""
    fn()
    times = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop or len(times) < 3:
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return float(np.median(times))


def _batch(prob: Problem, rng: np.random.Generator, size: int = 64) -> np.ndarray:
    """``size`` placements: half contiguous, half random."""
    n, D = prob.num_nodes, prob.num_devices
    batch = rng.integers(0, D, (size, n))
    batch[: size // 2] = np.arange(n) * D // n
    return batch


def _engines(prob: Problem, old):
    """``{name: (one plan, batch)}``: callables that evaluate a Plan and a batch of
    placements (default fusion) with this engine and, where ``old`` is given, with it."""
    def batch_now(places):
        return simulate_batch(prob, places)
    engines = {"now": (lambda plan: simulate(prob, plan), batch_now)}
    if old is not None:
        def one_old(plan):
            return old.evaluate_problem(prob, *_plan_arrays(prob, plan))

        def batch_old(places):
            b, n = places.shape
            with numba.parallel_chunksize(1):
                return old.evaluate_batch_problem(prob, places, np.zeros((b, n)), True,
                                                  np.zeros((b, n)), 1, numba.get_num_threads())
        engines["before"] = (one_old, batch_old)
    return engines


def run(nodes: int = 10_000, devices: int = 4, rounds: int = 7, seconds: float = 0.5,
        old=None, zoo: str | None = "gnmt-8", zoo_cluster: str = "dgx1-v100:8",
        zoo_rounds: int = 3) -> dict:
    """Every rate and ratio of the sim-speed tables, measured in one run (see the module).

    ``old``: a module with ``evaluate_problem`` and ``evaluate_batch_problem`` (the engine
    before issue 50: ``bench/baseline/sim_engine_before.py``), timed beside this one in every
    round. ``zoo``: a zoo graph (on ``zoo_cluster``) whose throughput is measured too, one
    plan at a time and in batches of 64 on 1 and on every thread, with the reference
    beside it (``zoo_rounds`` rounds: its reference takes seconds a plan); None skips it.
    """
    load_before = os.getloadavg()[0]
    width = 20
    g = layered_graph(nodes // width, width, seed=0)
    prob = Problem(g, load_cluster(f"dgx1-v100:{devices}"))
    n, D = g.num_nodes, devices
    rng = np.random.default_rng(0)
    placements = {"contiguous": np.arange(n) * D // n, "random": rng.integers(0, D, n)}
    plans = {(p, f): Plan(placement=place, fusion=None if f == "default" else np.zeros(n))
             for p, place in placements.items() for f in ("default", "off")}
    engines = _engines(prob, old)
    threads = numba.get_num_threads()
    print(f"graph {g.name}: {n} ops, {g.num_edges} edges; cluster {prob.cluster.name}; "
          f"{threads} threads; {rounds} rounds; engines {', '.join(engines)}")
    numba.set_num_threads(1)
    ensure_compiled()
    ref: dict[str, list[float]] = {p: [] for p in placements}
    sim: dict[tuple[str, str, str], list[float]] = {(e, *k): [] for e in engines for k in plans}
    for _ in range(rounds):
        for pname, place in placements.items():
            t0 = time.thread_time()
            python_simulate(prob, place)
            ref[pname].append(time.thread_time() - t0)
            for f in ("default", "off"):
                plan = plans[pname, f]
                for e, (one, _) in engines.items():  # alternately, in one round
                    sim[e, pname, f].append(per_call(lambda plan=plan, one=one: one(plan),
                                                     seconds, time.thread_time))
    ref_t = {p: np.array(v) for p, v in ref.items()}
    sim_t = {k: np.array(v) for k, v in sim.items()}
    rows = []
    for pname, place in placements.items():
        step_py, peak_py = python_simulate(prob, place)
        r = simulate(prob, plans[pname, "off"])
        agree = bool(np.isclose(step_py, r.step_time, rtol=1e-9) and
                     np.allclose(peak_py, r.peak_memory, rtol=1e-9))
        rows.append({"what": f"pure-Python reference, {pname}",
                     "evals_per_s": 1.0 / float(np.median(ref_t[pname])),
                     "step_ms": step_py * 1e3, "agrees_with_graphopt": agree})
        for f in ("default", "off"):
            r = simulate(prob, plans[pname, f])
            for e in engines:
                row = {"what": f"simulate, {pname}, fusion {f}" if e == "now" else
                               f"engine before issue 50, {pname}, fusion {f}",
                       "evals_per_s": 1.0 / float(np.median(sim_t[e, pname, f])),
                       "step_ms": r.step_time * 1e3,
                       "speedup_vs_python": float(np.median(ref_t[pname] / sim_t[e, pname, f]))}
                if e == "now":
                    row["transfers_mb"] = r.bytes_moved / 1e6
                    if "before" in engines:
                        row["vs_before"] = float(np.median(sim_t["before", pname, f] /
                                                           sim_t["now", pname, f]))
                rows.append(row)
    for f in ("default", "off"):
        rows.append({"what": f"simulate, contiguous / random evaluations per s, fusion {f}",
                     "evals_per_s": None,
                     "ratio": float(np.median(sim_t["now", "random", f] /
                                              sim_t["now", "contiguous", f]))})
    throughput = [_throughput(f"layered {n:,} ops", prob, engines, _batch(prob, rng), threads,
                              seconds, rounds, one_plan=sim_t, ref=ref_t)]
    if zoo:
        from graphopt.frontends import load_source

        zprob = Problem(load_source(f"zoo:{zoo}"), load_cluster(zoo_cluster))
        throughput.append(_throughput(f"{zoo} ({zprob.num_nodes:,} ops, {zoo_cluster})", zprob,
                                      _engines(zprob, old), _batch(zprob, rng), threads,
                                      seconds, zoo_rounds))
    numba.set_num_threads(threads)
    for r in rows:
        extra = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in r.items() if k not in ("what", "evals_per_s"))
        eps = "" if r["evals_per_s"] is None else f"{r['evals_per_s']:10.1f}/s"
        print(f"{r['what']:<70} {eps}  {extra}")
    result = {"command": f"python bench/sim_speed.py --nodes {nodes} --devices {devices} "
                         f"--rounds {rounds} --seconds {seconds:g}"
                         + (f" --zoo {zoo} --zoo-rounds {zoo_rounds}" if zoo else " --zoo ''"),
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "threads": threads, "python": platform.python_version(),
                          "numba": numba.__version__},
              "graph": {"name": g.name, "nodes": n, "edges": g.num_edges},
              "cluster": prob.cluster.name, "rounds": rounds, "rows": rows,
              "throughput": throughput, "load_average_before": load_before,
              "load_average": os.getloadavg()[0]}
    return result


def _throughput(label: str, prob: Problem, engines: dict, batch: np.ndarray, threads: int,
                seconds: float, rounds: int, one_plan: dict | None = None,
                ref: dict | None = None) -> dict:
    """Evaluations per second with default fusion: one plan at a time on one thread
    (contiguous and random placements; ``one_plan`` and ``ref``: times measured already,
    else measured here), and a batch of 64 (``batch``) on 1 thread and on ``threads``, for
    each engine, the reference's one plan at a time beside them."""
    n, D = prob.num_nodes, prob.num_devices
    places = {"contiguous": batch[0], "random": batch[-1]}
    numba.set_num_threads(1)
    if one_plan is None:
        one_plan, ref = {}, {p: [] for p in places}
        for _ in range(rounds):
            for pname, place in places.items():
                t0 = time.thread_time()
                python_simulate(prob, place)
                ref[pname].append(time.thread_time() - t0)
                plan = Plan(placement=place)
                for e, (one, _) in engines.items():
                    one_plan.setdefault((e, pname, "default"), []).append(
                        per_call(lambda plan=plan, one=one: one(plan), seconds, time.thread_time))
        one_plan = {k: np.array(v) for k, v in one_plan.items()}
        ref = {p: np.array(v) for p, v in ref.items()}
    out = {"graph": label, "nodes": n, "devices": D, "batch": len(batch),
           "reference": {p: 1.0 / float(np.median(ref[p])) for p in places}, "engines": {}}
    counts = sorted({1, threads})
    per_batch: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for k in counts:
            numba.set_num_threads(k)
            for e, (_, many) in engines.items():
                per_batch.setdefault((e, k), []).append(
                    per_call(lambda many=many: many(batch), seconds))
    numba.set_num_threads(threads)
    for e in engines:
        out["engines"][e] = {
            **{f"one_{p}": 1.0 / float(np.median(one_plan[e, p, "default"])) for p in places},
            **{f"batch_{k}": len(batch) / float(np.median(per_batch[e, k])) for k in counts}}
    ref_s = "  ".join(f"{p} {v:.2f}/s" for p, v in out["reference"].items())
    print(f"{label}: pure-Python reference {ref_s}")
    for e, v in out["engines"].items():
        print(f"{label}: {e:<7}" + "  ".join(f"{k} {x:,.1f}/s" for k, x in v.items()))
    return out


def markdown(result: dict) -> str:
    """The sim-speed section of docs/benchmarks.md for ``result`` (of :func:`run`)."""
    table = ["| what | evaluations / s | vs pure Python | step ms | note |", "|---|---:|---:|---:|---|"]
    for r in result["rows"]:
        eps = "" if r["evals_per_s"] is None else f"{r['evals_per_s']:,.1f}"
        vs = f"{r['speedup_vs_python']:.0f}x" if "speedup_vs_python" in r else ""
        note = ("agrees with graphopt to 1e-9" if r.get("agrees_with_graphopt") else
                "disagrees with graphopt" if r.get("agrees_with_graphopt") is False else
                f"ratio {r['ratio']:.2f}" if "ratio" in r else "")
        if "transfers_mb" in r:
            note = f"{r['transfers_mb']:,.0f} MB transferred"
            if "vs_before" in r:
                note += f"; {r['vs_before']:.2f}x the engine before"
        step = f"{r['step_ms']:.2f}" if "step_ms" in r else ""
        table.append(f"| {r['what']} | {eps} | {vs} | {step} | {note} |")
    g = result["graph"]
    threads = result["machine"]["threads"]
    tp = ["| graph | engine | 1 plan, contiguous | 1 plan, random | batch of 64, 1 thread | "
          f"batch of 64, {threads} threads |", "|---|---|---:|---:|---:|---:|"]
    for t in result.get("throughput", []):
        ref = t["reference"]
        tp.append(f"| {t['graph']} | pure-Python reference | {ref['contiguous']:,.2f} | "
                  f"{ref['random']:,.2f} | | |")
        for e, v in t["engines"].items():
            name = "graphopt now" if e == "now" else "engine before issue 50"
            tp.append(f"| {t['graph']} | {name} | {v['one_contiguous']:,.1f} | "
                      f"{v['one_random']:,.1f} | {v['batch_1']:,.1f} | "
                      + (f"{v[f'batch_{threads}']:,.1f} |" if threads > 1 else "|"))
    load = (f"load average {result['load_average_before']:.1f} when it started and "
            f"{result['load_average']:.1f} when it finished" if "load_average_before" in result
            else f"load average {result['load_average']:.1f} when it finished")
    return (f"`{result['command']}` on {g['nodes']:,} ops / {g['edges']:,} edges "
            f"(`layered_graph`), cluster `{result['cluster']}`, {result['machine']['threads']} "
            f"threads (per-plan rows on 1), medians of {result['rounds']} rounds; {load}.\n\n"
            + "\n".join(table)
            + ("\n\nEvaluations per second with default fusion (one plan: on one thread; "
               "batches: `simulate_batch`, half contiguous and half random placements):\n\n"
               + "\n".join(tp) if result.get("throughput") else ""))
