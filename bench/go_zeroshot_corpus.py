"""Zero-shot GO from two pre-trained checkpoints, side by side, on GO's Table 2 rows.

Issue 14 asks for a pre-training corpus that covers depth and size: the shipped policy
(``PRETRAIN_CORPUS``) leaves out GNMT-4/8 and RNNLM-8, and zero-shot it is below
``expert`` on those rows. This script prices one candidate checkpoint against the shipped
one: on every row of ``graphopt bench go-table2`` (a zoo model on the p100 cluster of the
row's device count), ``expert`` once, then ``go`` (16 plans, zero-shot) with each
checkpoint, through :func:`graphopt.optim.compare.compare` with one budget and seed.
Beside each step time, how undecided the policy is on the row: the mean entropy per node
of its placement distribution, as a share of the uniform distribution's (1: every device
equally likely for every node; 0: one plan). Rows of the held-out families (WaveNet,
AmoebaNet: never in any corpus) are summed up apart from the rest.

Usage:  nice -n 19 .venv/bin/python bench/go_zeroshot_corpus.py --candidate DIR
            [--baseline DIR] [--rows rnnlm-2,gnmt-8] [--seed 0] [--out FILE]
Writes bench/results/go_zeroshot_corpus.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from graphopt.benchmarks import geomean, save_json
from graphopt.benchmarks.go_table2 import ROWS, row_entry
from graphopt.hardware import load_cluster
from graphopt.optim.base import Budget
from graphopt.optim.compare import compare
from graphopt.optim.learned.go.method import SHIPPED, load_go_policy
from graphopt.optim.learned.go.env import GOEnv
from graphopt.rl.ppo import log_prob
from graphopt.sim import Problem
from graphopt.zoo import HELD_OUT_FAMILIES, build
from graphopt.cli._common import parse_bench_args

#: The checkpoints' labels, in table order.
LABELS = ("shipped", "candidate")


def _figures(res) -> dict:
    """One method's step time, validity, wall seconds and evaluations."""
    return {"step_time": res.step_time, "valid": res.result.valid,
            "seconds": res.stats.get("seconds"), "evals": res.stats.get("evals", 0)}


def entropy_share(problem: Problem, checkpoint: str) -> float:
    """Mean entropy per node of the policy's placement distribution on ``problem``, over
    that of the uniform distribution (``log`` of the device count)."""
    import torch

    policy, _ = load_go_policy(checkpoint)
    env = GOEnv(problem, frozenset({"placement"}), "groups")
    with torch.no_grad():
        logits = env.with_prior(policy(*env.inputs(), tasks=env.tasks))
    # log_prob wants one plan's actions (k=1, N); any will do, only the entropy is read
    any_plan = np.zeros((1, logits["placement"].shape[0]), dtype=np.int64)
    _, ent = log_prob(logits, {"placement": any_plan})
    return float(ent.mean()) / math.log(problem.num_devices)


def held_out(row: str) -> bool:
    """Whether ``row`` belongs to a family that no pre-training corpus may hold."""
    return any(row.startswith(f) for f in HELD_OUT_FAMILIES)


def run(checkpoints: dict[str, str], rows: tuple[str, ...], budget: int, seed: int,
        out: Path | None) -> dict:
    """``expert`` and zero-shot ``go`` from each of ``checkpoints`` (label: folder) on
    ``rows``; checkpointed into ``out`` after every row."""
    result = {"benchmark": "go-zeroshot-corpus",
              "settings": {"cluster": "p100", "budget": budget, "seed": seed,
                           "checkpoints": checkpoints},
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "python": platform.python_version()},
              "command": "nice -n 19 .venv/bin/python " + shlex.join(sys.argv), "rows": []}
    for name in rows:
        entry = row_entry(name)
        prob = Problem(build(entry), load_cluster(f"p100:{entry.num_devices}"))
        (expert,) = compare(prob, ["expert"], "placement", Budget(budget), seed)
        row = {"model": name, "ops": prob.graph.num_nodes, "devices": entry.num_devices,
               "held_out": held_out(name), "expert": _figures(expert)}
        for label, ckpt in checkpoints.items():
            (go,) = compare(prob, ["go"], "placement", Budget(budget), seed,
                            params={"go": {"checkpoint": ckpt}})
            row[label] = {**_figures(go), "entropy_share": entropy_share(prob, ckpt)}
        result["rows"].append(row)
        print(f"{time.strftime('%H:%M:%S')} {name}: expert {expert.step_time * 1e3:.1f} ms, "
              + ", ".join(f"{k} {row[k]['step_time'] * 1e3:.1f} ms" for k in checkpoints),
              flush=True)
        if out:
            save_json(result, out)
    result["summary"] = summary(result)
    if out:
        save_json(result, out)
    return result


