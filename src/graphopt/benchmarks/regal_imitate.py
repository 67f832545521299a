"""REGAL learned from search, on held-out families, beside its controls (issue 35).

Rows, on held-out corpus graphs (``per_family`` per held-out family, of median size),
two devices, placement and scheduling, peak memory, every search at ``evals``
evaluations and ``seeds`` seeds:

- **BRKGA-5K**: the registry's ``brkga`` (uniform), the reference;
- **layer-split BRKGA**: ``regal`` with an untrained head and the layer-split prior, the
  hand-written prior alone (:func:`~graphopt.optim.learned.regal.method.layer_split_prior`);
- **REGAL imitation**: ``regal`` with the candidate policy (``graphopt train
  regal-imitate``), its Betas multiplying the prior's;
- **random weights**: the same network with random weights (every layer, the output map
  included, at torch's default initialisation; an untrained head's zero output map would
  be the prior itself), on the same prior;
- **shuffled features**: the candidate with the node features permuted across nodes
  (a seeded permutation per seed; the edges kept), so each node reads another's.

A graph's figure for a row is the mean of its peak memory over the seeds; its % is the
improvement over BRKGA-5K's mean (positive: lower peak). The issue's targets: REGAL
imitation at least 1.5 points below the prior alone on the mean over graphs, and the
shuffled-feature control at least 1 point behind REGAL imitation.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from graphopt.benchmarks import save_json
from graphopt.optim.base import Budget, optimize
from graphopt.optim.learned.regal.head import REGALHead
from graphopt.optim.learned.regal.method import (RegalSpace, _params, _prior, load_regal_policy,
                                                 trained_prior)
from graphopt.optim.learned.regal.train import regal_inputs
from graphopt.optim.search.brkga import BRKGA
from graphopt.runs.checkpoint import save_policy
from graphopt.sim import Problem, simulate

__all__ = ["ROWS", "held_out_items", "random_policy", "run", "shuffled_regal", "summary",
           "to_markdown"]

TASK = "placement,scheduling"
ROWS = ("BRKGA-5K", "layer-split BRKGA", "REGAL imitation", "random weights",
        "shuffled features")


def held_out_items(manifest: dict, per_family: int = 1) -> list[str]:
    """Ids of ``per_family`` built held-out items per family, evenly spread over the
    family's items ordered by size (one: the median), families in name order."""
    fams: dict[str, list[tuple[int, str]]] = {}
    for k, v in manifest["items"].items():
        if v.get("split") == "held-out" and v.get("status") == "built":
            fams.setdefault(v["family"], []).append((v["nodes"], k))
    out = []
    for _, items in sorted(fams.items()):
        items.sort()
        n = min(per_family, len(items))
        idx = sorted({int(round((j + 1) * (len(items) - 1) / (n + 1))) for j in range(n)})
        out += [items[i][1] for i in idx]
    return out


def random_policy(candidate: str | Path, folder: str | Path, seed: int = 0) -> Path:
    """The candidate's network with random weights (torch's default initialisation of
    every layer, the output map included), its provenance's config (and so its prior)
    kept, saved as a policy in ``folder``."""
    head, info = load_regal_policy(candidate)
    torch.manual_seed(seed)
    rnd = REGALHead(head.in_dim, head.dim, head.layers, head.max_devices)
    rnd.out.reset_parameters()  # REGALHead zeroes it: random weights everywhere
    return save_policy(folder, rnd, {"in_dim": rnd.in_dim, "dim": rnd.dim, "layers": rnd.layers,
                                     "max_devices": rnd.max_devices},
                       {"control": "random weights", "seed": seed, "of": str(candidate),
                        "config": info.get("config", {})})


def shuffled_regal(problem: Problem, candidate: str | Path, seed: int, evals: int,
                   perm: np.ndarray | None = None) -> tuple[float, float]:
    """``regal`` with the candidate policy as the method runs it, but its node features
    permuted across nodes (``perm``; None: a permutation seeded by ``seed``); returns
    the peak memory of its plan and the seconds. With the identity permutation it is the
    ``regal`` method itself."""
    t0 = time.perf_counter()
    head, info = load_regal_policy(candidate)
    space = RegalSpace(problem, frozenset(TASK.split(",")))
    x, ei = regal_inputs(problem)
    if perm is None:
        perm = np.random.default_rng(seed).permutation(len(x))
    with torch.no_grad():
        out = head(x[torch.as_tensor(perm)], ei)
    p = _params(head, out, space, False, _prior(space, trained_prior(info)))
    brkga = BRKGA(inheritance=p["inheritance"], mutant_alpha=p["alpha"], mutant_beta=p["beta"])
    plan, _ = brkga.evolve(space, Budget(evals, objective="memory"), seed)
    return float(simulate(problem, plan).peak_memory.max()), time.perf_counter() - t0


