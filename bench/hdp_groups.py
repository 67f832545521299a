"""What ``hdp``'s groups let a placer reach.

HDP places *groups* of ops, so its plans are whatever a device per group can express.
On each row, for groupings of the ops into ``G`` groups (``G`` = grappler's
``min(256, 20 · devices)`` and 256):

- ``random``: each op in a uniformly random group — HDP's grouper before training;
- ``blocks``: contiguous blocks of equal op count in the model's layer order
  (:func:`graphopt.ir.features.layer_order`): each layer's forward, backward and update
  ops together, ``hdp``'s first groupings;
- ``metis``: a METIS partition of the colocation units into ``G`` parts, balanced by
  compute and cutting the fewest bytes;

three figures: the median step time of 16 uniformly random placements of the groups,
the best the grouping can express of the human expert's plan (each group on the device
most of its ops have there), and the layout ``hdp``'s placer prior leans to (group ``g``
on device ``floor((g + 1/2) D / G)``: with ``blocks``, the layers in D contiguous runs). Colocation groups
are made whole as in ``hdp`` (:func:`graphopt.optim.heuristics._common.unify_groups`).
``single`` and ``expert`` are the references.

Usage:  .venv/bin/python bench/hdp_groups.py [--rows rnnlm-2]
Writes runs/bench/hdp_groups.json (--out) and, with --docs FILE, FILE's hdp-groups section.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import numpy as np
from graphopt.benchmarks import parse_bench_args


def layer_blocks(graph, parts: int) -> np.ndarray:
    """Group of every op: ``parts`` contiguous blocks of the layer order (the ``hdp``
    grouper's first groupings)."""
    from graphopt.ir.features import layer_order

    return np.minimum(layer_order(graph) * parts // max(graph.num_nodes, 1), parts - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="rnnlm-2", help="GO Table 2 rows, comma-separated")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/hdp_groups.json"))
    ap.add_argument("--docs", type=Path, default=None,
                    help="Markdown file whose section is rewritten (default: none)")
    a = parse_bench_args(ap)
    from graphopt.benchmarks import replace_section, save_json
    from graphopt.benchmarks.go_table2 import row_entry
    from graphopt.hardware import load_cluster
    from graphopt.optim import Budget, optimize
    from graphopt.optim.heuristics._common import unify_groups
    from graphopt.optim.heuristics.metis import metis_parts
    from graphopt.sim import Plan, Problem, simulate
    from graphopt.zoo import build

    rows = []
    for name in a.rows.split(","):
        entry = row_entry(name)
        prob = Problem(build(entry), load_cluster(f"p100:{entry.num_devices}"))
        g, d = prob.graph, prob.num_devices

        def step(placement: np.ndarray, prob=prob) -> float:
            placement = unify_groups(prob.graph, placement, prob.num_devices)
            return float(simulate(prob, Plan(placement=placement)).step_time)

        ref = {m: float(simulate(prob, optimize(prob, m, "placement", Budget(100), 0)[0]).step_time)
               for m in ("single", "expert")}
        expert = optimize(prob, "expert", "placement", Budget(100), 0)[0].placement
        rng = np.random.default_rng(0)
        row = {"model": name, "ops": g.num_nodes, "devices": d, **ref, "groupings": []}
        for count in sorted({min(256, 20 * d), 256}):
            for kind, grp in (("random", rng.integers(count, size=g.num_nodes)),
                              ("blocks", layer_blocks(g, count)),
                              ("metis", metis_parts(prob, count))):
                major = np.array([np.bincount(expert[grp == j], minlength=d).argmax()
                                  if (grp == j).any() else 0 for j in range(count)])
                rand = [step(rng.integers(d, size=count)[grp]) for _ in range(16)]
                layout = ((np.arange(count) + 0.5) * d / count).astype(np.int64)
                row["groupings"].append({"groups": count, "kind": kind,
                                         "random_placements_median": float(np.median(rand)),
                                         "expert_mapped": step(major[grp]),
                                         "layout": step(layout[grp])})
                print(name, count, kind, row["groupings"][-1], flush=True)
        rows.append(row)
    save_json({"benchmark": "hdp_groups", "machine": {"python": platform.python_version()},
               "rows": rows}, a.out)
    lines = ["## What hdp's groups can express", "",
             f"`.venv/bin/python bench/hdp_groups.py --rows {a.rows}` — p100, step times in ms "
             "(simulated; deterministic). Per grouping: the median of 16 random placements "
             "of the groups (what REINFORCE samples first) and the expert's plan mapped "
             "onto the groups (each group on its ops' majority device there), and the layout "
             "`hdp`'s placer prior leans to (group g on device floor((g + 1/2) D / G)).", "",
             "| model | single | expert | groups | grouping | random placements (median) | "
             "expert mapped onto the groups | layout |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for x in r["groupings"]:
            lines.append(f"| {r['model']} | {r['single'] * 1e3:.1f} | {r['expert'] * 1e3:.1f} | "
                         f"{x['groups']} | {x['kind']} | "
                         f"{x['random_placements_median'] * 1e3:.1f} | "
                         f"{x['expert_mapped'] * 1e3:.1f} | {x['layout'] * 1e3:.1f} |")
    if a.docs:
        replace_section(a.docs, "hdp-groups", "\n".join(lines))


if __name__ == "__main__":
    main()
