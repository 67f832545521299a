"""TpuGraphs-style learned cost models: data, models, Graph Segment Training, losses,
metrics, training and analytical baselines.

See ``docs/costmodel.md``. ``train(TrainConfig(data=...))`` trains a model and returns
its run directory; ``evaluate`` and ``rank`` use one.
"""

from graphopt.costmodel.data import (CostGraph, CostModelError, FeatureNormalizer, deduplicate,
                                     load_dataset, prune, sample_configs, split_configs, split_graphs)
from graphopt.costmodel.gst import HistoryTable, gst_scores, measure_step, partition
from graphopt.costmodel.metrics import (kendall_tau, listmle_loss, mse_loss, ordered_pair_accuracy,
                                        pairwise_hinge_loss, ranking_metrics, tile_score, top_k_error)
from graphopt.costmodel.models import MODELS, ConfigAttention, CostModel, LayoutGCN, TileSAGE, build_model
from graphopt.costmodel.train import TrainConfig, evaluate, load_run, rank, train

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
