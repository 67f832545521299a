"""Does placing a model on two CPU devices make a real training step faster?

RNNLM (stacked LSTMs unrolled over time) at a CPU size, its training step run by
graphopt.exec on 2 worker processes (one core each): every op on device 0 (``single``)
against the human expert's layer-wise placement (``expert``), where layer l+1 of time
step t runs beside layer l of step t+1. The two plans are timed in alternating rounds
in the same pool, so the machine's load drifts over both alike; the figure is the
median over rounds of the per-round ratio.

Usage:  .venv/bin/python bench/exec_speedup.py [--layers 4] [--hidden 512] [--rounds 7]
Writes runs/bench/exec_speedup.json (--out) and, with --docs FILE, FILE's exec-speedup section.
"""

from __future__ import annotations

import argparse
import statistics
import warnings

from graphopt.benchmarks import replace_section, save_json
from graphopt.exec.api import PlacedProgram
from graphopt.exec.workers import CPUWorkers
from graphopt.frontends.torch import trace_program
from graphopt.hardware import load_cluster
from graphopt.optim import optimize
from graphopt.sim import Problem
from graphopt.zoo import get_entry
from graphopt.benchmarks import parse_bench_args


def run(layers: int, hidden: int, seq_len: int, rounds: int, steps: int) -> dict:
    entry = get_entry("rnnlm-2").with_config("rnnlm-cpu", layers=layers, hidden=hidden, vocab=2000,
                                             seq_len=seq_len, batch=32, dropout=0.0)
    model, inputs = entry.make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = trace_program(model, inputs, training=True)
    prob = Problem(traced.graph, load_cluster("cpu:2"))
    plans = {m: optimize(prob, m)[0] for m in ("single", "expert")}
    times: dict[str, list[float]] = {m: [] for m in plans}
    ratios = []
    with CPUWorkers(2) as pool:
        placed = {m: PlacedProgram(traced, p, "cpu:2", pool=pool) for m, p in plans.items()}
        for r in range(rounds):
            this = {}
            for m in plans:
                this[m] = placed[m].measure(steps=steps, warmup=1)["median"]
                times[m].append(this[m])
            ratios.append(this["single"] / this["expert"])
            print(f"round {r}: single {this['single'] * 1e3:.0f} ms, expert {this['expert'] * 1e3:.0f} ms, "
                  f"{ratios[-1]:.2f}x", flush=True)
    return {"model": {"layers": layers, "hidden": hidden, "seq_len": seq_len, "batch": 32,
                      "vocab": 2000, "ops": traced.graph.num_nodes},
            "median_ms": {m: statistics.median(t) * 1e3 for m, t in times.items()},
            "speedup": statistics.median(ratios), "ratios": ratios, "rounds": rounds, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default="runs/bench/exec_speedup.json")
    ap.add_argument("--docs", default=None,
                    help="Markdown file whose section is rewritten (default: none)")
    a = parse_bench_args(ap)
    res = run(a.layers, a.hidden, a.seq_len, a.rounds, a.steps)
    save_json(res, a.out)
    m = res["model"]
    text = (f"`.venv/bin/python bench/exec_speedup.py --layers {m['layers']} --hidden {m['hidden']} "
            f"--seq-len {m['seq_len']}`: RNNLM ({m['ops']} ops, batch 32) trained on 2 CPU worker "
            f"processes of this 2-core machine. Median step: single {res['median_ms']['single']:.0f} ms, "
            f"expert (layer-wise) {res['median_ms']['expert']:.0f} ms; speed-up "
            f"**{res['speedup']:.2f}x** (median of {res['rounds']} alternating rounds; per round "
            + ", ".join(f"{r:.2f}" for r in res["ratios"]) + ").")
    print(text)
    if a.docs:
        replace_section(a.docs, "exec-speedup", "## Two CPU devices, a real speed-up\n\n" + text)


if __name__ == "__main__":
    main()
