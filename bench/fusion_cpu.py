"""Does a fused kernel lose efficiency as it grows? A direction check on CPU with
torch.compile (Inductor), for the simulator's "large kernels lose efficiency" rule
(docs/simulator.md "Fusion").

A chain of k stages (each ``cos`` or ``sin``, a multiply, an add: 3 pointwise ops) on a
1M-element float32 tensor, run eagerly (one kernel per op) and compiled (Inductor fuses
the chain). Per round, every size is timed eagerly and compiled, one thread, in process
CPU time (the best of ``--reps`` calls); the figures are medians over rounds. If fusion
kept its efficiency at any size, the compiled time per stage would stay flat as k grows
and the speed-up over eager would not shrink.

Usage:  .venv/bin/python bench/fusion_cpu.py [--rounds 3] [--reps 7]
Writes bench/results/fusion_cpu.json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch

from graphopt.benchmarks import save_json

SIZES = (4, 8, 16, 32, 64)


def chain(k: int):
    def f(x):
        for i in range(k):
            x = torch.sin(x) * 1.0001 + 0.5 if i % 2 else torch.cos(x) * 0.9999 - 0.25
        return x
    return f


def best_time(f, x, reps: int) -> float:
    f(x)
    f(x)
    ts = []
    for _ in range(reps):
        t = time.process_time()
        f(x)
        ts.append(time.process_time() - t)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every measurement")
    ap.add_argument("--reps", type=int, default=7, help="calls per measurement (best kept)")
    ap.add_argument("--out", default="bench/results/fusion_cpu.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(1 << 20)
    fns = {k: (chain(k), torch.compile(chain(k))) for k in SIZES}
    times: dict[int, list[tuple[float, float]]] = {k: [] for k in SIZES}
    for _ in range(args.rounds):
        for k, (eager, comp) in fns.items():
            times[k].append((best_time(eager, x, args.reps), best_time(comp, x, args.reps)))
    rows = []
    for k in SIZES:
        e = statistics.median(t[0] for t in times[k])
        c = statistics.median(t[1] for t in times[k])
        rows.append({"stages": k, "ops": 3 * k, "eager_ms": e * 1e3, "compiled_ms": c * 1e3,
                     "compiled_us_per_stage": c / k * 1e6, "eager_over_compiled": e / c})
        print(f"{3 * k:4d} ops: eager {e * 1e3:7.2f} ms, compiled {c * 1e3:7.2f} ms "
              f"({c / k * 1e6:6.1f} us a stage), eager / compiled {e / c:.2f}", flush=True)
    out = {"benchmark": "fusion_cpu", "command": "python bench/fusion_cpu.py "
           f"--rounds {args.rounds} --reps {args.reps}", "torch": torch.__version__,
           "machine": platform.processor() or platform.machine(), "rows": rows}
    save_json(out, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
