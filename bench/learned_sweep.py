"""Hyperparameter sweep of the learned placers (rl-lstm, hdp) at GO's budget.

Each run is ``optimize(problem, METHOD, "placement", Budget(evals=2000), SEED, **config)``
on a zoo model with GO's Table 2 device count on the ``p100`` preset, one torch thread
and one numba thread. Per run it records the best step time, the mean step time of the
first batch, the mean valid step time of the sampled batches in each fifth of the run
(does the policy itself get better, or only the best sample?), the policy's mean entropy
per decision in each fifth (ln 2 = 0.69 is uniform over two devices, about 0 a collapsed
policy), the evaluations and seconds to come within 2% of the final best, and the wall
seconds. Runs are appended to a JSON-lines file, one per line, so an interrupted sweep
keeps what it finished; ``--markdown`` prints the table docs/learned.md shows.

Usage:
    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python bench/learned_sweep.py \\
        [--out runs/bench/learned-sweep.jsonl] [--seeds 0 1]
    .venv/bin/python bench/learned_sweep.py --markdown
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from graphopt.benchmarks import parse_bench_args

#: (method, config) pairs swept; every other hyperparameter at its default.
GRID = [
    ("rl-lstm", {"lr": 0.01, "warmup": 0, "entropy_coef": 0.0}),
    ("rl-lstm", {"lr": 0.01, "warmup": 0, "entropy_coef": 0.01}),
    ("rl-lstm", {"lr": 0.001, "warmup": 0, "entropy_coef": 0.0}),
    ("rl-lstm", {"lr": 0.003, "warmup": 100, "entropy_coef": 0.0}),
    ("rl-lstm", {"lr": 0.003, "warmup": 100, "entropy_coef": 0.001}),
    ("hdp", {"lr": 0.1, "warmup": 0, "entropy_coef": 0.0}),
    ("hdp", {"lr": 0.003, "warmup": 100, "entropy_coef": 0.0}),
    ("hdp", {"lr": 0.003, "warmup": 100, "entropy_coef": 0.01}),
]
ROWS = ("rnnlm-2", "transformer-xl-4")


def run_one(method: str, row: str, seed: int, config: dict, evals: int = 2000) -> dict:
    """One training run; the figures the sweep table shows."""
    from graphopt.hardware import load_cluster
    from graphopt.optim.base import Budget, optimize
    from graphopt.sim import Problem
    from graphopt.zoo import build, get_entry

    prob = Problem(build(row), load_cluster(f"p100:{get_entry(row).num_devices}"))
    t0 = time.time()
    _, st = optimize(prob, method, "placement", Budget(evals=evals), seed, progress=False,
                     **config)
    curve, q = [m for _, m in st["curve"]], len(st["curve"]) // 5

    def mean_ms(xs):
        xs = [x for x in xs if x is not None]
        return round(sum(xs) / len(xs) * 1e3, 1) if xs else None

    return {"method": method, "row": row, "seed": seed, **config,
            "best_ms": st["step_time"] * 1e3 if st["step_time"] else None,
            "init_ms": (st["initial_step_time"] or 0) * 1e3,
            "curve_q": [mean_ms(curve[i * q:(i + 1) * q]) for i in range(5)],
            "e2pct": st["evals_to_within_2pct"], "s2pct": st["seconds_to_within_2pct"],
            "secs": round(time.time() - t0, 1),
            "ent_q": [round(sum(st["entropy"][i * q:(i + 1) * q]) / max(q, 1), 3)
                      for i in range(5)]}


def markdown(path: Path) -> str:
    """The sweep table: one line per (method, config, model), seeds side by side."""
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    keys = ("lr", "warmup", "entropy_coef")
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        cfg = ", ".join(f"{k}={r[k]}" for k in keys if k in r)
        groups.setdefault((r["method"], cfg, r["row"]), []).append(r)
    lines = ["| method | config | model | seeds | best ms | first batch ms | batch mean ms, "
             "by fifth of the run | entropy / decision, by fifth | evals to 2% |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (method, cfg, row), rs in groups.items():
        rs.sort(key=lambda r: r["seed"])
        lines.append(
            f"| {method} | {cfg} | {row} | {', '.join(str(r['seed']) for r in rs)} | "
            + " / ".join(f"{r['best_ms']:.1f}" for r in rs) + " | "
            + " / ".join(f"{r['init_ms']:.1f}" for r in rs) + " | "
            + "<br>".join(" → ".join(f"{x:.0f}" for x in r["curve_q"]) for r in rs) + " | "
            + "<br>".join(" → ".join(f"{x:.2f}" for x in r["ent_q"]) for r in rs) + " | "
            + " / ".join(str(r["e2pct"]) for r in rs) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/bench/learned-sweep.jsonl"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--markdown", action="store_true", help="Print the table of --out.")
    args = parse_bench_args(ap)
    if args.markdown:
        print(markdown(args.out))
        return
    torch.set_num_threads(1)
    for seed in args.seeds:
        for row in ROWS:
            for method, config in GRID:
                rec = run_one(method, row, seed, config)
                with args.out.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
