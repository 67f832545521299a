"""Transformer-XL (Dai et al. 2019): a language model with segment-level recurrence.

Kept from the paper: each layer attends over the current segment and a memory of the
previous segment's hidden states (given as inputs and not differentiated through,
the paper's stop-gradient), with the relative positional attention of Section 3.3 —
content term ``(q + u) k^T``, position term ``(q + v) (W_r R)^T`` shifted so each
query sees distances to every key ("relative shift"), global biases ``u`` and ``v``
shared across positions — a causal mask that lets a query see the whole memory and
the segment up to itself, post-layer-norm residual blocks, tied input and output
embeddings, and dropout where the reference code has it (embeddings, position
encodings, attention output, both feed-forward layers, the final hidden states).

Sizes used by the zoo: the WikiText-103 "base" model's widths (d_model 410, 10 heads
of 41, inner 2100), target and memory length 150, batch 60, with 2, 4 or 8 layers
as in GO's Table 2, dropout 0.1 (no attention dropout, as in that model). Changed:
the 267,735-word adaptive softmax is replaced by a plain softmax over 32,000 tokens
(adaptive softmax picks rows by data-dependent masks that a static graph cannot
hold).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.zoo.models._common import seeded, sinusoid_table, token_batch

__all__ = ["TransformerXL", "make"]


def _rel_shift(x: Tensor) -> Tensor:
    """Align position scores: row ``i`` of (Q, K, B, N) moves so column ``j`` holds the
    score for distance ``K - Q + i - j`` (Dai et al. 2019, Appendix B)."""
    q, k = x.shape[:2]
    padded = torch.cat([x.new_zeros(q, 1, *x.shape[2:]), x], dim=1)
    return padded.view(k + 1, q, *x.shape[2:])[1:].view_as(x)


class RelMultiHeadAttention(nn.Module):
    """Relative multi-head attention over ``[memory, segment]`` with a residual and LayerNorm.

    Shapes
    ------
    w (T, B, D), memory (M, B, D), positions r (M + T, D), biases u and v (N, Dh),
    mask (T, M + T) bool (True: hidden) -> (T, B, D).
    """

    def __init__(self, d_model: int, heads: int, d_head: int, dropout: float):
        super().__init__()
        self.heads, self.d_head = heads, d_head
        self.drop = nn.Dropout(dropout)
        self.qkv = nn.Linear(d_model, 3 * heads * d_head, bias=False)
        self.r_net = nn.Linear(d_model, heads * d_head, bias=False)
        self.out = nn.Linear(heads * d_head, d_model, bias=False)
        self.norm = nn.LayerNorm(d_model)
        self.scale = d_head ** -0.5

    def forward(self, w: Tensor, memory: Tensor, r: Tensor, u: Tensor, v: Tensor,
                mask: Tensor) -> Tensor:
        T, B = w.shape[:2]
        N, Dh = self.heads, self.d_head
        q, k, val = self.qkv(torch.cat([memory, w], dim=0)).chunk(3, dim=-1)
        q = q[-T:].reshape(T, B, N, Dh)
        k = k.reshape(-1, B, N, Dh)
        val = val.reshape(-1, B, N, Dh)
        rk = self.r_net(r).reshape(-1, N, Dh)
        content = torch.einsum("ibnd,jbnd->ijbn", q + u, k)
        position = _rel_shift(torch.einsum("ibnd,jnd->ijbn", q + v, rk))
        scores = ((content + position) * self.scale).masked_fill(mask[:, :, None, None], -1e30)
        attn = torch.einsum("ijbn,jbnd->ibnd", torch.softmax(scores, dim=1), val)
        return self.norm(w + self.drop(self.out(attn.reshape(T, B, N * Dh))))


class TransformerXLLayer(nn.Module):
    """Relative attention then a ReLU feed-forward block, each with residual + LayerNorm."""

    def __init__(self, d_model: int, heads: int, d_head: int, d_inner: int, dropout: float):
        super().__init__()
        self.attn = RelMultiHeadAttention(d_model, heads, d_head, dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(d_inner, d_model), nn.Dropout(dropout))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, w: Tensor, memory: Tensor, r: Tensor, u: Tensor, v: Tensor,
                mask: Tensor) -> Tensor:
        h = self.attn(w, memory, r, u, v, mask)
        return self.norm(h + self.ff(h))


class TransformerXL(nn.Module):
    """Transformer-XL language model; ``forward`` returns the training loss.

    Parameters
    ----------
    layers, d_model, heads, d_head, d_inner : int
        Depth and widths.
    vocab : int
        Vocabulary size (input and output embeddings are tied).
    seg_len, mem_len : int
        Tokens per segment and remembered hidden states per layer.
    dropout : float
        Dropout probability.

    Shapes
    ------
    tokens and targets (T, B) int64, then one memory (M, B, d_model) per layer
    -> scalar loss.
    """

    def __init__(self, layers: int = 2, d_model: int = 410, heads: int = 10, d_head: int = 41,
                 d_inner: int = 2100, vocab: int = 32_000, seg_len: int = 150, mem_len: int = 150,
                 dropout: float = 0.1):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab, d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(TransformerXLLayer(d_model, heads, d_head, d_inner, dropout)
                                    for _ in range(layers))
        self.u = nn.Parameter(torch.zeros(heads, d_head))
        self.v = nn.Parameter(torch.zeros(heads, d_head))
        self.out_bias = nn.Parameter(torch.zeros(vocab))
        klen = seg_len + mem_len
        self.register_buffer("pos", sinusoid_table(torch.arange(klen - 1, -1, -1), d_model),
                             persistent=False)
        future = torch.ones(seg_len, klen, dtype=torch.bool).triu(1 + mem_len)
        self.register_buffer("mask", future, persistent=False)

    def forward(self, tokens: Tensor, targets: Tensor, *memories: Tensor) -> Tensor:
        h = self.drop(self.embedding(tokens) * self.d_model ** 0.5)
        pos = self.drop(self.pos)
        for layer, memory in zip(self.layers, memories):
            h = layer(h, memory, pos, self.u, self.v, self.mask)
        logits = nn.functional.linear(self.drop(h), self.embedding.weight, self.out_bias)
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make(layers: int = 2, *, d_model: int = 410, heads: int = 10, d_head: int = 41,
         d_inner: int = 2100, vocab: int = 32_000, seg_len: int = 150, mem_len: int = 150,
         batch: int = 60, dropout: float = 0.1, seed: int = 0
         ) -> tuple[TransformerXL, tuple[Tensor, ...]]:
    """A :class:`TransformerXL` and ``(tokens, targets, *memories)`` for one segment."""
    with seeded(seed) as gen:
        model = TransformerXL(layers, d_model, heads, d_head, d_inner, vocab, seg_len, mem_len,
                              dropout)
        tokens = token_batch(gen, vocab, seg_len, batch)
        targets = token_batch(gen, vocab, seg_len, batch)
        memories = tuple(torch.randn(mem_len, batch, d_model, generator=gen) for _ in range(layers))
    return model, (tokens, targets, *memories)