def _speedup(row: dict, label: str) -> float | None:
    e, g = row["expert"], row[label]
    return e["step_time"] / g["step_time"] if e["valid"] and g["valid"] else None


def summary(result: dict) -> dict:
    """Per checkpoint and row set (all rows, train families, held-out families): the
    geomean speed-up over ``expert`` and the rows at or above it."""
    sets = {"all": lambda r: True, "train_families": lambda r: not r["held_out"],
            "held_out": lambda r: r["held_out"]}
    out = {}
    for label in result["settings"]["checkpoints"]:
        out[label] = {}
        for key, keep in sets.items():
            ups = [_speedup(r, label) for r in result["rows"] if keep(r)]
            ok = [u for u in ups if u is not None]
            # 1e-9: a plan equal to the expert's counts as at the expert
            out[label][key] = {"geomean_vs_expert": geomean(ok), "rows": len(ups),
                               "at_or_above_expert": sum(u >= 1 - 1e-9 for u in ok)}
    return out


def to_markdown(result: dict) -> str:
    """Step times (ms) per row, speed-up over ``expert`` in brackets, the entropy share
    after it, and the summary."""
    labels = list(result["settings"]["checkpoints"])

    def cell(row: dict, label: str) -> str:
        g, up = row[label], _speedup(row, label)
        return ("OOM" if up is None else f"{g['step_time'] * 1e3:.1f} ({up:.2f}x)") + \
            f", H {g['entropy_share']:.2f}"

    lines = ["| row | ops | devices | expert | " + " | ".join(f"go, {k}" for k in labels) + " |",
             "|---" * (4 + len(labels)) + "|"]
    for r in result["rows"]:
        name = r["model"] + (" (held out)" if r["held_out"] else "")
        lines.append(f"| {name} | {r['ops']:,} | {r['devices']} | "
                     f"{r['expert']['step_time'] * 1e3:.1f} | "
                     + " | ".join(cell(r, k) for k in labels) + " |")
    s = result["summary"]
    for key, title in (("all", "geomean, all rows"), ("train_families", "geomean, train families"),
                       ("held_out", "geomean, held-out families")):
        n = s[labels[0]][key]["rows"]
        if not n:
            continue
        lines.append(f"| **{title}** ({n} rows) | | | | " + " | ".join(
            f"**{s[k][key]['geomean_vs_expert']:.3f}x**, {s[k][key]['at_or_above_expert']} "
            f"of {n} at or above expert" for k in labels) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidate", required=True, help="folder of the candidate's policy")
    ap.add_argument("--baseline", default=os.path.relpath(SHIPPED),
                    help="folder of the policy to compare with (default: the shipped one)")
    ap.add_argument("--rows", default=",".join(ROWS), help="GO's Table 2 rows, comma-separated")
    ap.add_argument("--budget", type=int, default=2000,
                    help="evaluations (go uses its 16 plans of them)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench/results/go_zeroshot_corpus.json"))
    a = parse_bench_args(ap)
    rows = tuple(a.rows.split(","))
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown row(s) {', '.join(unknown)}; rows are {', '.join(ROWS)}")
    for d in (a.baseline, a.candidate):
        if not (Path(d) / "policy.json").is_file():
            ap.error(f"no policy.json in {d}")
    result = run(dict(zip(LABELS, (a.baseline, a.candidate))), rows, a.budget, a.seed, a.out)
    print(to_markdown(result))


if __name__ == "__main__":
    main()
