"""Neural-network layers several learned optimizers share: a GraphSAGE encoder,
segment-recurrent attention with feature modulation, and the attention LSTM placer of
the REINFORCE placers. A method's own head lives with the method, under
:mod:`graphopt.optim.learned` (GO's policy in ``go/policy.py``, its chiplet variant in
``mcm/chiplet.py``, HDP's grouper in ``hdp/grouper.py``, REGAL's head in
``regal/head.py``).

Layers see tensors only (features, edges, masks); building those from a problem is the
method's job, so ``nn`` never imports the simulator.
"""

from graphopt.nn.attention import FiLM, SegmentRecurrentAttention
from graphopt.nn.sage import BiSAGE
from graphopt.nn.seq2seq import AttentionLSTMPlacer

__all__ = ["AttentionLSTMPlacer", "BiSAGE", "FiLM", "SegmentRecurrentAttention"]
