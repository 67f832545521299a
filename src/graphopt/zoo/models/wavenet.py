"""WaveNet (van den Oord et al. 2016): stacks of gated, dilated causal convolutions.

Each layer is a dilated causal convolution of kernel 2 (left padding of one
dilation), a gated activation ``tanh(a) * sigmoid(b)``, a 1×1 convolution added back
to the layer's input (residual) and a 1×1 convolution added to the skip sum. Within
a stack the dilation doubles each layer up to 512 and then starts again at 1 (the
paper's 1, 2, …, 512, 1, 2, …, 512, …); "S×L" is S stacks of L layers. The skip sum
goes through ReLU–1×1–ReLU–1×1 to 256-way logits over μ-law sample values, scored
by cross-entropy against the next sample. Inputs are μ-law sample ids, embedded
(the paper's one-hot input times the first 1×1 convolution).

Sizes used by the zoo: 2×18 and 4×36 (GO's Table 2), 64 residual and dilation
channels, 256 skip channels, 256 quantization levels, batch 4 of 16,384 samples
(about one second of 16 kHz audio) — sensible choices where the papers name none.
Left out: local and global conditioning.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.zoo.models._common import seeded, token_batch

__all__ = ["WaveNet", "make"]


class GatedResidualLayer(nn.Module):
    """One WaveNet layer.

    The last layer of the network has no residual 1×1: its output would go unused.

    Shapes
    ------
    x (B, residual, T) -> (x + residual 1×1 (B, residual, T) or None, skip 1×1 (B, skip, T)).
    """

    def __init__(self, residual: int, dilation_channels: int, skip: int, dilation: int,
                 last: bool = False):
        super().__init__()
        self.dilation = dilation
        self.conv = nn.Conv1d(residual, 2 * dilation_channels, 2, dilation=dilation)
        self.res = None if last else nn.Conv1d(dilation_channels, residual, 1)
        self.skip = nn.Conv1d(dilation_channels, skip, 1)

    def forward(self, x: Tensor) -> tuple[Tensor | None, Tensor]:
        a, b = self.conv(nn.functional.pad(x, (self.dilation, 0))).chunk(2, dim=1)
        z = torch.tanh(a) * torch.sigmoid(b)
        return (None if self.res is None else x + self.res(z)), self.skip(z)


class WaveNet(nn.Module):
    """WaveNet over μ-law sample ids; ``forward`` returns the training loss.

    Parameters
    ----------
    stacks, layers : int
        Number of stacks and layers per stack.
    residual, dilation_channels, skip, classes : int
        Channel widths and quantization levels.
    max_dilation : int
        Dilation at which a stack's doubling starts again at 1.

    Shapes
    ------
    samples and targets (B, T) int64 -> scalar loss.
    """

    def __init__(self, stacks: int = 2, layers: int = 18, residual: int = 64,
                 dilation_channels: int = 64, skip: int = 256, classes: int = 256,
                 max_dilation: int = 512):
        super().__init__()
        cycle = max_dilation.bit_length()
        n = stacks * layers
        self.embedding = nn.Embedding(classes, residual)
        self.layers = nn.ModuleList(
            GatedResidualLayer(residual, dilation_channels, skip, 2 ** (i % layers % cycle),
                               last=i == n - 1)
            for i in range(n))
        self.head = nn.Sequential(nn.ReLU(), nn.Conv1d(skip, skip, 1), nn.ReLU(),
                                  nn.Conv1d(skip, classes, 1))

    def forward(self, samples: Tensor, targets: Tensor) -> Tensor:
        x = self.embedding(samples).transpose(1, 2)
        total = None
        for layer in self.layers:
            x, s = layer(x)
            total = s if total is None else total + s
        logits = self.head(total)
        return nn.functional.cross_entropy(logits, targets)


def make(stacks: int = 2, layers: int = 18, *, residual: int = 64, dilation_channels: int = 64,
         skip: int = 256, classes: int = 256, length: int = 16_384, batch: int = 4,
         seed: int = 0) -> tuple[WaveNet, tuple[Tensor, Tensor]]:
    """A :class:`WaveNet` and one batch of ``(samples, next samples)``."""
    with seeded(seed) as gen:
        model = WaveNet(stacks, layers, residual, dilation_channels, skip, classes)
        audio = token_batch(gen, classes, batch, length + 1)
    return model, (audio[:, :-1].contiguous(), audio[:, 1:].contiguous())
