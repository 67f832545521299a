"""A user's own model for the pipeline benchmark (``py:bench/user_model.py:make``): a
token embedding, a stack of pre-norm residual MLP blocks in an ``nn.ModuleList`` and a
classifier, with its own loss and target, written the way a user writes a model (no
graphopt import)."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(layers))
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make(layers: int = 8, width: int = 128, vocab: int = 8000, seq: int = 32, batch: int = 8):
    """(module, inputs, loss, target), as graphopt's ``py:`` source takes them."""
    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out.reshape(-1, vocab), target.reshape(-1))

    ids = torch.randint(0, vocab, (batch, seq))
    return Net(vocab, width, layers), ids, loss, torch.randint(0, vocab, (batch, seq))
