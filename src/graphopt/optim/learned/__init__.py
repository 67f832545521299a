"""Learned placers: policies trained by reinforcement learning against the simulator.

=========  =====================================================================
name       what it does
=========  =====================================================================
rl-lstm    Mirhoseini et al. 2017: colocation groups placed one by one by an
           LSTM encoder–decoder with attention, REINFORCE on √(step time)
hdp        Mirhoseini et al. 2018 (hierarchical): a feed-forward grouper (ops →
           groups) and an LSTM placer (groups → devices), trained jointly
=========  =====================================================================

Both learn the placement of one graph from scratch within the evaluation budget,
keep colocation groups on one device, save and resume checkpoints (safetensors +
JSON) and report their learning curve.
"""

from graphopt.optim.learned.hdp import HDP
from graphopt.optim.learned.rl_lstm import RLLSTM

__all__ = ["HDP", "RLLSTM"]
