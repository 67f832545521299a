"""AmoebaNet (Real et al. 2019, "Regularized Evolution for Image Classifier Architecture Search").

An ImageNet network of NASNet-style cells (Zoph et al. 2018). Each cell takes the
outputs of the two cells before it (``h0``, the previous one, through ReLU–1×1
conv–BN; ``h1``, the one before, reduced to match), then five times picks two
hidden states, applies one op to each and adds the results; the hidden states no
step consumed are concatenated as the cell's output. Reduction cells apply their
ops to the cell inputs with stride 2 and double the filters.

Cell genotypes follow the TensorFlow TPU reference implementation's
``model_specs.py``: ``"d"`` (AmoebaNet-D, the zoo's default: 1×1, 3×3 and 1×7–7×1
convolutions, max and average pools, identities) and ``"a"`` (AmoebaNet-A: depthwise
separable convolutions and pools). Network: a 3×3/2 stem convolution, two stride-2
stem reduction cells at F/4 and F/2 filters, then three stages of ``normal_cells``
normal cells with F, 2F and 4F filters joined by reduction cells, global average
pooling and a linear classifier; convolutions are ReLU–conv–BN, and the 3×3 and
1×7–7×1 ones sit inside a 1×1 bottleneck of a quarter of the filters, as in the
reference.

Sizes used by the zoo: F = 256 (the reference's ``reduction_size``), 2 normal cells
per stage (a small network; the reference trains 4 or 6), 224×224 inputs, batch 64.
Changed: the stem convolution pads by 1 so every grid stays even; left out: the
auxiliary head, drop-path and dropout.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.errors import UsageError
from graphopt.zoo.models._common import seeded

__all__ = ["GENOTYPES", "AmoebaNet", "make"]

#: ``(operations, hidden-state indices, used hidden states)`` of normal and reduction
#: cells: step ``k`` combines ``op[2k](h[idx[2k]]) + op[2k+1](h[idx[2k+1]])`` into
#: ``h[k + 2]``; states flagged 0 in ``used`` form the output.
GENOTYPES: dict[str, dict[str, tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]]] = {
    "d": {
        "normal": (("1x1", "max_pool_3x3", "none", "1x7_7x1", "1x1", "1x7_7x1",
                    "max_pool_3x3", "none", "avg_pool_3x3", "1x1"),
                   (1, 1, 1, 0, 0, 0, 2, 2, 1, 5), (0, 1, 1, 0, 0, 1, 0)),
        "reduction": (("max_pool_2x2", "max_pool_3x3", "none", "3x3", "1x7_7x1",
                       "max_pool_3x3", "none", "max_pool_2x2", "avg_pool_3x3", "1x1"),
                      (0, 0, 2, 1, 2, 2, 3, 1, 2, 3), (1, 1, 1, 1, 0, 0, 0)),
    },
    "a": {
        "normal": (("avg_pool_3x3", "max_pool_3x3", "separable_3x3_2", "none", "none",
                    "avg_pool_3x3", "separable_3x3_2", "separable_5x5_2", "avg_pool_3x3",
                    "separable_3x3_2"),
                   (0, 0, 1, 1, 0, 1, 0, 2, 5, 0), (1, 0, 1, 0, 0, 1, 0)),
        "reduction": (("separable_3x3_2", "avg_pool_3x3", "max_pool_3x3", "separable_7x7_2",
                       "max_pool_3x3", "max_pool_3x3", "separable_3x3_2", "1x7_7x1",
                       "avg_pool_3x3", "separable_7x7_2"),
                      (1, 0, 0, 2, 1, 0, 4, 0, 1, 0), (1, 1, 0, 0, 0, 0, 0)),
    },
}


def relu_conv_bn(cin: int, cout: int, kernel=1, stride=1, padding=0) -> nn.Sequential:
    """ReLU, convolution without bias, batch norm: the reference's convolution unit."""
    return nn.Sequential(nn.ReLU(), nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(cout))


