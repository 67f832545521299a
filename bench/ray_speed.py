"""graphopt on Ray: evaluations per second of ``sa`` on a 10,000-op graph with the local
evaluator and with a Ray pool, Ray's overhead per batch, and GO pre-training wall time.

Measured side by side in one run, on one local Ray started with every core of the
machine (``ray.init(num_cpus=os.cpu_count())``):

- ``sa`` with the same budget and seed on ``local`` (numba threads across every core in
  this process) and on pools of each ``--workers`` count (one numba thread per actor);
  the plans must be identical (``same_plan``), the rate is evaluations per wall second,
  median over ``--repeats``.
- Overhead per batch: one batch of ``sa``'s size (16 plans) and one of a single plan,
  on the pool and locally, median over ``--batches`` calls each; the overhead is the
  difference (sending the plans, the actors' queues, gathering the results).
- GO pre-training (``pretrain``) on a small corpus for ``--updates`` updates, local and
  on a pool of 2 workers, interleaved (each first in turn) over ``--repeats``: median
  wall seconds (the policy's forward and backward passes stay in this process; only the
  rollouts' simulations go to the pool).
- A benchmark suite: the small versions of six rows of GO's Table 2, one after another
  and as Ray tasks (``go_table2.run(tasks=map_tasks)``): wall seconds, same results.

Usage:  OMP_NUM_THREADS=1 .venv/bin/python bench/ray_speed.py [--nodes 10000]
        [--budget 1600] [--repeats 3] [--workers 1,2,4] [--updates 12]
Writes bench/results/ray_speed.json and the ray-speed section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import ray

from graphopt.benchmarks import replace_section, save_json
from graphopt.dist.local import LocalEvaluator, use_evaluator
from graphopt.dist.ray import RayEvaluator, SimulatorPool, ray_backend
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import Budget, optimize
from graphopt.sim import Problem, ensure_compiled, simulate_batch
from graphopt.cli._common import parse_bench_args

COMMAND = "OMP_NUM_THREADS=1 .venv/bin/python bench/ray_speed.py"


def _median_time(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _sa(prob: Problem, budget: int) -> tuple[float, np.ndarray]:
    t0 = time.perf_counter()
    plan, stats = optimize(prob, "sa", "placement", Budget(budget), seed=0)
    return stats["evals"] / (time.perf_counter() - t0), plan.placement


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--budget", type=int, default=1600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--updates", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("bench/results/ray_speed.json"))
    ap.add_argument("--docs", type=Path, default=Path("docs/benchmarks.md"))
    args = parse_bench_args(ap)

    ensure_compiled()
    width = 50
    prob = Problem(layered_graph(args.nodes // width, width, seed=0), load_cluster("dgx1-v100:4"))
    rng = np.random.default_rng(0)
    cores = os.cpu_count()
    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    result = {"benchmark": "ray-speed", "command": COMMAND + (
        f" --nodes {args.nodes} --budget {args.budget} --repeats {args.repeats} "
        f"--workers {args.workers} --updates {args.updates}"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": cores,
                    "python": platform.python_version(), "ray": ray.__version__,
                    "load_average_at_start": os.getloadavg()[0]},
        "graph": {"ops": prob.num_nodes, "cluster": prob.cluster.name}, "budget": args.budget}

    # -- sa: local and on pools, rounds interleaved so that load drifts hit all alike --
    workers = [int(w) for w in args.workers.split(",")]
    rates: dict[str, list[float]] = {"local": [], **{f"ray-{w}": [] for w in workers}}
    same = {}
    pools = {w: SimulatorPool(w) for w in workers}
    for w, pool in pools.items():  # actors started and warmed before any timing
        pool.simulate(prob, rng.integers(0, 4, (w, prob.num_nodes)))
    with use_evaluator(LocalEvaluator):  # the methods' modules imported before any timing
        optimize(prob, "sa", "placement", Budget(16), seed=0)
    for _ in range(args.repeats):
        with use_evaluator(LocalEvaluator):
            r, ref = _sa(prob, args.budget)
        rates["local"].append(r)
        for w, pool in pools.items():
            with use_evaluator(partial(RayEvaluator, pool=pool)):
                r, plan = _sa(prob, args.budget)
            rates[f"ray-{w}"].append(r)
            same[str(w)] = bool(np.array_equal(plan, ref))
    result["sa_evals_per_s"] = {k: statistics.median(v) for k, v in rates.items()}
    result["sa_evals_per_s_all"] = rates
    result["same_plan"] = same

    # -- overhead per batch ------------------------------------------------------------
    over = {}
    for b in (16, 1):
        plans = rng.integers(0, 4, (b, prob.num_nodes))
        local_s = _median_time(lambda plans=plans: simulate_batch(prob, plans), args.batches)
        row = {"local_s": local_s}
        for w, pool in pools.items():
            row[f"ray-{w}_s"] = _median_time(lambda plans=plans, pool=pool:
                                             pool.simulate(prob, plans), args.batches)
            row[f"ray-{w}_overhead_s"] = row[f"ray-{w}_s"] - local_s
        over[str(b)] = row
    result["batch"] = over
    for pool in pools.values():
        pool.close()

    # -- GO pre-training ---------------------------------------------------------------
    from graphopt.optim.learned.go.train import pretrain
    from graphopt.rl.config import PPOConfig

    corpus = [Problem(layered_graph(40, 25, seed=1), load_cluster("p100:4")),
              Problem(mlp_training_graph(), load_cluster("p100:2"))]
    walls: dict[str, list[float]] = {"local": [], "ray-2": []}
    kw = {"ppo": PPOConfig(num_samples=32), "progress": False}
    with tempfile.TemporaryDirectory() as tmp, ray_backend(workers=2) as pool:
        for p in corpus:  # the pool's start is not pre-training
            pool.simulate(p, np.zeros((2, p.num_nodes), np.int64))
        with use_evaluator(LocalEvaluator):  # torch loaded, not timed
            pretrain(corpus, Path(tmp) / "warm-up", updates=1, **kw)
        for rep in range(args.repeats):  # interleaved, each first in turn
            for name in ("local", "ray-2")[::1 if rep % 2 else -1]:
                make = LocalEvaluator if name == "local" else partial(RayEvaluator, pool=pool)
                with use_evaluator(make):
                    t0 = time.perf_counter()
                    pretrain(corpus, Path(tmp) / f"{name}-{rep}", updates=args.updates, **kw)
                    walls[name].append(time.perf_counter() - t0)
        same_policy = all((Path(tmp) / f"local-{i}" / "policy.safetensors").read_bytes() ==
                          (Path(tmp) / f"ray-2-{i}" / "policy.safetensors").read_bytes()
                          for i in range(args.repeats))
    result["pretrain"] = {"updates": args.updates, "plans_per_update": 32,
                          "graphs": [f"{p.graph.name}@{p.cluster.name} ({p.num_nodes} ops)"
                                     for p in corpus],
                          "wall_s": {k: statistics.median(v) for k, v in walls.items()},
                          "wall_s_all": walls, "same_policy": same_policy}
    # -- a benchmark suite: GO's Table 2 (small versions), its rows as Ray tasks --------
    from graphopt.benchmarks import go_table2
    from graphopt.dist.ray import map_tasks

    suite = {"cluster": "p100", "methods": ("single", "metis", "sa"), "budget": 400,
             "quick": True, "rows": go_table2.ROWS[:6], "progress": False}
    t0 = time.perf_counter()
    local_rows = go_table2.run(**suite)
    suite_s = {"local": time.perf_counter() - t0}
    t0 = time.perf_counter()
    ray_rows = go_table2.run(**suite, tasks=map_tasks)
    suite_s["ray"] = time.perf_counter() - t0
    result["suite"] = {"rows": list(suite["rows"]), "methods": list(suite["methods"]),
                       "budget": suite["budget"], "wall_s": suite_s,
                       "same_results": all(
                           a["methods"][m]["step_time"] == b["methods"][m]["step_time"]
                           for a, b in zip(local_rows["rows"], ray_rows["rows"], strict=True)
                           for m in suite["methods"])}
    result["machine"]["load_average_at_end"] = os.getloadavg()[0]
    ray.shutdown()
    save_json(result, args.out)
    replace_section(args.docs, "ray-speed", to_markdown(result))
    print(to_markdown(result))


def to_markdown(r: dict) -> str:
    rates, local = r["sa_evals_per_s"], r["sa_evals_per_s"]["local"]
    lines = ["## Ray: evaluations per second, overhead per batch, pre-training, benchmark rows",
             "", f"`{r['command']}` — {r['graph']['ops']:,}-op layered graph on "
             f"`{r['graph']['cluster']}`, `sa`, budget {r['budget']}, seed 0; one local Ray "
             f"of {r['machine']['cores']} CPUs on this machine (shared: load average "
             f"{r['machine']['load_average_at_start']:.1f} at the start, "
             f"{r['machine']['load_average_at_end']:.1f} at the end).", "",
             "| backend | sa evals/s (median) | vs local | same plan as local |",
             "|---|---:|---:|---|"]
    for k, v in rates.items():
        w = k.split("-")[1] if k != "local" else None
        lines.append(f"| {k} | {v:,.0f} | {v / local:.2f}x | "
                     f"{'-' if w is None else ('yes' if r['same_plan'][w] else 'NO')} |")
    lines += ["", "| batch | local ms | " + " | ".join(
        f"{k} ms (overhead)" for k in rates if k != "local") + " |",
        "|---:|---:|" + "---:|" * (len(rates) - 1)]
    for b, row in r["batch"].items():
        cells = [f"{row[f'{k}_s'] * 1e3:.1f} ({row[f'{k}_overhead_s'] * 1e3:+.1f})"
                 for k in rates if k != "local"]
        lines.append(f"| {b} plans | {row['local_s'] * 1e3:.1f} | " + " | ".join(cells) + " |")
    p = r["pretrain"]
    lines += ["", f"GO pre-training, {p['updates']} updates of {p['plans_per_update']} plans on "
                  f"{', '.join(p['graphs'])}, median of {len(p['wall_s_all']['local'])} "
                  f"interleaved runs: local {p['wall_s']['local']:.1f} s, Ray with 2 "
                  f"workers {p['wall_s']['ray-2']:.1f} s "
                  f"({p['wall_s']['local'] / p['wall_s']['ray-2']:.2f}x); identical policy: "
                  f"{'yes' if p['same_policy'] else 'NO'}."]
    q = r["suite"]
    lines += ["", f"GO's Table 2, small versions (`--quick`) of {len(q['rows'])} rows, methods "
                  f"{', '.join(q['methods'])}, budget {q['budget']}: one row after another "
                  f"{q['wall_s']['local']:.1f} s, rows as Ray tasks {q['wall_s']['ray']:.1f} s "
                  f"({q['wall_s']['local'] / q['wall_s']['ray']:.2f}x); same results: "
                  f"{'yes' if q['same_results'] else 'NO'}."]
    b16 = r["batch"]["16"]
    plan_s = b16["local_s"] * r["machine"]["cores"] / 16  # one plan on one core
    over_ms = statistics.median(v * 1e3 for k, v in b16.items() if k.endswith("overhead_s"))
    pre, q = r["pretrain"]["wall_s"], r["suite"]["wall_s"]
    lines += ["", "What bounds it. A batch of B plans, each t seconds of simulation on one "
              "core, takes about B·t/c on one machine of c cores (numba already uses them "
              "all) and about h + B·t/(n·c) on a pool over n such machines, h the overhead "
              f"per batch: here t ≈ {plan_s * 1e3:.1f} ms for one plan of this graph and "
              f"h ≈ {over_ms:.0f} ms for a batch of 16 (sending its plans, the actors' "
              "queues, gathering the results; more across a network). So on one machine a "
              "search's pool cannot win (same cores, plus h), as the sa rows show; across "
              "machines it wins once B·t·(1 − 1/n)/c > h, i.e. with large graphs and large "
              "batches (sa.chains, brkga.population, GO's num_samples), and it stops scaling "
              "when a batch has fewer plans than the pool has actors (each actor gets at "
              "least one plan) or when h dominates. Rows as Ray tasks pay a fresh worker "
              "process per task (graphopt and torch imported again: seconds, more under "
              "load), while a quick row whose graph is in the zoo's cache is about a second "
              "of work; with these small rows that cost more than it saved "
              f"({q['local'] / q['ray']:.2f}x); full-size rows (minutes each) on more CPUs "
              "than one machine has are what it is for. Pre-training sends 32 plans of "
              "at most 1,000 ops per update, little simulation against the policy's own "
              "work in the driver, so the pool has little to speed up (here "
              f"{pre['local'] / pre['ray-2']:.2f}x); by the bound above, a corpus of large "
              "graphs with more plans per update, over several machines, is where it can. On a "
              "loaded machine single runs differ by tens of percent, hence the medians of "
              "interleaved runs here: a first run of this benchmark that timed pre-training "
              "once, local first, read 1.40x for Ray, which the interleaved runs did not "
              "confirm (take every ratio here with the load figures above in mind, on a "
              "quiet machine they may differ). The multi-worker figures are on one 2-core "
              "machine (workers beyond 2 share its cores), all this machine allows; no "
              "multi-node run was made."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
