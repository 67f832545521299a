"""Neural-network layers of the learned optimizers: a GraphSAGE encoder, segment-recurrent
attention with feature modulation, GO's multi-task policy and its chiplet variant
(multi-chip partitioning), the networks of the REINFORCE placers (the attention LSTM
placer and HDP's grouper), and REGAL's per-node distributions for BRKGA.

Layers see tensors only (features, edges, masks); building those from a problem is the
trainer's job (:mod:`graphopt.rl.go_env`), so ``nn`` never imports the simulator.
"""

from graphopt.nn.attention import FiLM, SegmentRecurrentAttention
from graphopt.nn.chiplet import ChipletPolicy, ChipletPolicyConfig
from graphopt.nn.go import TASK_LEVELS, GOPolicy, GOPolicyConfig
from graphopt.nn.grouper import Grouper
from graphopt.nn.regal import REGALHead
from graphopt.nn.sage import BiSAGE
from graphopt.nn.seq2seq import AttentionLSTMPlacer

__all__ = ["AttentionLSTMPlacer", "BiSAGE", "ChipletPolicy", "ChipletPolicyConfig", "FiLM",
           "GOPolicy", "GOPolicyConfig", "Grouper", "REGALHead", "SegmentRecurrentAttention",
           "TASK_LEVELS"]
