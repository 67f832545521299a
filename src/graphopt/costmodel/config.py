"""A cost-model run's hyperparameters, apart from the training code so that the command
line can list them without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphopt.errors import MAX_SEED, MAX_THREADS

__all__ = ["TrainConfig"]


def _f(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    """Every hyperparameter of a cost-model run (each becomes a CLI option)."""

    data: str = _f("", "Training data: a directory of TpuGraphs .npz files (with train/ and valid/ "
                       "subfolders, or split by --split), one .npz, or a tuning .pb.")
    split: str = _f("auto", "How to hold out test data: 'dirs' (train/ and valid/ subfolders), "
                            "'configs' (a fraction of each graph's configurations), 'graphs' (whole "
                            "graphs), 'auto' (dirs if present, else graphs, else configs).",
                    choices=("auto", "dirs", "configs", "graphs"))
    test_fraction: float = _f(0.25, "Fraction held out by --split configs or graphs.", gt=0, max=1)
    test_graphs: str = _f("", "Comma-separated graph names to hold out (split 'graphs').")
    model: str = _f("auto", "tile_sage, layout_gcn, config_attention, or auto (the collection's "
                            "TpuGraphs baseline).")
    hidden: int = _f(0, "Width of node states and head (0: the model's default).", min=0, max=8192)
    op_embed: int = _f(0, "Opcode embedding width (0: the model's default, 64 tile / 32 layout).",
                       min=0, max=8192)
    layers: int = _f(0, "Message-passing layers (0: the model's default).", min=0, max=64)
    dropout: float = _f(0.0, "Dropout on node states.", min=0, max=1)
    loss: str = _f("listmle", "Ranking loss: listmle, hinge (pairwise, margin 0.1) or mse.")
    mse_weight: float = _f(0.0, "Weight of an extra MSE term (the tile baseline uses a small one).",
                           min=0)
    margin: float = _f(0.1, "Margin of the pairwise hinge loss.", min=0)
    epochs: int = _f(20, "Passes over the training graphs; an epoch is one step per training "
                         "graph, so on one graph (split configs) raise it (e.g. 500).", min=1)
    lr: float = _f(1e-3, "Adam learning rate.", gt=0)
    weight_decay: float = _f(0.0, "Adam weight decay.", min=0)
    configs_per_graph: int = _f(32, "Configurations of one graph scored together in a step.", min=2)
    fast_bias: float = _f(0.0, "Skew config sampling toward fast ones (0: uniform; layout "
                               "baseline style: 2).", min=0)
    dedup: bool = _f(True, "Merge repeated configurations (runtime: their mean).")
    prune_hops: int = _f(-1, "Keep configurable nodes and their k-hop neighbours (-1: all nodes).",
                         min=-1)
    gst: bool = _f(False, "Graph Segment Training instead of full-graph back-propagation.")
    segment_size: int = _f(1000, "GST: nodes per segment.", min=1)
    fresh_segments: int = _f(1, "GST: segments back-propagated per step.", min=1)
    sed_p: float = _f(0.5, "GST: stale embedding dropout probability.", min=0, max=1)
    halo: int = _f(-1, "GST: hops of context around a segment (-1: layers + 1, exact; 0: cut "
                       "edges as in the paper).", min=-1)
    eval_chunk: int = _f(256, "Configurations scored at once at evaluation (a cross-configuration "
                              "model compares those of one chunk, so scores are comparable within it).",
                         min=1)
    eval_every: int = _f(0, "Evaluate the held-out set every N epochs and after the last one (0: "
                            "about 10 evaluations per run; evaluation dominates short epochs).",
                         min=0)
    seed: int = _f(0, "Seed of every random choice.", min=0, max=MAX_SEED)
    device: str = _f("cpu", "Torch device.")
    threads: int = _f(1, "Torch CPU threads.", min=0, limit=MAX_THREADS)
    out: str = _f("runs/costmodel", "Folder under which the run directory is created.")
    run_name: str = _f("", "Run directory name (default {data}__{model}__{seed}__{time}).")
    resume: str = _f("", "Run directory to continue (its config.json is used; epochs may be raised).")
    progress: bool = _f(True, "Show a progress bar.")
