"""GPT-2 (Radford et al. 2019): a decoder-only Transformer language model.

Token and learned position embeddings; ``layers`` pre-norm Transformer blocks with
causal self-attention and GELU feed-forwards; a final LayerNorm; output logits tied
to the token embeddings; next-token cross-entropy. Dropout on the embeddings, the
attention weights and each block's two residual branches.

Sizes used by the zoo: GPT-2 small (12 layers, 768 wide, 12 heads, inner 3072,
50,257 tokens), a full 1,024-token context, batch 8, dropout 0.1.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.zoo.models._common import seeded, token_batch
from graphopt.zoo.models._transformer import TransformerBlock

__all__ = ["GPT2", "make"]


class GPT2(nn.Module):
    """GPT-2 language model; ``forward`` returns the training loss.

    Parameters
    ----------
    layers, d_model, heads, d_inner : int
        Depth and widths.
    vocab, context : int
        Tokens and the (fixed) sequence length.
    dropout : float
        Dropout probability.

    Shapes
    ------
    tokens and targets (B, context) int64 -> scalar loss.
    """

    def __init__(self, layers: int = 12, d_model: int = 768, heads: int = 12, d_inner: int = 3072,
                 vocab: int = 50_257, context: int = 1024, dropout: float = 0.1):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, heads, d_inner, True, dropout)
                                    for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        causal = torch.full((context, context), -1e9).triu(1)
        self.register_buffer("mask", causal, persistent=False)

    def forward(self, tokens: Tensor, targets: Tensor) -> Tensor:
        x = self.drop(self.tokens(tokens) + self.positions.weight)
        for block in self.blocks:
            x = block(x, self.mask)
        logits = nn.functional.linear(self.norm(x), self.tokens.weight)
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make(layers: int = 12, *, d_model: int = 768, heads: int = 12, d_inner: int = 3072,
         vocab: int = 50_257, context: int = 1024, batch: int = 8, dropout: float = 0.1,
         seed: int = 0) -> tuple[GPT2, tuple[Tensor, Tensor]]:
    """A :class:`GPT2` and one batch of ``(tokens, next tokens)``."""
    with seeded(seed) as gen:
        model = GPT2(layers, d_model, heads, d_inner, vocab, context, dropout)
        text = token_batch(gen, vocab, batch, context + 1)
    return model, (text[:, :-1].contiguous(), text[:, 1:].contiguous())
