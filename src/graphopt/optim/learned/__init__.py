"""Learned placers: policies trained by reinforcement learning against the simulator.

=========  =====================================================================
name       what it does
=========  =====================================================================
rl-lstm    Mirhoseini et al. 2017: colocation groups placed one by one by an
           LSTM encoder–decoder with attention, REINFORCE on √(step time)
hdp        Mirhoseini et al. 2018 (hierarchical): a feed-forward grouper (ops →
           groups) and an LSTM placer (groups → devices), trained jointly
go         GO (Zhou et al. 2020), zero-shot: the pre-trained GraphSAGE +
           segment-recurrent attention policy, one forward pass
go-finetune  GO's pre-trained policy fine-tuned by PPO on the graph
go-one     GO trained from scratch by PPO on one graph
=========  =====================================================================

Both learn the placement of one graph from scratch within the evaluation budget,
keep colocation groups on one device, save and resume checkpoints (safetensors +
JSON) and report their learning curve.
"""

from graphopt.optim.learned.go import GO, GOFinetune, GOOne
from graphopt.optim.learned.hdp import HDP
from graphopt.optim.learned.rl_lstm import RLLSTM

__all__ = ["GO", "GOFinetune", "GOOne", "HDP", "RLLSTM"]
