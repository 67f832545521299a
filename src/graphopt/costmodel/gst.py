"""Graph Segment Training (GST): train on graphs too large to back-propagate through whole.

Cao, Phothilimthana, Abu-El-Haija et al., "Learning Large Graph Property Prediction via
Graph Segment Training", NeurIPS 2023.

A graph is cut into segments of about ``segment_size`` nodes (:func:`partition`:
contiguous ranges of the topological order, which keeps producer-consumer chains
together). A model whose pooling is additive (every :class:`~graphopt.costmodel.models.CostModel`)
predicts from the sum of per-segment statistics. In a training step
(:func:`gst_scores`) only ``fresh`` sampled segments are computed with gradients;
the others come from a *historical embedding table* (:class:`HistoryTable`) keyed by
(graph, configuration, segment), filled without gradients the first time an entry is
needed and refreshed whenever a segment is fresh. *Stale embedding dropout* drops each
stale segment with probability ``p`` (0.5) and scales the kept ones by ``1 / (1 - p)``
so that the expected total is unchanged (our choice; the paper drops without saying
how it rescales).

Halo. Each segment is encoded together with its ``halo``-hop neighbourhood (edges both
ways), but only its own nodes are pooled. With ``halo >= layers + 1`` a segment's node
states equal the full graph's exactly (the +1 covers GCN's degree normalization), so
GST with every segment fresh reproduces the full-graph prediction; ``halo = 0`` is the
paper's setting (edges between segments cut), cheaper and an approximation.

:func:`measure_step` times one training step and measures its memory: the bytes of
tensors saved for backward (exact and comparable on any device), the CUDA peak
allocated on a GPU, and the process's resident set size.

Not modelled: the paper's final fine-tuning of the head on full graphs (run a few
epochs with ``gst=False`` for that), and segment sampling other than uniform.
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from graphopt.costmodel.models import CostModel

__all__ = ["HistoryTable", "Segment", "gst_scores", "measure_step", "partition"]


@dataclass(frozen=True, eq=False)
class Segment:
    """One segment of a graph.

    Attributes
    ----------
    nodes : int64 (s,)
        Graph nodes encoded: the segment's own nodes, then its halo.
    own : bool (s,)
        Which of ``nodes`` belong to the segment (are pooled).
    edge_index : int64 (2, e)
        Edges among ``nodes``, renumbered to positions in ``nodes``.
    """

    nodes: torch.Tensor
    own: torch.Tensor
    edge_index: torch.Tensor


def partition(num_nodes: int, edge_index: torch.Tensor, segment_size: int = 1000,
              halo: int = 0) -> list[Segment]:
    """Cut nodes ``0..num_nodes-1`` into ``ceil(n / segment_size)`` contiguous segments,
    each with its ``halo``-hop neighbourhood. O(segments * halo * e).

    >>> segs = partition(5, torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]), segment_size=2, halo=1)
    >>> [s.nodes.tolist() for s in segs], [s.own.tolist() for s in segs][0]
    ([[0, 1, 2], [2, 3, 1, 4], [4, 3]], [True, True, False])
    """
    if segment_size < 1:
        raise ValueError(f"segment_size must be >= 1, got {segment_size}")
    src, dst = edge_index
    out = []
    for start in range(0, num_nodes, segment_size):
        own = torch.zeros(num_nodes, dtype=torch.bool)
        own[start:start + segment_size] = True
        keep = own.clone()
        for _ in range(halo):
            nxt = keep.clone()
            nxt[dst[keep[src]]] = True
            nxt[src[keep[dst]]] = True
            keep = nxt
        halo_nodes = torch.nonzero(keep & ~own).flatten()
        nodes = torch.cat([torch.arange(start, min(start + segment_size, num_nodes)), halo_nodes])
        pos = torch.full((num_nodes,), -1, dtype=torch.long)
        pos[nodes] = torch.arange(len(nodes))
        e = keep[src] & keep[dst]
        out.append(Segment(nodes, own[nodes], torch.stack([pos[src[e]], pos[dst[e]]])))
    return out


class HistoryTable:
    """Historical segment statistics per graph: ``(configs, segments, stat_dim)`` with a
    ``filled`` mask, created on first use of a graph."""

    def __init__(self) -> None:
        self.stats: dict[str, torch.Tensor] = {}
        self.filled: dict[str, torch.Tensor] = {}

    def __repr__(self) -> str:
        return f"HistoryTable(graphs={len(self.stats)})"

    def ensure(self, key: str, num_configs: int, num_segments: int, stat_dim: int) -> None:
        if key not in self.stats:
            self.stats[key] = torch.zeros(num_configs, num_segments, stat_dim)
            self.filled[key] = torch.zeros(num_configs, num_segments, dtype=torch.bool)

    def arrays(self) -> dict[str, torch.Tensor]:
        """Every table as named tensors (for a safetensors checkpoint)."""
        out = {}
        for i, k in enumerate(sorted(self.stats)):
            out[f"{i}.stats"], out[f"{i}.filled"] = self.stats[k], self.filled[k]
        return out

    def load_arrays(self, keys: list[str], a: dict[str, torch.Tensor]) -> None:
        """Restore from :meth:`arrays`; ``keys`` are the graph keys in sorted order."""
        for i, k in enumerate(keys):
            self.stats[k], self.filled[k] = a[f"{i}.stats"].clone(), a[f"{i}.filled"].clone()


def _segment_stats(model: CostModel, t: dict[str, torch.Tensor], node_cfg: torch.Tensor,
                   is_config: torch.Tensor, seg: Segment) -> torch.Tensor:
    h = model.encode(t["op"][seg.nodes], t["x"][seg.nodes], seg.edge_index, node_cfg[:, seg.nodes])
    return model.pool(h, seg.own, is_config[seg.nodes])


def gst_scores(model: CostModel, t: dict[str, torch.Tensor], cfg_idx: torch.Tensor,
               segments: list[Segment], table: HistoryTable | None = None, key: str = "",
               fresh: int | None = None, sed_p: float = 0.5,
               rng: np.random.Generator | None = None) -> torch.Tensor:
    """Scores ``(C,)`` of configurations ``cfg_idx`` of one graph, segment by segment.

    Parameters
    ----------
    t : dict
        :func:`~graphopt.costmodel.models.graph_tensors` of the graph (every configuration).
    cfg_idx : int64 (C,)
        Configurations to score (indices into ``t["cfg"]``; also the table's rows).
    segments : list of Segment
        From :func:`partition`.
    table : HistoryTable, optional
        Needed when some segments are stale (``fresh < len(segments)``).
    key : str
        The graph's key in ``table``.
    fresh : int, optional
        Segments computed with gradients, sampled uniformly with ``rng``; default all
        (then no table is used and, with a large enough halo, the result equals
        ``model(...)`` on the full graph).
    sed_p : float
        Stale embedding dropout, applied while ``model.training``.
    rng : numpy Generator, optional
        For segment sampling and dropout; default seeded with 0.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    n, s = len(t["op"]), len(segments)
    fresh = s if fresh is None else min(max(fresh, 1), s)
    node_cfg = model.node_config(t["cfg"][cfg_idx], t["config_nodes"], n)
    is_config = torch.zeros(n, dtype=torch.bool, device=node_cfg.device)
    is_config[t["config_nodes"]] = True
    chosen = set(rng.choice(s, size=fresh, replace=False).tolist()) if fresh < s else set(range(s))
    if fresh < s:
        if table is None:
            raise ValueError("stale segments need a HistoryTable")
        table.ensure(key, len(t["cfg"]), s, model.stat_dim)
        stats_tab, filled = table.stats[key], table.filled[key]
    total = 0
    cfg_cpu = cfg_idx.cpu()
    for j, seg in enumerate(segments):
        if j in chosen:
            st = _segment_stats(model, t, node_cfg, is_config, seg)
            if fresh < s:
                stats_tab[cfg_cpu, j] = st.detach().cpu()
                filled[cfg_cpu, j] = True
        else:
            missing = ~filled[cfg_cpu, j]
            if missing.any():
                with torch.no_grad():
                    st = _segment_stats(model, t, node_cfg[missing.to(node_cfg.device)], is_config, seg)
                stats_tab[cfg_cpu[missing], j] = st.cpu()
                filled[cfg_cpu[missing], j] = True
            st = stats_tab[cfg_cpu, j].to(node_cfg.device)
            if model.training and sed_p > 0:
                st = st * (float(rng.random() >= sed_p) / (1.0 - sed_p))
        total = total + st
    return model.readout(total)


def measure_step(step, device: torch.device | str = "cpu") -> dict[str, float]:
    """Run ``step()`` (one forward, loss and backward) and measure it.

    Returns
    -------
    dict
        ``seconds``; ``saved_bytes``: bytes of the tensors autograd saved for backward
        (the activation memory GST reduces); ``cuda_peak_bytes``: CUDA peak allocated
        during the step (0 on CPU); ``max_rss_bytes``: the process's peak resident set
        so far (a high-water mark of the whole process, not of this step).
    """
    saved = [0]

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved[0] += x.numel() * x.element_size()
        return x

    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return {"seconds": seconds, "saved_bytes": float(saved[0]),
            "cuda_peak_bytes": float(torch.cuda.max_memory_allocated()) if cuda else 0.0,
            "max_rss_bytes": float(rss)}
