"""ResNet-50 (He et al. 2016): bottleneck residual blocks, 3-4-6-3 per stage.

A 7×7/2 convolution and 3×3/2 max pool stem; four stages of bottleneck blocks
(1×1 reduce, 3×3, 1×1 expand ×4, batch norm after each convolution, a projection
shortcut where the shape changes) with 64, 128, 256 and 512 bottleneck channels;
the stride sits on the 3×3 convolution ("ResNet v1.5", as in the common reference
implementations); global average pooling and a 1000-way classifier.

Sizes used by the zoo: 224×224 inputs, batch 64.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.zoo.models._common import seeded

__all__ = ["ResNet", "make"]


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False),
                         nn.BatchNorm2d(cout))


class Bottleneck(nn.Module):
    """1×1 → 3×3 (stride) → 1×1 (×4 channels), plus the shortcut, then ReLU."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(conv_bn(cin, width, 1), nn.ReLU(), conv_bn(width, width, 3, stride),
                                  nn.ReLU(), conv_bn(width, cout, 1))
        self.shortcut = (conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout
                         else nn.Identity())

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """Bottleneck ResNet classifier; ``forward`` returns the training loss.

    Parameters
    ----------
    blocks : tuple of int
        Blocks per stage; (3, 4, 6, 3) is ResNet-50.
    classes : int
        Number of classes.

    Shapes
    ------
    images (B, 3, H, W), labels (B,) int64 -> scalar loss.
    """

    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for stage, n in enumerate(blocks):
            width = 64 << stage
            for i in range(n):
                layers.append(Bottleneck(cin, width, 2 if i == 0 and stage > 0 else 1))
                cin = 4 * width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, images: Tensor, labels: Tensor) -> Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(images), 1).flatten(1)
        return nn.functional.cross_entropy(self.fc(x), labels)


def make(blocks: tuple[int, ...] = (3, 4, 6, 3), *, image_size: int = 224, batch: int = 64,
         classes: int = 1000, seed: int = 0) -> tuple[ResNet, tuple[Tensor, Tensor]]:
    """A :class:`ResNet` and one batch of ``(images, labels)``."""
    with seeded(seed) as gen:
        model = ResNet(tuple(blocks), classes)
        images = torch.randn(batch, 3, image_size, image_size, generator=gen)
        labels = torch.randint(0, classes, (batch,), generator=gen)
    return model, (images, labels)
