"""GO's shipped zero-shot policy on models written elsewhere (test material, never trained on).

Every graph here is one SGD training step of a model whose layers come from another
library, traced by graphopt's torch frontend (``from_torch(..., training=True)``; the
loss is the frontend's default, the mean of the outputs):

- PyTorch's own modules: ``nn.Transformer`` (a seq2seq step, encoder and decoder),
  ``nn.TransformerEncoder``, a stack of ``nn.MultiheadAttention`` blocks, and ``nn.LSTM``
  / ``nn.GRU`` language models (the frontend traces recurrent layers without the fused
  kernel, so each time step's cell is matrix products and elementwise ops: one op per
  step and gate, not one fused op, so placement has freedom);
- PyTorch Geometric's ``torch_geometric.nn.models``: GCN, GAT, GraphSAGE and GIN on a
  synthetic graph (random features and edges, seeded). GCN and GAT run with
  ``add_self_loops=False``: adding self-loops removes the existing ones with a boolean
  mask, whose size depends on the data, so their training step does not trace;
  GraphUNet (top-k pooling) fails the same way and SchNet/DimeNet need ``pyg-lib``'s
  ``radius_graph``, which is not installed.

On each cluster the methods run through :func:`graphopt.optim.compare.compare` with one
budget and seed: ``single``, ``expert``, ``metis``, ``go`` (the shipped checkpoint,
zero-shot), ``go-finetune`` and ``portfolio`` (every heuristic, then ``sa`` from the
best). Ratios are speed-ups (the other method's step time over GO's): above 1, GO is
faster.

Usage:  nice -n 19 .venv/bin/python bench/go_outside.py [--budget 500] [--seed 0]
            [--clusters p100:2,p100:4] [--models transformer-seq2seq,gcn-16] [--docs FILE]
Writes runs/bench/go_outside.json (--out); ``--docs FILE`` also writes the go-outside
section of FILE.
"""

from __future__ import annotations

import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path


#: Every method, in table order.
METHODS = ("single", "expert", "metis", "go", "go-finetune", "portfolio")
#: Keyword arguments per method (no progress bars in a benchmark log).
PARAMS = {"go-finetune": {"progress": False}}
#: Section of docs/benchmarks.md.
SECTION = "go-outside"


def _transformer_seq2seq():
    """``nn.Transformer`` with token embeddings and an output projection (3+3 layers)."""
    import torch
    from torch import nn

    class Seq2Seq(nn.Module):
        def __init__(self, vocab: int = 8000, d: int = 512):
            super().__init__()
            self.src_embed = nn.Embedding(vocab, d)
            self.tgt_embed = nn.Embedding(vocab, d)
            self.transformer = nn.Transformer(d, 8, 3, 3, 2048, dropout=0.0, batch_first=True)
            self.generator = nn.Linear(d, vocab)

        def forward(self, src, tgt):
            mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
            # tgt_is_causal: otherwise the mask is compared with a causal one, on its values
            h = self.transformer(self.src_embed(src), self.tgt_embed(tgt), tgt_mask=mask,
                                 tgt_is_causal=True)
            return self.generator(h)

    tokens = lambda: torch.randint(0, 8000, (32, 64))  # noqa: E731
    return "torch.nn", Seq2Seq(), (tokens(), tokens())


def _transformer_encoder():
    """``nn.TransformerEncoder``, 6 layers, on embeddings (a BERT-style encoder)."""
    import torch
    from torch import nn

    layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
    return "torch.nn", model, (torch.randn(32, 128, 512),)


def _mha_stack():
    """Eight ``nn.MultiheadAttention`` blocks with residuals and ``nn.LayerNorm``."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d: int):
            super().__init__()
            self.attn = nn.MultiheadAttention(d, 8, batch_first=True)
            self.norm = nn.LayerNorm(d)

        def forward(self, x):
            return self.norm(x + self.attn(x, x, x, need_weights=False)[0])

    model = nn.Sequential(*(Block(512) for _ in range(8)))
    return "torch.nn", model, (torch.randn(32, 128, 512),)


def _rnn_lm(cell: str, layers: int, steps: int):
    """A language model: embedding, ``nn.LSTM`` or ``nn.GRU`` stack, softmax projection."""
    import torch
    from torch import nn

    class LM(nn.Module):
        def __init__(self, vocab: int = 10000, d: int = 512):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.rnn = getattr(nn, cell)(d, d, num_layers=layers)
            self.softmax = nn.Linear(d, vocab)

        def forward(self, tokens):
            return self.softmax(self.rnn(self.embed(tokens))[0])

    return lambda: ("torch.nn", LM(), (torch.randint(0, 10000, (steps, 64)),))


def _pyg(cls_name: str, layers: int, **kwargs):
    """A ``torch_geometric.nn.models`` model on 10,000 nodes and 100,000 random edges."""

    def build():
        import torch
        from torch_geometric.nn import models

        nodes, edges = 10_000, 100_000
        x = torch.randn(nodes, 128)
        edge_index = torch.randint(0, nodes, (2, edges))
        model = getattr(models, cls_name)(128, 256, layers, 16, **kwargs)
        return "torch_geometric", model, (x, edge_index)

    return build


#: name -> builder returning (library, model, example inputs); each graph has 500-20,000 ops.
MODELS: dict[str, Callable] = {
    "transformer-seq2seq": _transformer_seq2seq,
    "transformer-encoder-6": _transformer_encoder,
    "mha-stack-8": _mha_stack,
    "lstm-lm-2x20": _rnn_lm("LSTM", 2, 20),
    "gru-lm-4x16": _rnn_lm("GRU", 4, 16),
    "lstm-lm-4x40": _rnn_lm("LSTM", 4, 40),
    "gcn-16": _pyg("GCN", 16, add_self_loops=False),
    "gat-8": _pyg("GAT", 8, heads=4, add_self_loops=False),
    "graphsage-16": _pyg("GraphSAGE", 16),
    "gin-16": _pyg("GIN", 16),
}


def build_graph(name: str):
    """Trace model ``name``'s training step; returns (library, graph)."""
    import torch

    from graphopt.frontends.torch import from_torch

    torch.manual_seed(0)
    library, model, inputs = MODELS[name]()
    with warnings.catch_warnings():  # ops without a cost formula are costed from their sizes
        warnings.simplefilter("ignore")
        return library, from_torch(model, inputs, training=True, name=name)


