"""Direction checks on CPU with torch.compile (Inductor) for three of the simulator's
fusion rules (docs/simulator.md "Fusion"). Every time is one thread, process CPU time,
the best of ``--reps`` calls, then the median over ``--rounds`` rounds.

1. **Large kernels lose efficiency.** A chain of k stages (each ``cos`` or ``sin``, a
   multiply, an add: 3 pointwise ops) on a 1M-element float32 tensor, run eagerly (one
   kernel per op) and compiled (Inductor fuses the chain). If fusion kept its
   efficiency at any size, the compiled time per stage would stay flat as k grows and
   the speed-up over eager would not shrink.
2. **Duplication pays for cheap producers, not for expensive ones.** A producer P read
   by two consumers (``sin``, ``cos``), on 8M floats: P duplicated into each consumer
   (two compiled kernels, each recomputing P) against P in a kernel of its own (three
   kernels: P written once, read twice). P is cheap (one multiply) or expensive (8
   transcendental ops).
3. **Sibling fusion pays.** Two cheap consumers of one tensor (``x * 2``, ``x + 1``) in
   one multi-output kernel (one compiled function returning both: the tensor read
   once) against a kernel each.

Usage:  .venv/bin/python bench/fusion_cpu.py [--rounds 3] [--reps 7]
Writes runs/bench/fusion_cpu.json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch

from graphopt.benchmarks import save_json
from graphopt.benchmarks import parse_bench_args

SIZES = (4, 8, 16, 32, 64)
#: Elements of the tensors of checks 2 and 3: beyond this machine's caches (32 MB).
BIG = 1 << 23


def chain(k: int):
    def f(x):
        for i in range(k):
            x = torch.sin(x) * 1.0001 + 0.5 if i % 2 else torch.cos(x) * 0.9999 - 0.25
        return x
    return f


def producer(expensive: bool):
    def p(x):
        if not expensive:
            return x * 1.5
        for _ in range(4):
            x = torch.sin(torch.exp(x * 0.01))
        return x
    return p


def duplication_variants(expensive: bool) -> dict:
    """``duplicated``: each consumer recomputes P in its own kernel; ``own kernel``: P,
    then each consumer reading its output."""
    p = producer(expensive)
    dup = (torch.compile(lambda x: torch.sin(p(x))), torch.compile(lambda x: torch.cos(p(x))))
    own = (torch.compile(p), torch.compile(torch.sin), torch.compile(torch.cos))

    def duplicated(x):
        return dup[0](x), dup[1](x)

    def own_kernel(x):
        y = own[0](x)
        return own[1](y), own[2](y)
    return {"duplicated": duplicated, "own kernel": own_kernel}


def sibling_variants() -> dict:
    both = torch.compile(lambda x: (x * 2.0, x + 1.0))
    a, b = torch.compile(lambda x: x * 2.0), torch.compile(lambda x: x + 1.0)
    return {"siblings fused": both, "a kernel each": lambda x: (a(x), b(x))}


def compare(variants: dict, x: torch.Tensor, rounds: int, reps: int) -> dict[str, float]:
    """Median over rounds of each variant's best time, in ms, the variants alternating."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, f in variants.items():
            times[k].append(best_time(f, x, reps))
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


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
    ap.add_argument("--out", default="runs/bench/fusion_cpu.json")
    args = parse_bench_args(ap)
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
    big = torch.randn(BIG)
    checks = {}
    for name, variants in (("cheap producer", duplication_variants(False)),
                           ("expensive producer", duplication_variants(True)),
                           ("siblings", sibling_variants())):
        checks[name] = compare(variants, big, args.rounds, args.reps)
        print(f"{name}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in checks[name].items()),
              flush=True)
    out = {"benchmark": "fusion_cpu", "command": "python bench/fusion_cpu.py "
           f"--rounds {args.rounds} --reps {args.reps}", "torch": torch.__version__,
           "machine": platform.processor() or platform.machine(), "rows": rows,
           "elements": BIG, "checks": checks}
    save_json(out, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
