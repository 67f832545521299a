"""How much head start a pre-trained MCM policy gives fine-tuning, from results of
``graphopt bench mcm --scratch-budget N`` (one file per checkpoint): per row, the best of
fine-tuning's first batch (its zero-shot proposals, repaired), both runs' final
throughput, and the evaluations each took to come within 1% and 5% of what training from
scratch ends with (``-``: never), and fine-tuning's speed-up to within 1% in seconds and in
evaluations (scratch's time over fine-tuning's, as ``bench mcm`` reports it).

Usage: python bench/mcm_transfer.py RESULTS.json [RESULTS.json ...]
"""

from __future__ import annotations

import argparse
import json

from graphopt.benchmarks.mcm import time_to


def _evals(history: list, target: float) -> str:
    evals, _ = time_to(history, target)
    return "-" if evals is None else str(evals)


def _speedup(scratch: list, tuned: list, target: float) -> str:
    (e0, s0), (e1, s1) = time_to(scratch, target), time_to(tuned, target)
    if e1 is None:
        return "not reached"
    return f"{s0 / max(s1, 1e-9):.1f}x; {e0 / e1:.1f}x"


def rows(path: str) -> list[str]:
    """One markdown row per graph and preset of the results file ``path``."""
    res = json.load(open(path))
    checkpoint = next((p.split("=", 1)[1] for p in res["command"].split(" -p ")
                       if p.startswith("mcm-finetune.checkpoint=")), "shipped")
    out = []
    for r in res["rows"]:
        scratch, tuned = r.get("scratch") or {}, r.get("finetune_long") or {}
        if not (scratch.get("interval") and tuned.get("history")):
            continue
        target = scratch["interval"]
        first = tuned["history"][0]
        out.append(f"| {checkpoint.split()[0]} | {r['graph']} | {r['chips']} | {first[0]}: "
                   f"{1 / first[2]:,.0f} | {tuned['throughput']:,.0f} | "
                   f"{scratch['throughput']:,.0f} | "
                   + " | ".join(f"{_evals(scratch['history'], k * target)} / "
                                f"{_evals(tuned['history'], k * target)}" for k in (1.01, 1.05))
                   + f" | {_speedup(scratch['history'], tuned['history'], 1.01 * target)} |")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="results JSON of bench mcm --scratch-budget")
    args = ap.parse_args()
    print("| checkpoint | graph | chips | fine-tune's first batch: evals: inputs/s | "
          "fine-tune final | scratch final | evals to within 1%: scratch / fine-tune | "
          "within 5% | speed-up to 1%: s; evals |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.results:
        print("\n".join(rows(path)))
