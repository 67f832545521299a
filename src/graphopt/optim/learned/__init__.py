"""Learned optimizers: policies trained by reinforcement learning against the simulator.

Each method is one home here, holding its network head, its trainer and its decoding:
``go/``, ``mcm/``, ``regal/``, ``hdp/`` and the module ``rl_lstm``. What several of them
share sits below: layers in :mod:`graphopt.nn`, PPO and REINFORCE in :mod:`graphopt.rl`,
checkpoints and run logs in :mod:`graphopt.runs`.

===========  =====================================================================
name         what it does
===========  =====================================================================
rl-lstm      Mirhoseini et al. 2017: colocation groups placed one by one by an
             LSTM encoder–decoder with attention, REINFORCE on √(step time)
hdp          Mirhoseini et al. 2018 (hierarchical): a feed-forward grouper (ops →
             groups) and an LSTM placer (groups → devices), trained jointly
go           GO (Zhou et al. 2020), zero-shot: the shipped pre-trained GraphSAGE +
             segment-recurrent attention policy, one forward pass, no training
go-finetune  GO's pre-trained policy trained further by PPO on the graph
go-one       GO's policy trained from scratch by PPO on the graph alone
mcm          Xie et al. 2022, multi-chip partitioning: GO's network with a chiplet head
             proposes, CP-SAT repairs (also mcm-finetune, mcm-one; docs/mcm.md)
regal        REGAL (Paliwal et al. 2020): BRKGA whose per-node mutant Beta
             distributions and crossover bias come from a GNN trained once (REINFORCE)
===========  =====================================================================

All keep colocation groups on one device, save and resume checkpoints (safetensors +
JSON) and report their learning curve; GO also decides scheduling and fusion.

Importing this package loads no method (nor torch): the registry imports
:data:`METHOD_MODULES` on first use, and a class named here loads its module when read.
"""

from graphopt._lazy import lazy_exports

__all__ = ["GO", "GOFinetune", "GOOne", "HDP", "MCM", "MCMFinetune", "MCMOne", "REGAL", "RLLSTM"]

_CLASSES = {
    "graphopt.optim.learned.go.method": ("GO", "GOFinetune", "GOOne"),
    "graphopt.optim.learned.hdp.method": ("HDP",),
    "graphopt.optim.learned.mcm.method": ("MCM", "MCMFinetune", "MCMOne"),
    "graphopt.optim.learned.regal.method": ("REGAL",),
    "graphopt.optim.learned.rl_lstm": ("RLLSTM",),
}
#: The modules whose import registers the learned methods (:func:`graphopt.optim.base.list_optimizers`).
METHOD_MODULES = tuple(_CLASSES)

__getattr__ = lazy_exports(__name__, _CLASSES)
