"""One round of expert iteration for a prior-aware GO policy (an experiment, docs/go.md).

For every train target of a corpus, the policy's best plan off the prior (its 16
ranked-move plans, as ``go`` makes them; the prior where none is faster) becomes a
second start; the gain of every single move off it is simulated, and a fresh policy
learns to rank the moves of both starts (the prior's, kept in the corpus, and these).

Usage:  OMP_NUM_THREADS=1 .venv/bin/python bench/go_prior_expert_iteration.py CORPUS POLICY OUT
        (the experiment: runs/corpus src/graphopt/optim/learned/checkpoints/go-prior
        runs/go-prior-ei; 410 s for the starts and their moves, 60 epochs in 10 min)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from graphopt._files import check_output
from graphopt.evaluate.local import LocalEvaluator
from graphopt.errors import GraphoptError
from graphopt.ir.coarsen import colocation_groups
from graphopt.optim.learned.go.env import GOEnv
from graphopt.optim.learned.go.imitate import imitate
from graphopt.optim.learned.go.method import load_go_policy, ranked_moves
from graphopt.optim.learned.targets import load_targets, move_gains, prior_moves, prior_plans
from graphopt.sim import Plan


def main() -> None:
    if len(sys.argv) != 4:
        print("usage: " + __doc__.split("Usage:")[1].strip(), file=sys.stderr)
        sys.exit(2)
    corpus, policy_dir, out = sys.argv[1:]
    try:
        check_output(Path(out), "OUT", folder=True)
    except GraphoptError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    t0 = time.perf_counter()
    targets = load_targets(corpus)
    priors = prior_plans(corpus, targets)
    units = [colocation_groups(t.problem.graph) for t in targets]
    moves = prior_moves(corpus, targets, priors, units)
    policy, _ = load_go_policy(policy_dir)
    kept, starts, start_moves = [], [], []
    for t, prior, unit in zip(targets, priors, units):
        env = GOEnv(t.problem, frozenset({"placement"}), "groups", prior, prior_inputs=True)
        if env.home is None:
            continue
        with torch.no_grad():
            z = policy(*env.inputs(), tasks=("placement",))["placement"]
        ev = LocalEvaluator(t.problem)
        ev.evaluate(ranked_moves(z, env.home, 16)[:, env.unit])
        base = ev.evaluate(np.asarray(prior.placement)[None])
        start = ev.best_plan if ev.best_time < float(base.step_time[0]) else prior
        kept.append(t)
        starts.append(Plan(placement=np.asarray(start.placement)))
        start_moves.append(move_gains(t.problem, starts[-1], unit))
    print(f"{len(starts)} second starts and their moves in {time.perf_counter() - t0:.0f} s",
          flush=True)
    imitate(targets + kept, out, epochs=60, priors=priors + starts, moves=moves + start_moves,
            command="python bench/go_prior_expert_iteration.py " + " ".join(sys.argv[1:]),
            progress=lambda row: print(row, flush=True))


if __name__ == "__main__":
    main()
