"""Neural-network layers of the learned optimizers: a GraphSAGE encoder, segment-recurrent
attention with feature modulation, and GO's multi-task policy.

Layers see tensors only (features, edges, masks); building those from a problem is the
trainer's job (:mod:`graphopt.rl.go_env`), so ``nn`` never imports the simulator.
"""

from graphopt.nn.attention import FiLM, SegmentRecurrentAttention
from graphopt.nn.go import TASK_LEVELS, GOPolicy, GOPolicyConfig
from graphopt.nn.sage import BiSAGE

__all__ = ["BiSAGE", "FiLM", "GOPolicy", "GOPolicyConfig", "SegmentRecurrentAttention",
           "TASK_LEVELS"]
