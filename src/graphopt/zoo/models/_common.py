"""Pieces shared by the zoo's models: seeding, an unrolled LSTM cell, sinusoid tables.

This module imports nothing else from graphopt.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

__all__ = ["LSTMCell", "count_parameters", "seeded", "sinusoid_table", "token_batch"]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[torch.Generator]:
    """Run a block with torch's CPU generator seeded to ``seed``, restoring it afterwards.

    Module constructors draw their initial weights from the global generator; inside
    this block they are a function of ``seed`` alone, and the caller's random state is
    left as it was. Yields a separate generator for example inputs.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield torch.Generator().manual_seed(seed + 1)


def token_batch(gen: torch.Generator, vocab: int, *shape: int) -> Tensor:
    """Random token ids in ``[0, vocab)`` of the given shape (int64)."""
    return torch.randint(0, vocab, shape, generator=gen, dtype=torch.int64)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars (a weight shared between two modules counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def sinusoid_table(positions: Tensor, dim: int) -> Tensor:
    """Sinusoid position encodings (Vaswani et al. 2017): ``[sin | cos]``, shape (P, dim)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)[:, :dim]


class LSTMCell(nn.Module):
    """One LSTM step written out op by op, as TensorFlow's unrolled ``BasicLSTMCell``.

    One matrix product over ``[x, h]`` gives the four gates (Hochreiter & Schmidhuber
    1997, with the forget-gate bias of 1 that TensorFlow adds):

    .. math::
        i, g, f, o = [x, h] W + b \\qquad
        c' = \\sigma(f + 1) c + \\sigma(i) \\tanh(g) \\qquad
        h' = \\sigma(o) \\tanh(c')

    Calling it once per time step in a Python loop puts every step's ops in a traced
    graph, which is what static-graph placement work optimized.

    Parameters
    ----------
    input_size, hidden_size : int
        Widths of ``x`` and of ``h`` and ``c``.

    Shapes
    ------
    x (B, input_size), h and c (B, hidden_size) -> h', c' (B, hidden_size).
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight = nn.Parameter(torch.empty(input_size + hidden_size, 4 * hidden_size))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
        gates = torch.addmm(self.bias, torch.cat([x, h], dim=1), self.weight)
        i, g, f, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}"
