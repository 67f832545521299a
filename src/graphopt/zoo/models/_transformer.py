"""The Transformer block (Vaswani et al. 2017) shared by the BERT and GPT-2 models.

Attention is written out (projections, scaled scores, mask, softmax, weighted sum)
rather than called as one fused kernel, so each of its ops is a node of a traced
graph, as in the TensorFlow graphs placement work studied.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["TransformerBlock"]


class SelfAttention(nn.Module):
    """Multi-head self-attention with an additive mask and dropout on the attention weights.

    Shapes
    ------
    x (B, T, D), mask broadcastable to (B, heads, T, T) (0 or a large negative) -> (B, T, D).
    """

    def __init__(self, d_model: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.drop = nn.Dropout(dropout)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        B, T, D = x.shape
        q, k, v = (t.reshape(B, T, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        scores = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5) + mask
        y = self.drop(torch.softmax(scores, dim=-1)) @ v
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class TransformerBlock(nn.Module):
    """Self-attention and a GELU feed-forward block, each with dropout on its output and a
    residual connection.

    ``pre_norm=False`` normalizes after each residual sum (BERT, the original
    Transformer); ``pre_norm=True`` normalizes each branch's input (GPT-2).

    Shapes
    ------
    x (B, T, D), mask as :class:`SelfAttention` -> (B, T, D).
    """

    def __init__(self, d_model: int, heads: int, d_inner: int, pre_norm: bool, dropout: float):
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = SelfAttention(d_model, heads, dropout)
        self.drop = nn.Dropout(dropout)
        self.ff = nn.Sequential(nn.Linear(d_model, d_inner), nn.GELU(), nn.Linear(d_inner, d_model),
                                nn.Dropout(dropout))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        if self.pre_norm:
            x = x + self.drop(self.attn(self.norm1(x), mask))
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.drop(self.attn(x, mask)))
        return self.norm2(x + self.ff(x))
