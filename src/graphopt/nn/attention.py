"""Attention over long node sequences in linear cost, modulated per graph."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.inits import reset

__all__ = ["FiLM", "SegmentRecurrentAttention"]


class FiLM(nn.Module):
    r"""Feature-wise linear modulation: :math:`h \mapsto (1 + \gamma(c)) \odot h + \beta(c)`.

    A graph-level context :math:`c` scales and shifts every feature, so one set of weights
    acts as a different network per graph without more parameters (GO's "parameter
    superposition"). :math:`\gamma` and :math:`\beta` are one linear map of :math:`c`,
    zero-initialized: a fresh (or reset) FiLM is the identity.

    Parameters
    ----------
    dim : int
        Width of the features modulated.
    context_dim : int
        Width of the context :math:`c`.

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
    >>> film
    FiLM(4, context_dim=3)

    References
    ----------
    E. Perez, F. Strub, H. de Vries, V. Dumoulin and A. Courville, "FiLM: Visual
    Reasoning with a General Conditioning Layer", AAAI 2018.
    """

    def __init__(self, dim: int, context_dim: int):
        super().__init__()
        self.dim, self.context_dim = dim, context_dim
        self.proj = nn.Linear(context_dim, 2 * dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Zero :math:`\gamma` and :math:`\beta`: the identity."""
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dim}, context_dim={self.context_dim})"

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

    With :math:`x_s` the pre-normed segment :math:`s`, :math:`p` the position embedding
    and :math:`\mathrm{sg}` stopping the gradient:

    .. math::
        \tilde{x}_s &= [\mathrm{sg}(x_{s-1}); x_s] + p, \quad
        a_s = \mathrm{MHA}(Q = W_q (x_s + p_{L:}),\ K = W_k \tilde{x}_s,\
        V = W_v \tilde{x}_s) \\
        h &\leftarrow h + \mathrm{FiLM}_1(W_o a, c), \quad
        h \leftarrow h + \mathrm{FiLM}_2(\mathrm{FF}(\mathrm{LN}(h)), c)

    Parameters
    ----------
    dim, heads : int
        Model width and attention heads (``dim`` a multiple of ``heads``).
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
    >>> layer
    SegmentRecurrentAttention(8, heads=2, segment=4, context_dim=3)

    Raises
    ------
    ValueError
        ``dim`` is not a multiple of ``heads``.

    References
    ----------
    Z. Dai, Z. Yang, Y. Yang, J. Carbonell, Q. V. Le and R. Salakhutdinov,
    "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context", ACL 2019.
    Y. Zhou et al., "Transferable Graph Optimizers for ML Compilers", NeurIPS 2020.
    """

    def __init__(self, dim: int, heads: int, segment: int, context_dim: int):
        super().__init__()
        if heads < 1 or dim % heads:
            raise ValueError(f"attention width dim={dim} must be a multiple of heads={heads}")
        self.dim, self.heads, self.segment, self.context_dim = dim, heads, segment, context_dim
        self.pos = nn.Parameter(torch.zeros(2 * segment, dim))
        nn.init.normal_(self.pos, std=0.02)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.film1, self.film2 = FiLM(dim, context_dim), FiLM(dim, context_dim)

    def reset_parameters(self) -> None:
        """Position embedding drawn from N(0, 0.02²), every child reset (FiLM to the
        identity). ``__init__`` draws the same way, child by child, without calling this
        (a second draw would shift every later layer's seeded initialization)."""
        nn.init.normal_(self.pos, std=0.02)
        for child in self.children():
            reset(child)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.dim}, heads={self.heads}, segment={self.segment}, "
                f"context_dim={self.context_dim})")

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
