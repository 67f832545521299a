"""graphopt on Ray: evaluations per second of ``sa`` on a 10,000-op graph with the local

The benchmark is :mod:`graphopt.benchmarks.ray_speed` (its docstring says what it measures
and how); this script parses the arguments and runs it.
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
from graphopt.evaluate import LocalEvaluator, use_evaluator
from graphopt.evaluate.ray import RayEvaluator, SimulatorPool, ray_backend
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import Budget, optimize
from graphopt.sim import Problem, ensure_compiled, simulate_batch
from graphopt.benchmarks import parse_bench_args
from graphopt.benchmarks.ray_speed import COMMAND, median_time, timed_sa, to_markdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--budget", type=int, default=1600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--updates", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("runs/bench/ray_speed.json"))
    ap.add_argument("--docs", type=Path, default=None,
                    help="Markdown file whose section is rewritten (default: none)")
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
            r, ref = timed_sa(prob, args.budget)
        rates["local"].append(r)
        for w, pool in pools.items():
            with use_evaluator(partial(RayEvaluator, pool=pool)):
                r, plan = timed_sa(prob, args.budget)
            rates[f"ray-{w}"].append(r)
            same[str(w)] = bool(np.array_equal(plan, ref))
    result["sa_evals_per_s"] = {k: statistics.median(v) for k, v in rates.items()}
    result["sa_evals_per_s_all"] = rates
    result["same_plan"] = same

    # -- overhead per batch ------------------------------------------------------------
    over = {}
    for b in (16, 1):
        plans = rng.integers(0, 4, (b, prob.num_nodes))
        local_s = median_time(lambda plans=plans: simulate_batch(prob, plans), args.batches)
        row = {"local_s": local_s}
        for w, pool in pools.items():
            row[f"ray-{w}_s"] = median_time(lambda plans=plans, pool=pool:
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
    from graphopt.evaluate.ray import map_tasks

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
    if args.docs:
        replace_section(args.docs, "ray-speed", to_markdown(result))
    print(to_markdown(result))


if __name__ == "__main__":
    main()
