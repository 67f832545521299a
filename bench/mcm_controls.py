"""Zero-shot controls of a pre-trained MCM policy (docs/mcm.md, "Learning from search"):
per graph and preset, the best of 16 repaired proposals (the most likely one and 15
drawn, the prior centred on each unit's compute position as with ``from_greedy=false``:
what fine-tuning's first batch sees) of

- ``candidate``: the policy in ``--candidate``;
- ``shuffled``: the same with the network's input features permuted across units (the
  prior's two position columns kept, so the prior is intact and only what the network
  reads is scrambled);
- ``random``: the same network with random weights (``mcm-one``'s initialization at this
  seed: fine-tuning it is training from scratch);
- ``prior``: the hand-written positional prior alone (the random network's output layer
  zeroed);
- ``shipped``: the policy in the package;

and the best contiguous partition (``mcm-greedy``) for reference. With ``--save-controls
DIR``, the ``random`` and ``prior`` policies are saved as ``DIR/random`` and ``DIR/prior``
for ``graphopt bench mcm -p mcm-finetune.checkpoint=DIR/prior``.

Usage: python bench/mcm_controls.py --candidate runs/mcm-imitate [--graphs bert-base]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from graphopt.benchmarks.mcm import PRESETS
from graphopt.zoo import forward_graph
from graphopt.hardware import load_cluster
from graphopt.optim.base import Budget, optimize
from graphopt.optim.learned.go.env import GOEnv
from graphopt.optim.learned.mcm.method import MAX_CHIPS, load_mcm_policy, new_policy
from graphopt.optim.partition.methods import PartitionSearch
from graphopt.rl.ppo import sample
from graphopt.runs.checkpoint import save_policy
from graphopt.runs.run import seed_everything
from graphopt.sim import Problem

SAMPLES = 16
PLACEMENT = frozenset({"placement"})


def zero_shot(problem: Problem, policy, seed: int, repair_seconds: float,
              shuffle: bool = False) -> float | None:
    """Throughput of the best of ``SAMPLES`` repaired proposals of ``policy`` (None: none
    valid), the network's features permuted across units when ``shuffle``."""
    generator = seed_everything(seed, 1)
    s = PartitionSearch(problem, Budget(evals=SAMPLES), repair_seconds)
    x, *rest = GOEnv(problem, PLACEMENT, s.unit).inputs()
    if shuffle:
        keep = list(policy.config.position_columns)
        perm = torch.as_tensor(np.random.default_rng(seed).permutation(s.num_units))
        shuffled = x[perm]
        shuffled[:, keep] = x[:, keep]
        x = shuffled
    with torch.no_grad():
        logits = policy(x, *rest, tasks=("placement",))
    prop = sample(logits, SAMPLES, generator)["placement"]
    prop[0] = logits["placement"].argmax(1).numpy()
    probs = torch.softmax(logits["placement"], dim=1).numpy()
    s.price(prop, probs[np.arange(s.num_units), prop], seed)
    return 1 / s.best_interval if s.best is not None else None


def controls(seed: int) -> dict:
    """The random-weight network (``mcm-one``'s at ``seed``) and the prior alone."""
    random = new_policy(seed, max_devices=MAX_CHIPS)
    prior = new_policy(seed, max_devices=MAX_CHIPS)
    prior.zero_head("placement")
    return {"random": random, "prior": prior}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidate", required=True, help="folder of the policy to test")
    ap.add_argument("--graphs", default="bert-base")
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repair-seconds", type=float, default=0.25)
    ap.add_argument("--save-controls", default=None, help="folder to save random/ and prior/ in")
    ap.add_argument("--out", default=None, help="results JSON")
    args = ap.parse_args()
    policies = {"candidate": load_mcm_policy(args.candidate)[0], **controls(args.seed),
                "shipped": load_mcm_policy()[0]}
    if args.save_controls:
        for name in ("random", "prior"):
            p = policies[name]
            save_policy(f"{args.save_controls}/{name}", p, p.config_dict(), {
                "command": f"python bench/mcm_controls.py --save-controls {args.save_controls} "
                           f"--seed {args.seed}", "control": name, "seed": args.seed})
    rows = []
    print("| graph | chips | best contiguous | candidate | shuffled features | random weights "
          "| prior alone | shipped |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for graph in args.graphs.split(","):
        g = forward_graph(graph)
        for preset in args.presets.split(","):
            problem = Problem(g, load_cluster(preset))
            row = {"graph": graph, "chips": problem.num_devices,
                   "greedy": optimize(problem, "mcm-greedy", "placement", Budget(evals=3),
                                      args.seed)[1]["throughput"]}
            for name, p in policies.items():
                row[name] = zero_shot(problem, p, args.seed, args.repair_seconds)
                if name == "candidate":
                    row["shuffled"] = zero_shot(problem, p, args.seed, args.repair_seconds, True)
            rows.append(row)
            cells = [row[k] for k in ("greedy", "candidate", "shuffled", "random", "prior",
                                      "shipped")]
            print(f"| {graph} | {row['chips']} | " + " | ".join(
                "-" if c is None else f"{c:,.0f}" for c in cells) + " |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"candidate": args.candidate, "seed": args.seed,
                       "repair_seconds": args.repair_seconds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