class FactorizedReduce(nn.Module):
    """Halve the grid without losing pixels: two 1×1/2 convolutions, one on the input
    shifted by a pixel, concatenated, then BN (Zoph et al. 2018)."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.a = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.b = nn.Conv2d(cin, cout - cout // 2, 1, 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(x)
        shifted = nn.functional.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:]
        return self.bn(torch.cat([self.a(x), self.b(shifted)], dim=1))


def _operation(name: str, channels: int, stride: int) -> nn.Module:
    """One cell op by its reference name, on ``channels`` channels (``stride`` 1 or 2).

    As in the reference: spatial convolutions sit in a ReLU–1×1 (channels / 4)
    bottleneck (none when that would leave no channel), separable ones are two
    ReLU–depthwise–pointwise–BN layers, pools keep channels, and an identity with
    stride 2 becomes a strided ReLU–1×1–BN.
    """
    if name == "none":
        return relu_conv_bn(channels, channels, 1, stride) if stride > 1 else nn.Identity()
    if name == "1x1":
        return relu_conv_bn(channels, channels, 1, stride)
    if name in ("3x3", "1x7_7x1"):
        c = channels // 4 or channels
        body = ([relu_conv_bn(c, c, 3, stride, 1)] if name == "3x3" else
                [nn.ReLU(), nn.Conv2d(c, c, (1, 7), (1, stride), (0, 3), bias=False),
                 nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c, (7, 1), (stride, 1), (3, 0), bias=False),
                 nn.BatchNorm2d(c)])
        if c == channels:
            return nn.Sequential(*body)
        return nn.Sequential(relu_conv_bn(channels, c), *body, relu_conv_bn(c, channels))
    if name.startswith("max_pool_"):
        k = int(name[-1])
        return nn.MaxPool2d(k, stride, (k - 1) // 2)
    if name.startswith("avg_pool_"):
        k = int(name[-1])
        return nn.AvgPool2d(k, stride, (k - 1) // 2, count_include_pad=False)
    if name.startswith("separable_"):
        k = int(name.split("_")[1].split("x")[0])
        layers: list[nn.Module] = []
        for i in range(2):
            layers += [nn.ReLU(), nn.Conv2d(channels, channels, k, stride if i == 0 else 1, k // 2,
                                            groups=channels, bias=False),
                       nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels)]
        return nn.Sequential(*layers)
    raise UsageError(f"AmoebaNet: unknown cell operation {name!r}")


class Cell(nn.Module):
    """A normal or reduction cell of ``filters`` channels per hidden state.

    Shapes
    ------
    x (B, c_prev, H, W), prev (B, c_prev_prev, H' , W') with H' = H or 2H
    -> (B, filters * outputs, H / stride, W / stride).
    """

    def __init__(self, spec, c_prev_prev: int, c_prev: int, filters: int, reduction: bool,
                 prev_reduced: bool):
        super().__init__()
        ops, self.indices, used = spec
        self.base = relu_conv_bn(c_prev, filters)
        self.prev: nn.Module
        if prev_reduced:
            self.prev = FactorizedReduce(c_prev_prev, filters)
        elif c_prev_prev != filters:
            self.prev = relu_conv_bn(c_prev_prev, filters)
        else:
            self.prev = nn.Identity()
        self.ops = nn.ModuleList(
            _operation(op, filters, 2 if reduction and idx < 2 else 1)
            for op, idx in zip(ops, self.indices))
        self.concat = [i for i, u in enumerate(used) if not u]
        self.out_channels = filters * len(self.concat)

    def forward(self, x: Tensor, prev: Tensor) -> Tensor:
        states = [self.base(x), self.prev(prev)]
        for k in range(0, len(self.ops), 2):
            states.append(self.ops[k](states[self.indices[k]]) +
                          self.ops[k + 1](states[self.indices[k + 1]]))
        return torch.cat([states[i] for i in self.concat], dim=1)


class AmoebaNet(nn.Module):
    """AmoebaNet classifier; ``forward`` returns the training loss.

    Parameters
    ----------
    normal_cells : int
        Normal cells per stage (three stages).
    filters : int
        F, the filters per hidden state in the first stage.
    cell : {"d", "a"}
        Genotype from :data:`GENOTYPES`.
    stem_filters, classes : int
        Stem convolution width and number of classes.

    Shapes
    ------
    images (B, 3, H, W) with H, W multiples of 32, labels (B,) int64 -> scalar loss.
    """

    def __init__(self, normal_cells: int = 2, filters: int = 256, cell: str = "d",
                 stem_filters: int = 32, classes: int = 1000):
        super().__init__()
        if filters < 4 or filters % 4:
            raise UsageError(f"AmoebaNet: filters must be a positive multiple of 4 (the stem "
                             f"cells use filters / 4), got {filters}")
        if cell not in GENOTYPES:
            raise UsageError(f"AmoebaNet: unknown genotype {cell!r}; known: {sorted(GENOTYPES)}")
        spec = GENOTYPES[cell]
        self.stem = nn.Sequential(nn.Conv2d(3, stem_filters, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(stem_filters))
        plan = [(filters // 4, True), (filters // 2, True)]
        for stage in range(3):
            if stage:
                plan.append((filters << stage, True))
            plan += [(filters << stage, False)] * normal_cells
        cells, c_pp, c_p, reduced = [], stem_filters, stem_filters, False
        for f, reduction in plan:
            c = Cell(spec["reduction" if reduction else "normal"], c_pp, c_p, f, reduction, reduced)
            cells.append(c)
            c_pp, c_p, reduced = c_p, c.out_channels, reduction
        self.cells = nn.ModuleList(cells)
        self.fc = nn.Linear(c_p, classes)

    def forward(self, images: Tensor, labels: Tensor) -> Tensor:
        x = self.stem(images)
        prev = x
        for cell in self.cells:
            x, prev = cell(x, prev), x
        x = nn.functional.adaptive_avg_pool2d(torch.relu(x), 1).flatten(1)
        return nn.functional.cross_entropy(self.fc(x), labels)


def make(normal_cells: int = 2, *, filters: int = 256, cell: str = "d", image_size: int = 224,
         batch: int = 64, classes: int = 1000, seed: int = 0
         ) -> tuple[AmoebaNet, tuple[Tensor, Tensor]]:
    """An :class:`AmoebaNet` and one batch of ``(images, labels)``."""
    with seeded(seed) as gen:
        model = AmoebaNet(normal_cells, filters, cell, classes=classes)
        images = torch.randn(batch, 3, image_size, image_size, generator=gen)
        labels = torch.randint(0, classes, (batch,), generator=gen)
    return model, (images, labels)
