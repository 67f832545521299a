"""Simulator speed: evaluations per second on a 10,000-op graph with 4 devices, and on
GNMT-8 (53,694 ops) with 8.

Measures, side by side in one run:
- ``simulate`` (one plan at a time, one core) for contiguous and random placements,
  with the compiler's default fusion and with fusion off;
- the engine before issue 50 (``bench/baseline/sim_engine_before.py``, a copy kept for this
  benchmark only) on the same plans, in the same rounds;
- ``simulate_batch`` of 64 plans on 1 thread and on every core, both engines;
- the same throughput on a zoo graph (``--zoo``, default gnmt-8 on dgx1-v100:8: one plan
  at a time and batches of 64), with the reference beside it;
- a pure-Python event simulator of the kind earlier placement work used (heapq events,
  per-device FIFO queues, one transfer per link at a time, memory tracking), on the
  same graph and plans, as the reference the speed-up is measured against. With fusion
  off its step times must equal graphopt's: it doubles as a cross-check.

On a shared machine absolute rates drift with the load, so every measurement is made
once per round, all in each round; a rate is the median over rounds of the median time
per call, and a ratio (to the reference, random to contiguous) the median over rounds
of the ratio within each round. Per-plan figures run with numba on one thread and are
timed in the thread's CPU time, so that neither side counts time spent waiting for a
core that other processes hold; batches are timed by the wall clock.

Usage:  .venv/bin/python bench/sim_speed.py [--nodes 10000] [--devices 4] [--rounds 7]
        [--seconds 0.5] [--zoo gnmt-8] [--zoo-rounds 3] [--no-before]
Writes runs/bench/sim_speed.json; with --docs FILE, also FILE's sim-speed section.
The measuring code is graphopt.benchmarks.sim_speed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graphopt.benchmarks import parse_bench_args, replace_section, save_json
from graphopt.benchmarks.sim_speed import markdown, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10_000, help="graph size (ops)")
    ap.add_argument("--devices", type=int, default=4, help="devices of dgx1-v100 to use")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of every measurement")
    ap.add_argument("--seconds", type=float, default=0.5, help="time per measurement per round")
    ap.add_argument("--zoo", default="gnmt-8",
                    help="zoo graph whose throughput is measured too ('' skips it)")
    ap.add_argument("--zoo-cluster", default="dgx1-v100:8", help="cluster for --zoo")
    ap.add_argument("--zoo-rounds", type=int, default=3, help="rounds on --zoo")
    ap.add_argument("--no-before", action="store_true",
                    help="leave out the engine before issue 50")
    ap.add_argument("--out", default="runs/bench/sim_speed.json", help="results JSON")
    ap.add_argument("--docs", default=None,
                    help="markdown file whose sim-speed section is rewritten (default: none). "
                         "Example: docs/benchmarks.md")
    args = parse_bench_args(ap)
    old = None
    if not args.no_before:
        sys.path.insert(0, str(Path(__file__).parent / "baseline"))
        import sim_engine_before as old
    result = run(args.nodes, args.devices, args.rounds, args.seconds, old=old,
                 zoo=args.zoo or None, zoo_cluster=args.zoo_cluster, zoo_rounds=args.zoo_rounds)
    save_json(result, args.out)
    if args.docs:
        replace_section(args.docs, "sim-speed", markdown(result))
    print(f"wrote {args.out}" + (f" and {args.docs}" if args.docs else ""))


if __name__ == "__main__":
    main()
