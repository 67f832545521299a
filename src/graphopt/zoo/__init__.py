"""The benchmark zoo: the models learned-placement papers measured, in plain PyTorch.

Seventeen named entries — RNNLM, GNMT and Transformer-XL at 2, 4 and 8 layers,
Inception-v3 at batch 32 and 64, AmoebaNet-D, WaveNet 2×18 and 4×36 (the models of
GO's Table 2), plus BERT-base, GPT-2 small and ResNet-50 — each built as one whole
training step (forward, loss, backward, SGD update) by the PyTorch frontend, with
recurrences unrolled as TensorFlow's static graphs had them, and cached on disk.

>>> from graphopt import zoo
>>> zoo.get_entry("gnmt-8").num_devices
8
>>> graph = zoo.build("gnmt-8")  # doctest: +SKIP
"""

from graphopt.zoo.cache import build, cache_dir, cache_path, forward_graph
from graphopt.zoo.registry import (
    HELD_OUT_FAMILIES,
    ReportedStepTimes,
    ZooEntry,
    get_entry,
    list_models,
)

__all__ = [
    "HELD_OUT_FAMILIES",
    "ReportedStepTimes",
    "ZooEntry",
    "build",
    "cache_dir",
    "cache_path",
    "forward_graph",
    "get_entry",
    "list_models",
]
