"""The chiplet policy's split of a training pipeline: the pipeline task's method ``mcm``
(:func:`graphopt.optim.partition.pipeline.plan_pipeline`).

The policy of multi-chip partitioning partitions an inference graph into a pipeline of
chips; a pipeline of ``K`` training stages is one too, cut at layer boundaries. So the
shipped policy reads the forward pass of one microbatch's training step on the ``K``
stages' devices, as it reads a graph on ``K`` chips, and gives each unit
(:func:`~graphopt.optim.partition.constraints.pipeline_units`) its most likely chip:
zero-shot and greedy, its prior centred on each unit's compute position as in
pre-training (no heuristic partition to anchor it, so that the split is the policy's
own), drawing nothing at random. Each layer then goes to the chip that got most of its
forward compute, and the layers' chips become the contiguous split of ``K`` non-empty
stages that changes the fewest layers
(:func:`~graphopt.optim.partition.pipeline.contiguous_split`).

Not the CP-SAT repair of the multi-chip methods: its partitions are valid pipelines of
units, which may cut inside a layer and leave chips empty, where a pipeline stage is a
run of whole layers and every stage runs one. The backward and the update are left out
of what the policy reads: they run backwards along the layers, which no partition of
its pre-training has. ``exact`` is optimal under the model, so this split at best ties
it; its gap to ``exact`` measures the policy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphopt.errors import UsageError
from graphopt.optim.learned.go.env import GOEnv
from graphopt.optim.learned.mcm.method import load_mcm_policy
from graphopt.optim.partition.constraints import pipeline_units
from graphopt.optim.partition.pipeline import contiguous_split
from graphopt.sim import Problem
from graphopt.sim.pipeline import LayerCosts

__all__ = ["mcm_split"]


def mcm_split(problem: Problem, costs: LayerCosts, stages: int,
              checkpoint: str | Path | None = None) -> tuple[int, ...]:
    """The policy's split of ``costs``' layers into ``stages`` contiguous stages (module
    docstring).

    Parameters
    ----------
    problem : Problem
        One microbatch's training step on the stages' devices (the first ``stages``).
    costs : LayerCosts
        Its layers (:func:`~graphopt.sim.pipeline.layer_costs`): the layer of every op,
        and which ops are the forward pass.
    stages : int
    checkpoint : str or Path, optional
        Folder of a saved MCM policy; None: the shipped one.

    Returns
    -------
    tuple of int
        ``stages + 1`` rising layer indices from 0 to the number of layers.

    Raises
    ------
    GraphoptError
        More stages than the policy's chiplet head serves (16) or than layers.
    """
    policy, _ = load_mcm_policy(checkpoint)
    if stages > policy.config.max_devices:
        raise UsageError(f"--stages {stages}: the chiplet policy of method mcm serves at "
                         f"most {policy.config.max_devices} stages")
    fwd = np.arange(problem.num_nodes) if costs.forward is None else np.flatnonzero(costs.forward)
    sub = Problem(problem.graph.subgraph(fwd), problem.cluster.take(stages))
    unit = pipeline_units(sub)
    x, *rest = GOEnv(sub, frozenset({"placement"}), unit).inputs()
    with torch.no_grad():
        chips = policy(x, *rest, tasks=("placement",))["placement"].argmax(1).numpy()[unit]
    compute = np.bincount(costs.layer[fwd] * stages + chips,
                          sub.costs.time[np.arange(len(fwd)), chips],
                          minlength=costs.num_layers * stages)
    return contiguous_split(compute.reshape(-1, stages).argmax(1), stages)
