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
Writes runs/bench/go_zeroshot_corpus.json and prints a markdown table.
"""

from __future__ import annotations

import math
import platform
import shlex
import sys
import time
from pathlib import Path
import numpy as np
from graphopt.benchmarks import geomean, save_json
from graphopt.benchmarks.go_table2 import row_entry
from graphopt.hardware import load_cluster
from graphopt.optim.base import Budget
from graphopt.optim.compare import compare
from graphopt.optim.learned.go.method import load_go_policy, reads_prior
from graphopt.optim.learned.go.env import GOEnv
from graphopt.rl.ppo import log_prob
from graphopt.sim import Problem
from graphopt.zoo import HELD_OUT_FAMILIES, build


#: The checkpoints' labels, in table order.
LABELS = ("shipped", "candidate")


def _figures(res) -> dict:
    """One method's step time, validity, wall seconds and evaluations."""
    return {"step_time": res.step_time, "valid": res.result.valid,
            "seconds": res.stats.get("seconds"), "evals": res.stats.get("evals", 0),
            "prior_step_time": res.stats.get("prior_step_time")}


def entropy_share(problem: Problem, checkpoint: str) -> float | None:
    """Mean entropy per node of the policy's placement distribution on ``problem``, over
    that of the uniform distribution (``log`` of the device count); None for a
    prior-aware policy, which ranks moves rather than drawing plans."""
    import torch

    policy, _ = load_go_policy(checkpoint)
    if reads_prior(policy):
        return None
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
            priors = [r["expert"]["step_time"] / r[label]["prior_step_time"]
                      for r in result["rows"] if keep(r) and r[label].get("prior_step_time")]
            if priors:  # a prior-aware policy: its start, the heuristics alone
                out[label][key]["heuristics_alone_vs_expert"] = geomean(priors)
    return out


def to_markdown(result: dict) -> str:
    """Step times (ms) per row, speed-up over ``expert`` in brackets, the entropy share
    after it, and the summary."""
    labels = list(result["settings"]["checkpoints"])

    def cell(row: dict, label: str) -> str:
        g, up = row[label], _speedup(row, label)
        prior = g.get("prior_step_time")  # a prior-aware policy's start: the heuristics'
        return ("OOM" if up is None else f"{g['step_time'] * 1e3:.1f} ({up:.2f}x)") + \
            (f", H {g['entropy_share']:.2f}" if g["entropy_share"] is not None else "") + \
            (f", heuristics alone {row['expert']['step_time'] / prior:.2f}x" if prior else "")

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
            f"of {n} at or above expert" + (
                f" (heuristics alone {s[k][key]['heuristics_alone_vs_expert']:.3f}x)"
                if "heuristics_alone_vs_expert" in s[k][key] else "") for k in labels) + " |")
    return "\n".join(lines)
