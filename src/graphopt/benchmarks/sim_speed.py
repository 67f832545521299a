"""Simulator speed: evaluations per second of ``simulate`` on a layered graph, against a
pure-Python event simulator of the kind earlier placement work used, side by side in one
run (``bench/sim_speed.py`` says how it is measured)."""

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


def run(nodes: int = 10_000, devices: int = 4, rounds: int = 7, seconds: float = 0.5) -> dict:
    """Every rate and ratio of the sim-speed table, measured in one run (see the module)."""
    width = 20
    g = layered_graph(nodes // width, width, seed=0)
    prob = Problem(g, load_cluster(f"dgx1-v100:{devices}"))
    n, D = g.num_nodes, devices
    rng = np.random.default_rng(0)
    placements = {"contiguous": np.arange(n) * D // n, "random": rng.integers(0, D, n)}
    plans = {(p, f): Plan(placement=place, fusion=None if f == "default" else np.zeros(n))
             for p, place in placements.items() for f in ("default", "off")}
    threads = numba.get_num_threads()
    print(f"graph {g.name}: {n} ops, {g.num_edges} edges; cluster {prob.cluster.name}; "
          f"{threads} threads; {rounds} rounds")
    numba.set_num_threads(1)
    ensure_compiled()
    ref: dict[str, list[float]] = {p: [] for p in placements}
    sim: dict[tuple[str, str], list[float]] = {k: [] for k in plans}
    for _ in range(rounds):
        for pname, place in placements.items():
            t0 = time.thread_time()
            python_simulate(prob, place)
            ref[pname].append(time.thread_time() - t0)
            for f in ("default", "off"):
                plan = plans[pname, f]
                sim[pname, f].append(per_call(lambda plan=plan: simulate(prob, plan),
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
            rows.append({"what": f"simulate, {pname}, fusion {f}",
                         "evals_per_s": 1.0 / float(np.median(sim_t[pname, f])),
                         "step_ms": r.step_time * 1e3,
                         "speedup_vs_python": float(np.median(ref_t[pname] / sim_t[pname, f])),
                         "transfers_mb": r.bytes_moved / 1e6})
    for f in ("default", "off"):
        rows.append({"what": f"simulate, contiguous / random evaluations per s, fusion {f}",
                     "evals_per_s": None,
                     "ratio": float(np.median(sim_t["random", f] / sim_t["contiguous", f]))})
    batch = rng.integers(0, D, (64, n))
    batch[: 32] = placements["contiguous"]
    per_thread = {}
    for k in sorted({1, threads}):
        numba.set_num_threads(k)
        v = len(batch) / per_call(lambda: simulate_batch(prob, batch),
                                  seconds * rounds)
        per_thread[k] = v
        rows.append({"what": f"simulate_batch, 64 plans (half contiguous, half random), "
                             f"{k} thread(s)", "evals_per_s": v})
    numba.set_num_threads(threads)
    if threads > 1:
        rows.append({"what": f"batch scaling {threads} threads / 1 thread",
                     "evals_per_s": None, "ratio": per_thread[threads] / per_thread[1]})
    for r in rows:
        extra = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in r.items() if k not in ("what", "evals_per_s"))
        eps = "" if r["evals_per_s"] is None else f"{r['evals_per_s']:10.1f}/s"
        print(f"{r['what']:<70} {eps}  {extra}")
    result = {"command": f"python bench/sim_speed.py --nodes {nodes} --devices {devices} "
                         f"--rounds {rounds} --seconds {seconds:g}",
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "threads": threads, "python": platform.python_version(),
                          "numba": numba.__version__},
              "graph": {"name": g.name, "nodes": n, "edges": g.num_edges},
              "cluster": prob.cluster.name, "rounds": rounds, "rows": rows,
              "load_average": os.getloadavg()[0]}
    return result


def markdown(result: dict) -> str:
    """The sim-speed section of docs/benchmarks.md for ``result`` (of :func:`run`)."""
    table = ["| what | evaluations / s | vs pure Python | step ms | note |", "|---|---:|---:|---:|---|"]
    for r in result["rows"]:
        eps = "" if r["evals_per_s"] is None else f"{r['evals_per_s']:,.1f}"
        vs = f"{r['speedup_vs_python']:.0f}x" if "speedup_vs_python" in r else ""
        note = ("agrees with graphopt to 1e-9" if r.get("agrees_with_graphopt") else
                "disagrees with graphopt" if r.get("agrees_with_graphopt") is False else
                f"ratio {r['ratio']:.2f}" if "ratio" in r else
                f"{r['transfers_mb']:,.0f} MB transferred" if "transfers_mb" in r else "")
        step = f"{r['step_ms']:.2f}" if "step_ms" in r else ""
        table.append(f"| {r['what']} | {eps} | {vs} | {step} | {note} |")
    g = result["graph"]
    return (f"`{result['command']}` on {g['nodes']:,} ops / {g['edges']:,} edges "
            f"(`layered_graph`), cluster `{result['cluster']}`, {result['machine']['threads']} "
            f"threads (per-plan rows on 1), medians of {result['rounds']} rounds; load average "
            f"{result['load_average']:.1f} when it finished.\n\n" + "\n".join(table))