def run(corpus: str | Path, candidate: str | Path, *, evals: int = 5000, seeds: int = 10,
        per_family: int = 1, cluster: str = "p100:2", out: Path | None = None,
        on_step=None) -> dict:
    """Every row of :data:`ROWS` on the held-out items; written to ``out`` after each graph.

    Returns ``settings`` (with the load average before and after) and ``graphs``: per item
    its family, ops and per row ``values`` (peak bytes per seed) and ``seconds``.
    """
    from graphopt.corpus import load_manifest
    from graphopt.hardware import load_cluster
    from graphopt.ir import load_graph

    corpus = Path(corpus)
    manifest = load_manifest(corpus)
    ids = held_out_items(manifest, per_family)
    _, info = load_regal_policy(candidate)
    rnd_dir = Path(out or "runs/bench/regal_imitate.json").with_suffix("") / "random-weights"
    random_policy(candidate, rnd_dir)
    c = load_cluster(cluster)
    result: dict = {"settings": {
        "corpus": str(corpus), "candidate": str(candidate), "random_weights": str(rnd_dir),
        "candidate_command": info.get("command"), "imitation": info.get("imitation"),
        "evals": evals, "seeds": seeds, "per_family": per_family, "cluster": cluster,
        "task": TASK, "objective": "memory", "loadavg_start": list(os.getloadavg()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs"},
        "graphs": {}}
    t_start = time.perf_counter()
    params = {"BRKGA-5K": ("brkga", {}),
              "layer-split BRKGA": ("regal", {"checkpoint": "untrained", "prior": "layer-split"}),
              "REGAL imitation": ("regal", {"checkpoint": str(candidate)}),
              "random weights": ("regal", {"checkpoint": str(rnd_dir)})}
    for k in ids:
        item = manifest["items"][k]
        p = Problem(load_graph(corpus / item["file"]), c)
        row = result["graphs"][k] = {"family": item["family"], "nodes": p.num_nodes,
                                     "source": item.get("source"), "rows": {}}
        for label in ROWS:
            if on_step:
                on_step(f"{label} on {k} ({p.num_nodes} ops)")
            vals, secs = [], []
            for s in range(seeds):
                if label == "shuffled features":
                    v, t = shuffled_regal(p, candidate, s, evals)
                else:
                    name, kw = params[label]
                    t0 = time.perf_counter()
                    plan, _ = optimize(p, name, TASK, Budget(evals, objective="memory"), s, **kw)
                    v, t = float(simulate(p, plan).peak_memory.max()), time.perf_counter() - t0
                vals.append(v)
                secs.append(t)
            row["rows"][label] = {"values": vals, "seconds": secs}
        result["settings"]["loadavg_end"] = list(os.getloadavg())
        result["settings"]["seconds"] = round(time.perf_counter() - t_start, 1)
        if out:
            save_json(result, out)
    return result


def summary(result: dict) -> dict:
    """Per graph and row the % improvement of the mean peak over BRKGA-5K's; per row the
    mean over graphs and per family; the targets' differences in points."""
    per_graph = {}
    for k, g in result["graphs"].items():
        base = float(np.mean(g["rows"]["BRKGA-5K"]["values"]))
        per_graph[k] = {r: 100 * (base - float(np.mean(v["values"]))) / base
                        for r, v in g["rows"].items()}
    rows = [r for r in ROWS if all(r in v for v in per_graph.values())]
    mean = {r: float(np.mean([v[r] for v in per_graph.values()])) for r in rows}
    fams: dict[str, list[str]] = {}
    for k, g in result["graphs"].items():
        fams.setdefault(g["family"], []).append(k)
    per_family = {f: {r: float(np.mean([per_graph[k][r] for k in ks])) for r in rows}
                  for f, ks in sorted(fams.items())}
    gap = mean.get("REGAL imitation", 0) - mean.get("layer-split BRKGA", 0)
    return {"per_graph": per_graph, "mean": mean, "per_family": per_family,
            "regal_minus_prior": gap,
            "shuffle_loss": mean.get("REGAL imitation", 0) - mean.get("shuffled features", 0),
            "regal_minus_random": mean.get("REGAL imitation", 0) - mean.get("random weights", 0),
            "better_than_prior": sum(v["REGAL imitation"] > v["layer-split BRKGA"]
                                     for v in per_graph.values()),
            "graphs": len(per_graph)}


def to_markdown(result: dict) -> str:
    """The targets' verdicts, the mean table and the per-family table."""
    s, sm = result["settings"], summary(result)
    rows = list(sm["mean"])
    la0 = ", ".join(f"{x:.2f}" for x in s["loadavg_start"])
    la1 = ", ".join(f"{x:.2f}" for x in s.get("loadavg_end", s["loadavg_start"]))
    lines = [f"Held-out corpus graphs: {sm['graphs']} ({s['per_family']} per held-out family), "
             f"cluster `{s['cluster']}`, task {s['task']}, peak memory, {s['evals']:,} "
             f"evaluations per search, mean of {s['seeds']} seeds; load average {la0} at the "
             f"start, {la1} at the end ({s.get('seconds', 0):,.0f} s). Candidate "
             f"`{s['candidate']}` (`{s['candidate_command']}`).", "",
             f"- REGAL imitation against the prior alone: **{sm['regal_minus_prior']:+.2f} "
             f"points** (target +1.5: **{'MET' if sm['regal_minus_prior'] >= 1.5 else 'MISSED'}**"
             f"), better on {sm['better_than_prior']} of {sm['graphs']} graphs.",
             f"- Shuffled-feature control: REGAL imitation ahead of it by **"
             f"{sm['shuffle_loss']:+.2f} points** (target: at least 1: **"
             f"{'MET' if sm['shuffle_loss'] >= 1 else 'MISSED'}**).",
             f"- Random-weight control: REGAL imitation ahead of it by "
             f"**{sm['regal_minus_random']:+.2f} points**.", "",
             "| row | mean % below BRKGA-5K |", "|---|---:|"]
    lines += [f"| {r} | {sm['mean'][r]:+.2f} |" for r in rows]
    lines += ["", "Per family (% below BRKGA-5K's peak; the graph's ops):", "",
              "| family (ops) | " + " | ".join(rows[1:]) + " | BRKGA-5K MiB |",
              "|---|" + "---:|" * len(rows)]
    for k, g in result["graphs"].items():
        v = sm["per_graph"][k]
        base = float(np.mean(g["rows"]["BRKGA-5K"]["values"])) / 2**20
        lines.append(f"| {g['family']} ({g['nodes']}) | " + " | ".join(
            f"{v[r]:+.2f}" for r in rows[1:]) + f" | {base:.3f} |")
    return "\n".join(lines)