def _figures(r) -> dict:
    return {"step_time": r.step_time if r.result.valid else None, "valid": r.result.valid,
            "reason": r.result.reason, "evals": r.stats.get("evals", 0),
            "seconds": r.stats.get("seconds")}


def _ratio(row: dict, other: str, mine: str) -> float | None:
    """Speed-up of ``mine`` over ``other`` on one row (None if either is invalid)."""
    a, b = row["methods"][other]["step_time"], row["methods"][mine]["step_time"]
    return a / b if a and b else None


#: The ratio columns: (label, other method, GO's method).
RATIOS = (("go vs expert", "expert", "go"), ("go vs metis", "metis", "go"),
          ("go-finetune vs portfolio", "portfolio", "go-finetune"))


def run(models: list[str], clusters: list[str], budget: int, seed: int,
        out: Path | None) -> dict:
    """Every model on every cluster; results saved to ``out`` after each row."""
    from graphopt.benchmarks import geomean, save_json
    from graphopt.hardware import load_cluster
    from graphopt.optim.base import Budget
    from graphopt.optim.compare import compare
    from graphopt.sim import Problem

    result = {"benchmark": "go-outside",
              "settings": {"models": models, "clusters": clusters, "budget": budget,
                           "seed": seed, "methods": list(METHODS)},
              "machine": {"cpu": platform.processor() or platform.machine(),
                          "python": platform.python_version()},
              "rows": []}
    for name in models:
        t0 = time.perf_counter()
        library, graph = build_graph(name)
        trace_s = time.perf_counter() - t0
        for cluster in clusters:
            prob = Problem(graph, load_cluster(cluster))
            print(f"{name} ({graph.num_nodes:,} ops) on {cluster}", file=sys.stderr, flush=True)
            res = compare(prob, list(METHODS), "placement", Budget(budget), seed,
                          on_start=lambda m: print(f"  {m}", file=sys.stderr, flush=True),
                          params=PARAMS)
            row = {"model": name, "library": library, "ops": graph.num_nodes,
                   "cluster": cluster, "trace_seconds": trace_s,
                   "lower_bound": prob.lower_bound,
                   "methods": {r.method: _figures(r) for r in res}}
            result["rows"].append(row)
            if out:
                save_json(result, out)
    rows = result["rows"]
    result["geomean"] = {label: geomean([x for x in (_ratio(r, o, m) for r in rows) if x])
                         for label, o, m in RATIOS}
    # "at least as good": GO's step time no longer than the other's
    result["go_at_least_expert_and_metis"] = sum(
        (_ratio(r, "expert", "go") or 0) >= 1 and (_ratio(r, "metis", "go") or 0) >= 1
        for r in rows)
    if out:
        save_json(result, out)
    return result


def to_markdown(result: dict) -> str:
    """The table: step times per method, GO's ratios, geomeans and rows won."""
    rows = result["rows"]
    head = ["model", "library", "ops", "cluster", *METHODS, *(r[0] for r in RATIOS)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        ms = row["methods"]
        cells = ["OOM" if ms[m]["step_time"] is None else f"{ms[m]['step_time'] * 1e3:.2f}"
                 for m in METHODS]
        ratios = []
        for _, other, mine in RATIOS:
            x = _ratio(row, other, mine)
            ratios.append("-" if x is None else f"{x:.3f}x")
        out.append(f"| {row['model']} | {row['library']} | {row['ops']:,} | {row['cluster']} | "
                   + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    gm = result["geomean"]
    out.append("| **geomean** | | | | " + " | " * (len(METHODS) - 1) + " | "
               + " | ".join("-" if gm[r[0]] is None else f"{gm[r[0]]:.3f}x" for r in RATIOS)
               + " |")
    out += ["", f"GO zero-shot at least as fast as both `expert` and `metis` on "
            f"{result['go_at_least_expert_and_metis']} of {len(rows)} rows."]
    return "\n".join(out)
