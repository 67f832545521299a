"""RNNLM: a stacked LSTM language model, unrolled over a fixed number of steps.

The recurrent language model of Zaremba et al. (2014) and Jozefowicz et al. (2016)
as Mirhoseini et al. (2017) placed it: word embeddings, a stack of LSTM layers run
step by step (truncated back-propagation through time over ``seq_len`` steps), a
softmax over the vocabulary at every step, and the mean cross-entropy as the loss.
Dropout (fresh masks each step) on every non-recurrent connection: each layer's input
and the top layer's output (Zaremba et al. 2014).

Sizes used by the zoo: batch 64 (Mirhoseini et al. 2017, Table 1), 35 unrolled steps
and a 10,000-word vocabulary (Zaremba et al.'s Penn Treebank set-up), LSTM width 2048
(unverified against Mirhoseini et al.), dropout 0.65 (Zaremba et al.'s large model);
2, 4 or 8 layers as in GO's Table 2. Left out: the carried-over state of the previous
batch (the step starts from zero states).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.zoo.models._common import LSTMCell, seeded, token_batch

__all__ = ["RNNLM", "make"]


class RNNLM(nn.Module):
    """Stacked LSTM language model; ``forward`` returns the training loss.

    Parameters
    ----------
    layers : int
        Number of stacked LSTM layers.
    hidden : int
        Width of the embeddings and of every LSTM layer.
    vocab : int
        Vocabulary size.
    dropout : float
        Dropout probability on non-recurrent connections.

    Shapes
    ------
    tokens, targets (B, T) int64 -> scalar loss.
    """

    def __init__(self, layers: int = 2, hidden: int = 2048, vocab: int = 10_000,
                 dropout: float = 0.65):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.drop = nn.Dropout(dropout)
        self.cells = nn.ModuleList(LSTMCell(hidden, hidden) for _ in range(layers))
        self.proj = nn.Linear(hidden, vocab)

    def forward(self, tokens: Tensor, targets: Tensor) -> Tensor:
        x = self.embedding(tokens)
        zero = x.new_zeros(x.shape[0], self.proj.in_features)
        h = [zero] * len(self.cells)
        c = [zero] * len(self.cells)
        outputs = []
        for t in range(tokens.shape[1]):
            inp = x[:, t]
            for k, cell in enumerate(self.cells):
                h[k], c[k] = cell(self.drop(inp), h[k], c[k])
                inp = h[k]
            outputs.append(self.drop(inp))
        logits = self.proj(torch.stack(outputs, dim=1))
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def make(layers: int = 2, *, hidden: int = 2048, vocab: int = 10_000, seq_len: int = 35,
         batch: int = 64, dropout: float = 0.65, seed: int = 0
         ) -> tuple[RNNLM, tuple[Tensor, Tensor]]:
    """An :class:`RNNLM` and one batch of ``(tokens, targets)``, both seeded by ``seed``."""
    with seeded(seed) as gen:
        model = RNNLM(layers, hidden, vocab, dropout)
        tokens = token_batch(gen, vocab, batch, seq_len)
        targets = token_batch(gen, vocab, batch, seq_len)
    return model, (tokens, targets)
