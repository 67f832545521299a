"""Attention over long node sequences in linear cost, modulated per graph."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["FiLM", "SegmentRecurrentAttention"]


class FiLM(nn.Module):
    r"""Feature-wise linear modulation: :math:`h \mapsto (1 + \gamma(c)) \odot h + \beta(c)`.

    A graph-level context :math:`c` scales and shifts every feature, so one set of weights
    acts as a different network per graph without more parameters (GO's "parameter
    superposition"). Zero-initialized: a fresh FiLM is the identity.

    Shapes
    ------
    - ``h``: (..., dim), ``context``: (context_dim,)
    - output: like ``h``

    Examples
    --------
    >>> film = FiLM(4, context_dim=3)
    >>> h = torch.rand(2, 5, 4)
    >>> torch.equal(film(h, torch.rand(3)), h)
    True
    """

    def __init__(self, dim: int, context_dim: int):
        super().__init__()
        self.proj = nn.Linear(context_dim, 2 * dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, h: Tensor, context: Tensor) -> Tensor:
        gamma, beta = self.proj(context).chunk(2, dim=-1)
        return (1 + gamma) * h + beta


class SegmentRecurrentAttention(nn.Module):
    r"""A pre-norm transformer layer over a node sequence cut into segments, each
    attending to itself and to the previous segment (Transformer-XL's segment-level
    recurrence), with FiLM after each sub-layer.

    The sequence (nodes in topological order) is padded to :math:`S` segments of
    :math:`L` nodes. The queries of segment :math:`s` attend to the keys of segments
    :math:`s-1` (the memory, gradient stopped as in Transformer-XL) and :math:`s`, so
    the cost is :math:`O(N L)` rather than :math:`O(N^2)`, and stacking :math:`k` layers
    lets information travel :math:`k` segments. Every segment is computed at once
    (the memory is the previous layer's output, which is already there), so there is
    no loop over segments. A learned position embedding over the :math:`2L` key
    positions tells the memory from the segment itself.

    Parameters
    ----------
    dim, heads : int
        Model width and attention heads.
    segment : int
        Segment length :math:`L`.
    context_dim : int
        Width of the graph context the FiLM layers read.

    Shapes
    ------
    - ``h``: (N, dim), ``context``: (context_dim,)
    - output: (N, dim)

    Examples
    --------
    >>> layer = SegmentRecurrentAttention(8, heads=2, segment=4, context_dim=3)
    >>> layer(torch.rand(10, 8), torch.rand(3)).shape
    torch.Size([10, 8])
    """

    def __init__(self, dim: int, heads: int, segment: int, context_dim: int):
        super().__init__()
        self.segment, self.heads = segment, heads
        self.pos = nn.Parameter(torch.zeros(2 * segment, dim))
        nn.init.normal_(self.pos, std=0.02)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.film1, self.film2 = FiLM(dim, context_dim), FiLM(dim, context_dim)

    def forward(self, h: Tensor, context: Tensor) -> Tensor:
        n, d = h.shape
        seg, heads = self.segment, self.heads
        s = -(-n // seg)
        x = F.pad(self.norm1(h), (0, 0, 0, s * seg - n)).view(s, seg, d)
        mem = torch.cat([x.new_zeros(1, seg, d), x[:-1].detach()])
        kv_in = torch.cat([mem, x], dim=1) + self.pos                      # (S, 2L, d)
        q = self.qkv(x + self.pos[seg:])[..., :d]
        k, v = self.qkv(kv_in)[..., d:].chunk(2, dim=-1)
        # Keys that are padding, or the first segment's (empty) memory, are masked.
        valid = torch.ones(s, 2 * seg, dtype=torch.bool, device=h.device)
        valid[0, :seg] = False
        valid[:, seg:] = (torch.arange(s * seg, device=h.device) < n).view(s, seg)
        split = lambda t: t.view(s, -1, heads, d // heads).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(split(q), split(k), split(v),
                                           attn_mask=valid[:, None, None, :])
        a = a.transpose(1, 2).reshape(s * seg, d)[:n]
        h = h + self.film1(self.out(a), context)
        return h + self.film2(self.ff(self.norm2(h)), context)
