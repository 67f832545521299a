"""TpuGraphs-style learned cost models: data, models, Graph Segment Training, losses,
metrics, training and analytical baselines.

See ``docs/costmodel.md``. ``train(TrainConfig(data=...))`` trains a model and returns
its run directory; ``evaluate`` and ``rank`` use one.
"""

from graphopt._lazy import lazy_exports

__all__ = [
    "MODELS",
    "ConfigAttention",
    "CostGraph",
    "CostModel",
    "CostModelError",
    "FeatureNormalizer",
    "HistoryTable",
    "LayoutGCN",
    "TileSAGE",
    "TrainConfig",
    "build_model",
    "deduplicate",
    "evaluate",
    "gst_scores",
    "kendall_tau",
    "listmle_loss",
    "load_dataset",
    "load_run",
    "measure_step",
    "mse_loss",
    "ordered_pair_accuracy",
    "pairwise_hinge_loss",
    "partition",
    "prune",
    "rank",
    "ranking_metrics",
    "sample_configs",
    "split_configs",
    "split_graphs",
    "tile_score",
    "top_k_error",
    "train",
]

# Names load from their module on first use: the models and the trainer import torch
# and PyTorch Geometric, which the command line and the config alone should not pay.
__getattr__ = lazy_exports(__name__, {
    "graphopt.costmodel.data": ("CostGraph", "CostModelError", "FeatureNormalizer", "deduplicate",
                                "load_dataset", "prune", "sample_configs", "split_configs",
                                "split_graphs"),
    "graphopt.costmodel.gst": ("HistoryTable", "gst_scores", "measure_step", "partition"),
    "graphopt.costmodel.metrics": ("kendall_tau", "listmle_loss", "mse_loss",
                                   "ordered_pair_accuracy", "pairwise_hinge_loss",
                                   "ranking_metrics", "tile_score", "top_k_error"),
    "graphopt.costmodel.models": ("MODELS", "ConfigAttention", "CostModel", "LayoutGCN", "TileSAGE",
                                  "build_model"),
    "graphopt.costmodel.config": ("TrainConfig",),
    "graphopt.costmodel.trainer": ("evaluate", "load_run", "rank", "train"),
})
