"""Learned optimizers: policies trained by reinforcement learning against the simulator.

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
"""

from graphopt.optim.learned.go import GO, GOFinetune, GOOne
from graphopt.optim.learned.hdp import HDP
from graphopt.optim.learned.mcm import MCM, MCMFinetune, MCMOne
from graphopt.optim.learned.regal import REGAL
from graphopt.optim.learned.rl_lstm import RLLSTM

__all__ = ["GO", "GOFinetune", "GOOne", "HDP", "MCM", "MCMFinetune", "MCMOne", "REGAL", "RLLSTM"]
