"""GO's transfer to families it never saw, beside its controls (issue 35).

On the held-out split of a corpus (model families no training graph comes from: bert,
gpt2, t5, vit, llama, bart, whisper, resnet, mistral, qwen2, wavenet, amoebanet), every
row is one graph on one cluster, and every method runs in the same process with the same
seed:

- ``expert`` (the human expert's placement) and ``best`` (every placement heuristic, the
  fastest: the hand-written prior alone), and ``portfolio`` at ``budget`` evaluations
  (the heuristics, then annealing: the bar of a long search);
- zero-shot ``go`` (16 plans) with the candidate policy, and its controls: the same
  network with **random weights**, the candidate with its **node features shuffled**
  across nodes (each row's features permuted, so a node reads another's), and the
  **shipped** policy; a prior-aware candidate (and so its controls) moves nodes off
  ``best``'s plan, which competes with its 16 plans, as in ``go``;
- ``go-finetune`` at ``budget`` evaluations from the candidate and from the random-weight
  control: the evaluations each needs to reach ``portfolio``'s step time (None: never).

A learned gain counts only where ``go`` beats all three controls (random weights,
shuffled features, the heuristics alone). The rows' summary: per method, the geomean of
``expert``'s step time over the method's (higher is faster), over rows and over
families.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from graphopt.benchmarks import geomean, row_line, save_json, say
from graphopt.corpus import HELD_OUT_FAMILIES, load_manifest
from graphopt.evaluate.local import LocalEvaluator
from graphopt.hardware import load_cluster
from graphopt.ir import load_graph
from graphopt.optim.base import Budget, optimize
from graphopt.optim.learned.go.env import GOEnv
from graphopt.optim.learned.go.method import (SHIPPED, _zero_shot, load_go_policy, new_policy,
                                              reads_prior)
from graphopt.runs.checkpoint import save_policy
from graphopt.runs.run import seed_everything
from graphopt.sim import Plan, Problem, simulate

__all__ = ["CONTROLS", "held_out_items", "run", "to_markdown"]

PLACEMENT = frozenset({"placement"})
#: Zero-shot variants of the candidate, in table order.
CONTROLS = ("go", "go-random", "go-shuffled", "go-shipped")
#: Zero-shot plans per variant, as the ``go`` method's default.
SAMPLES = 16


def held_out_items(corpus: str | Path, per_family: int = 2) -> list[dict]:
    """The ``per_family`` largest built items of each held-out family, by family then size."""
    records = load_manifest(corpus)["items"]
    by_family: dict[str, list] = {}
    for key, r in sorted(records.items()):
        if r.get("split") == "held-out" and r.get("status") == "built":
            by_family.setdefault(r["family"], []).append({"id": key, **r})
    rows = []
    for family in sorted(by_family):
        rows += sorted(by_family[family], key=lambda r: -r["nodes"])[:per_family]
    return rows


def held_out_seen(info: dict) -> list[str]:
    """The held-out families among the graphs a policy was trained on (its
    ``policy.json`` info's ``graphs``, ``SOURCE@CLUSTER``): a zero-shot row of those
    families is not unseen for it.

    >>> held_out_seen({"graphs": ["hf:gpt2:seq=32@p100:4", "bert-base@p100:4", "gnmt-2@p100:2"]})
    ['bert', 'gpt2']
    """
    seen = set()
    for name in info.get("graphs", []):
        graph = name.rsplit("@", 1)[0]
        family = graph.split(":")[1] if graph.startswith("hf:") else graph.split("-")[0]
        if family in HELD_OUT_FAMILIES:
            seen.add(family)
    return sorted(seen)


def zero_shot(problem: Problem, policy, seed: int, shuffle: bool = False,
              prior: Plan | None = None) -> float | None:
    """The best step time of the policy's greedy plan and ``SAMPLES − 1`` drawn ones (as
    the ``go`` method), with the node features permuted across nodes when ``shuffle``. A
    prior-aware policy moves nodes off ``prior`` (the heuristics' plan), which competes
    too, as in ``go``."""
    generator = seed_everything(seed, 1)
    aware = reads_prior(policy)
    env = (GOEnv(problem, PLACEMENT, "groups", prior, prior_inputs=True) if aware
           else GOEnv(problem, PLACEMENT, "groups", placement_flips=0.0))
    if shuffle:
        perm = torch.as_tensor(np.random.default_rng(seed).permutation(env.num_units))
        env.x = env.x[perm]
        if aware:
            env.prior_x = env.prior_x[perm]
    ev = LocalEvaluator(problem)
    ev.evaluate(*_zero_shot(policy, env, SAMPLES, generator))
    if aware:
        ev.simulate(prior)
    return float(ev.best_time) if np.isfinite(ev.best_time) else None


def _searched(problem: Problem, method: str, evals: int, seed: int
              ) -> tuple[float | None, Plan]:
    """The step time of ``method``'s plan within ``evals`` evaluations (None: invalid),
    and the plan."""
    plan = optimize(problem, method, PLACEMENT, Budget(evals=evals), seed)[0]
    res = simulate(problem, plan)
    return (float(res.step_time) if res.valid else None), plan


def _to_reach(history: list, goal: float | None) -> int | None:
    """Evaluations at which a run's best first reached ``goal`` (1e-9 relative slack)."""
    if goal is None:
        return None
    return next((int(e) for e, _, b in history if b is not None and b <= goal * (1 + 1e-9)),
                None)


def run(corpus: str | Path, candidate: str | Path, *, cluster: str = "p100:4",
        budget: int = 2000, seed: int = 0, per_family: int = 2, finetune: bool = True,
        out: str | Path | None = None) -> dict:
    """Every row of :func:`held_out_items` (see the module docstring); the results dict,
    saved to ``out`` after every row."""
    policy, info = load_go_policy(candidate)
    shipped, shipped_info = load_go_policy(SHIPPED)
    random_dir = Path(out or "runs/bench/go_transfer.json").with_suffix("") / "random-weights"
    random = new_policy(seed + 1, **{k: v for k, v in policy.config_dict().items()
                                     if k not in ("in_dim", "num_op_types")})
    save_policy(random_dir, random, random.config_dict(), {"control": "random weights",
                                                           "seed": seed + 1})
    items = held_out_items(corpus, per_family)
    result = {"settings": {"corpus": str(corpus), "candidate": str(candidate),
                           "cluster": cluster, "budget": budget, "seed": seed,
                           "per_family": per_family, "finetune": finetune,
                           "candidate_command": info.get("command"),
                           "held_out_seen": {"candidate": held_out_seen(info),
                                             "shipped": held_out_seen(shipped_info)}},
              "load_average": list(os.getloadavg()), "rows": []}
    say(f"go-transfer: {len(items)} held-out rows on {cluster}, budget {budget}")
    for k, item in enumerate(items, 1):
        t0 = time.perf_counter()
        problem = Problem(load_graph(Path(corpus) / item["file"]), load_cluster(cluster))
        row = {"id": item["id"], "family": item["family"], "source": item["source"],
               "nodes": item["nodes"]}
        row |= measure(problem, {"go": policy, "go-random": random, "go-shipped": shipped},
                       budget, seed, {"go-finetune": candidate, "go-finetune-random": random_dir}
                       if finetune else {})
        row["total_seconds"] = round(time.perf_counter() - t0, 2)
        result["rows"].append(row)
        if out:
            save_json(result, out)
        say(row_line(k, len(items), f"{item['family']} ({item['nodes']:,} ops)",
                     row["total_seconds"]))
    result["summary"] = summarize(result["rows"])
    result["load_average_end"] = list(os.getloadavg())
    if out:
        save_json(result, out)
    return result


def measure(problem: Problem, policies: dict, budget: int, seed: int,
            finetune: dict[str, str | Path]) -> dict:
    """One row's step times and seconds per method (see the module docstring);
    ``policies`` name the zero-shot variants (``go`` also runs with shuffled features),
    ``finetune`` the checkpoints ``go-finetune`` starts from."""
    row: dict = {"step_time": {}, "seconds": {}}
    plans = {}

    def record(name: str, fn, *args):
        s = time.perf_counter()
        out = fn(*args)
        row["seconds"][name] = round(time.perf_counter() - s, 3)
        return out

    for name, evals in (("expert", 1), ("best", budget), ("portfolio", budget)):
        row["step_time"][name], plans[name] = record(name, _searched, problem, name, evals, seed)
    for name, net in policies.items():
        # a prior-aware policy starts from best's plan; its seconds exclude best's
        row["step_time"][name] = record(name, zero_shot, problem, net, seed, False, plans["best"])
        if name == "go":
            row["step_time"]["go-shuffled"] = record("go-shuffled", zero_shot, problem, net,
                                                     seed, True, plans["best"])
    goal = row["step_time"]["portfolio"]
    for name, ckpt in finetune.items():
        s = time.perf_counter()
        _, st = optimize(problem, "go-finetune", PLACEMENT, Budget(evals=budget), seed,
                         checkpoint=str(ckpt), progress=False)
        row["step_time"][name] = st["step_time"] if st.get("valid") else None
        row["seconds"][name] = round(time.perf_counter() - s, 3)
        row.setdefault("evals_to_portfolio", {})[name] = _to_reach(st["history"], goal)
    return row


def _speedup(row: dict, name: str) -> float | None:
    e, m = row["step_time"].get("expert"), row["step_time"].get(name)
    return e / m if e and m else None


def summarize(rows: list[dict]) -> dict:
    """Per method: geomean speedup over ``expert`` across rows and across families (each
    family's own geomean first), rows at or above ``expert``, and for ``go`` the rows
    where it beats every control."""
    names = list(dict.fromkeys(n for r in rows for n in r["step_time"]))
    out: dict = {"methods": {}}
    for name in names:
        xs = [_speedup(r, name) for r in rows]
        fam: dict[str, list[float]] = {}
        for r, x in zip(rows, xs):
            if x is not None:
                fam.setdefault(r["family"], []).append(x)
        out["methods"][name] = {
            "geomean_rows": geomean([x for x in xs if x is not None]),
            "geomean_families": geomean([geomean(v) for v in fam.values()]),
            "at_or_above_expert": sum(1 for x in xs if x is not None and x >= 1 - 1e-9),
            "invalid": sum(1 for x in xs if x is None)}
    beats = 0
    for r in rows:
        st = r["step_time"]
        if st.get("go") is not None and all(
                st.get(c) is None or st["go"] < st[c] for c in ("go-random", "go-shuffled", "best")):
            beats += 1
    out["go_beats_all_controls"] = beats
    out["rows"] = len(rows)
    ft = [r.get("evals_to_portfolio", {}) for r in rows]
    if any(ft):
        out["finetune_reached"] = {n: sum(1 for f in ft if f.get(n) is not None)
                                   for n in ("go-finetune", "go-finetune-random")}
        pairs = [(f["go-finetune"], f["go-finetune-random"]) for f in ft
                 if f.get("go-finetune") and f.get("go-finetune-random")]
        out["finetune_evals_ratio_geomean"] = geomean([a / b for a, b in pairs])
    return out


def to_markdown(result: dict) -> str:
    """The rows (speedup over ``expert``, higher is faster) and the summary, as markdown."""
    names = list(result["summary"]["methods"])
    lines = ["| family | ops | " + " | ".join(names) + " |",
             "|---|---:|" + "---:|" * len(names)]
    for r in result["rows"]:
        cells = [(f"{x:.2f}" if x is not None else "invalid")
                 for x in (_speedup(r, n) for n in names)]
        lines.append(f"| {r['family']} | {r['nodes']:,} | " + " | ".join(cells) + " |")
    s = result["summary"]
    g = s["methods"]
    lines.append("| **geomean (rows)** | | " + " | ".join(
        f"**{g[n]['geomean_rows']:.3f}**" if g[n]["geomean_rows"] else "-" for n in names) + " |")
    lines.append("| **geomean (families)** | | " + " | ".join(
        f"{g[n]['geomean_families']:.3f}" if g[n]["geomean_families"] else "-" for n in names) + " |")
    lines.append("| rows at or above expert | | " + " | ".join(
        f"{g[n]['at_or_above_expert']}/{s['rows']}" for n in names) + " |")
    la = result["load_average"]
    lines.append("")
    for who, fams in result["settings"].get("held_out_seen", {}).items():
        if fams:
            lines.append(f"The {who} policy was trained on graphs of held-out families "
                         f"({', '.join(fams)}): its rows of them are not unseen.")
    lines.append(f"go beats all three controls (random weights, shuffled features, heuristics "
                 f"alone) on {s['go_beats_all_controls']} of {s['rows']} rows. "
                 f"Load average at the start {la[0]:.2f}.")
    if "finetune_reached" in s:
        ratio = s.get("finetune_evals_ratio_geomean")
        lines.append(f"go-finetune reached portfolio's step time on "
                     f"{s['finetune_reached']['go-finetune']} rows, its random-weight control on "
                     f"{s['finetune_reached']['go-finetune-random']}; where both did, the "
                     f"pre-trained one needed "
                     + (f"{ratio:.2f}x" if ratio and math.isfinite(ratio) else "-")
                     + " the control's evaluations (geomean).")
    return "\n".join(lines)
