"""Inception-v3 (Szegedy et al. 2016, "Rethinking the Inception Architecture").

The whole network of the paper's Table 1 with its Figures 5–7 modules: the stem of
seven convolutions and two poolings, three 35×35 modules (5b–5d), the grid reduction
6a, four 17×17 modules with factorized 1×7/7×1 convolutions (6b–6e, 128/160/160/192
channels in their 7×7 branches), the grid reduction 7a, two 8×8 modules with expanded
filter banks (7b, 7c), global average pooling and a 1000-way classifier; plus the
auxiliary classifier on 6e's output, weighted 0.4 in the loss as in the reference
training code. Every convolution is followed by batch normalization (eps 0.001) and
a ReLU. Training mode: batch statistics, running averages updated.

Sizes used by the zoo: 299×299 RGB inputs, batch 32 and 64 (GO's Table 2), dropout
0.2 before the classifier (keep probability 0.8, as in the reference). Changed: the
auxiliary head average-pools its input to 5×5 adaptively, which on the 17×17 grid of
a 299×299 input gives the shape of the paper's 5×5/3 pool and lets smaller inputs
(down to 75×75) through. Left out: label smoothing.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.zoo.models._common import seeded

__all__ = ["InceptionV3", "make"]


class ConvBN(nn.Sequential):
    """Convolution without bias, batch norm (eps 0.001), ReLU."""

    def __init__(self, cin: int, cout: int, kernel, stride=1, padding=0):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(cout, eps=0.001), nn.ReLU())


def _pool(x: Tensor) -> Tensor:
    return nn.functional.avg_pool2d(x, 3, stride=1, padding=1)


class InceptionA(nn.Module):
    """35×35 module (Figure 5): 1×1, 5×5, double 3×3 and pooled 1×1 branches."""

    def __init__(self, cin: int, pool_features: int):
        super().__init__()
        self.b1 = ConvBN(cin, 64, 1)
        self.b5 = nn.Sequential(ConvBN(cin, 48, 1), ConvBN(48, 64, 5, padding=2))
        self.b3 = nn.Sequential(ConvBN(cin, 64, 1), ConvBN(64, 96, 3, padding=1),
                                ConvBN(96, 96, 3, padding=1))
        self.bp = ConvBN(cin, pool_features, 1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(_pool(x))], dim=1)


class InceptionB(nn.Module):
    """35×35 → 17×17 grid reduction: strided 3×3, strided double 3×3, max pool."""

    def __init__(self, cin: int):
        super().__init__()
        self.b3 = ConvBN(cin, 384, 3, stride=2)
        self.b33 = nn.Sequential(ConvBN(cin, 64, 1), ConvBN(64, 96, 3, padding=1),
                                 ConvBN(96, 96, 3, stride=2))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3(x), self.b33(x), nn.functional.max_pool2d(x, 3, 2)], dim=1)


class InceptionC(nn.Module):
    """17×17 module (Figure 6): 7×7 convolutions factorized into 1×7 and 7×1."""

    def __init__(self, cin: int, c7: int):
        super().__init__()
        self.b1 = ConvBN(cin, 192, 1)
        self.b7 = nn.Sequential(ConvBN(cin, c7, 1), ConvBN(c7, c7, (1, 7), padding=(0, 3)),
                                ConvBN(c7, 192, (7, 1), padding=(3, 0)))
        self.b77 = nn.Sequential(ConvBN(cin, c7, 1), ConvBN(c7, c7, (7, 1), padding=(3, 0)),
                                 ConvBN(c7, c7, (1, 7), padding=(0, 3)),
                                 ConvBN(c7, c7, (7, 1), padding=(3, 0)),
                                 ConvBN(c7, 192, (1, 7), padding=(0, 3)))
        self.bp = ConvBN(cin, 192, 1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b1(x), self.b7(x), self.b77(x), self.bp(_pool(x))], dim=1)


class InceptionD(nn.Module):
    """17×17 → 8×8 grid reduction."""

    def __init__(self, cin: int):
        super().__init__()
        self.b3 = nn.Sequential(ConvBN(cin, 192, 1), ConvBN(192, 320, 3, stride=2))
        self.b7 = nn.Sequential(ConvBN(cin, 192, 1), ConvBN(192, 192, (1, 7), padding=(0, 3)),
                                ConvBN(192, 192, (7, 1), padding=(3, 0)),
                                ConvBN(192, 192, 3, stride=2))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b3(x), self.b7(x), nn.functional.max_pool2d(x, 3, 2)], dim=1)


class InceptionE(nn.Module):
    """8×8 module (Figure 7): filter banks expanded into parallel 1×3 and 3×1 outputs."""

    def __init__(self, cin: int):
        super().__init__()
        self.b1 = ConvBN(cin, 320, 1)
        self.b3 = ConvBN(cin, 384, 1)
        self.b3a = ConvBN(384, 384, (1, 3), padding=(0, 1))
        self.b3b = ConvBN(384, 384, (3, 1), padding=(1, 0))
        self.b33 = nn.Sequential(ConvBN(cin, 448, 1), ConvBN(448, 384, 3, padding=1))
        self.b33a = ConvBN(384, 384, (1, 3), padding=(0, 1))
        self.b33b = ConvBN(384, 384, (3, 1), padding=(1, 0))
        self.bp = ConvBN(cin, 192, 1)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.b3(x), self.b33(x)
        return torch.cat([self.b1(x), self.b3a(a), self.b3b(a), self.b33a(b), self.b33b(b),
                          self.bp(_pool(x))], dim=1)


class AuxHead(nn.Module):
    """Auxiliary classifier on the 17×17 grid: average pool to 5×5, 1×1, 5×5, linear."""

    def __init__(self, cin: int, classes: int):
        super().__init__()
        self.convs = nn.Sequential(ConvBN(cin, 128, 1), ConvBN(128, 768, 5))
        self.fc = nn.Linear(768, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.convs(nn.functional.adaptive_avg_pool2d(x, 5))
        return self.fc(x.flatten(1))


class InceptionV3(nn.Module):
    """Inception-v3 classifier; ``forward`` returns the training loss (main + 0.4 aux).

    Shapes
    ------
    images (B, 3, H, W) with H, W >= 75 (299 in the paper), labels (B,) int64 -> scalar.
    """

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            ConvBN(3, 32, 3, stride=2), ConvBN(32, 32, 3), ConvBN(32, 64, 3, padding=1),
            nn.MaxPool2d(3, 2), ConvBN(64, 80, 1), ConvBN(80, 192, 3), nn.MaxPool2d(3, 2))
        self.grid35 = nn.Sequential(InceptionA(192, 32), InceptionA(256, 64), InceptionA(288, 64),
                                    InceptionB(288))
        self.grid17 = nn.Sequential(InceptionC(768, 128), InceptionC(768, 160),
                                    InceptionC(768, 160), InceptionC(768, 192))
        self.aux = AuxHead(768, classes)
        self.grid8 = nn.Sequential(InceptionD(768), InceptionE(1280), InceptionE(2048))
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(2048, classes)

    def forward(self, images: Tensor, labels: Tensor) -> Tensor:
        x = self.grid17(self.grid35(self.stem(images)))
        aux = self.aux(x)
        x = nn.functional.adaptive_avg_pool2d(self.grid8(x), 1).flatten(1)
        ce = nn.functional.cross_entropy
        return ce(self.fc(self.drop(x)), labels) + 0.4 * ce(aux, labels)


def make(batch: int = 32, *, image_size: int = 299, classes: int = 1000, seed: int = 0
         ) -> tuple[InceptionV3, tuple[Tensor, Tensor]]:
    """An :class:`InceptionV3` and one batch of ``(images, labels)``."""
    with seeded(seed) as gen:
        model = InceptionV3(classes)
        images = torch.randn(batch, 3, image_size, image_size, generator=gen)
        labels = torch.randint(0, classes, (batch,), generator=gen)
    return model, (images, labels)
