"""BERT (Devlin et al. 2019) pre-training step: masked language model plus next-sentence loss.

Token, position and segment embeddings summed and layer-normalized; ``layers``
post-norm Transformer blocks with GELU feed-forwards; the masked-LM head (dense,
GELU, LayerNorm, output tied to the token embeddings plus a bias) scores only the
masked positions, picked by index as in the reference implementation; the
next-sentence head reads the tanh-pooled first token. Dropout on the embeddings, the
attention weights and each block's two residual branches.

Sizes used by the zoo: BERT-base (12 layers, 768 wide, 12 heads, inner 3072, 30,522
word pieces), sequences of 128 with 20 predictions each (pre-training phase 1),
batch 32, dropout 0.1. Left out: the padding mask (every sequence is full length).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.zoo.models._common import seeded, token_batch
from graphopt.zoo.models._transformer import TransformerBlock

__all__ = ["Bert", "make"]


class Bert(nn.Module):
    """BERT with its pre-training heads; ``forward`` returns MLM + NSP loss.

    Parameters
    ----------
    layers, d_model, heads, d_inner : int
        Depth and widths.
    vocab, max_len : int
        Word pieces and positions.
    dropout : float
        Dropout probability.

    Shapes
    ------
    tokens and segments (B, T) int64, masked positions and their labels (B, P) int64,
    next-sentence labels (B,) int64 -> scalar loss.
    """

    def __init__(self, layers: int = 12, d_model: int = 768, heads: int = 12, d_inner: int = 3072,
                 vocab: int = 30_522, max_len: int = 512, dropout: float = 0.1):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        self.segments = nn.Embedding(2, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, heads, d_inner, False, dropout)
                                    for _ in range(layers))
        self.mlm = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.LayerNorm(d_model))
        self.mlm_bias = nn.Parameter(torch.zeros(vocab))
        self.pooler = nn.Linear(d_model, d_model)
        self.nsp = nn.Linear(d_model, 2)

    def forward(self, tokens: Tensor, segments: Tensor, masked_positions: Tensor,
                masked_labels: Tensor, next_sentence: Tensor) -> Tensor:
        T = tokens.shape[1]
        x = self.tokens(tokens) + self.positions.weight[:T] + self.segments(segments)
        x = self.drop(self.norm(x))
        mask = x.new_zeros(())
        for block in self.blocks:
            x = block(x, mask)
        picked = torch.gather(x, 1, masked_positions[:, :, None].expand(-1, -1, x.shape[-1]))
        logits = nn.functional.linear(self.mlm(picked), self.tokens.weight, self.mlm_bias)
        nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        ce = nn.functional.cross_entropy
        return ce(logits.flatten(0, 1), masked_labels.flatten()) + ce(nsp, next_sentence)


def make(layers: int = 12, *, d_model: int = 768, heads: int = 12, d_inner: int = 3072,
         vocab: int = 30_522, seq_len: int = 128, predictions: int = 20, batch: int = 32,
         dropout: float = 0.1, seed: int = 0) -> tuple[Bert, tuple[Tensor, ...]]:
    """A :class:`Bert` and one pre-training batch
    ``(tokens, segments, masked positions, masked labels, next-sentence labels)``."""
    with seeded(seed) as gen:
        model = Bert(layers, d_model, heads, d_inner, vocab, max(512, seq_len), dropout)
        tokens = token_batch(gen, vocab, batch, seq_len)
        segments = (torch.arange(seq_len) >= seq_len // 2).long().expand(batch, -1).contiguous()
        positions = torch.stack([torch.randperm(seq_len, generator=gen)[:predictions].sort().values
                                 for _ in range(batch)])
        labels = token_batch(gen, vocab, batch, predictions)
        next_sentence = token_batch(gen, 2, batch)
    return model, (tokens, segments, positions, labels, next_sentence)
