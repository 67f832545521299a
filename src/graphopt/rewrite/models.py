"""Inference versions of Tensat's benchmark models, in plain PyTorch.

Tensat (and TASO before it) measured BERT, ResNeXt-50, NasNet-A, NasRNN, Inception-v3,
SqueezeNet and VGG-19. Six are here (NasNet-A is not: its cell search space would be
a model of its own); Inception-v3 is the zoo's network (:mod:`graphopt.zoo`) run in
inference (no auxiliary head, no loss). BERT is written as TASO's: separate query, key
and value projections, which is what TASO's and Tensat's merge rules find.

The zoo's models (:data:`ZOO_BENCH`: ResNet-50, AmoebaNet, WaveNet, the LSTM language
model, GNMT, Transformer-XL, GPT-2) are rewritten as the zoo builds them, forward pass
and loss, at batch 1: test material beyond Tensat's set, written in this project before
the rewriter, with shapes the rules were not made for (gated dilated convolutions, LSTM
cells, embeddings, relative attention).

Each builder takes a ``size``: ``"bench"`` (sizes chosen so that one inference takes
tens of milliseconds on one CPU core; smaller images than the papers' 224x224 and
299x299 where noted) or ``"tiny"`` (tests). Weights are seeded; batch norms get
non-trivial running statistics so that folding them is checked for real.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from graphopt.errors import UsageError
from graphopt.zoo import get_entry

__all__ = ["MODELS", "TENSAT_MODELS", "ZOO_BENCH", "make_model"]


def _conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


class BertLayer(nn.Module):
    """Post-norm Transformer encoder layer with separate Q, K, V projections (TASO's BERT)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (f(x).reshape(b, t, self.heads, -1).permute(0, 2, 1, 3)
                   for f in (self.q, self.k, self.v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = self.n1(x + self.o((att @ v).permute(0, 2, 1, 3).reshape(b, t, d)))
        return self.n2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class ResNeXtBlock(nn.Module):
    """ResNeXt bottleneck (Xie et al. 2017): 1x1, grouped 3x3 (cardinality 32), 1x1."""

    def __init__(self, cin: int, width: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(_conv_bn(cin, width), _conv_bn(width, width, 3, stride, 32),
                                  nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout)) if stride != 1 or cin != cout
                     else nn.Identity())

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.body(x) + self.down(x))


def _resnext(blocks: tuple[int, ...], base: int) -> nn.Sequential:
    layers: list[nn.Module] = [_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, n in enumerate(blocks):
        width, cout = base * 2 ** i, 256 * 2 ** i
        for j in range(n):
            layers.append(ResNeXtBlock(cin, width, cout, 2 if j == 0 and i > 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000))


class Fire(nn.Module):
    """SqueezeNet's fire module: a 1x1 squeeze, then 1x1 and 3x3 expands concatenated."""

    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.s = nn.Conv2d(cin, squeeze, 1)
        self.e1, self.e3 = nn.Conv2d(squeeze, expand, 1), nn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.s(x))
        return torch.cat([torch.relu(self.e1(x)), torch.relu(self.e3(x))], 1)


def _squeezenet() -> nn.Sequential:
    """SqueezeNet 1.1 (Iandola et al. 2016)."""
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool(), Fire(64, 16, 64),
                         Fire(128, 16, 64), pool(), Fire(128, 32, 128), Fire(256, 32, 128),
                         pool(), Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256),
                         Fire(512, 64, 256), nn.Conv2d(512, 1000, 1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


def _vgg19(width: int) -> nn.Sequential:
    """VGG-19 (Simonyan and Zisserman 2015): 16 3x3 convolutions and 3 linears."""
    layers: list[nn.Module] = []
    cin = 3
    for cout, n in ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4)):
        cout = cout * width // 64
        for _ in range(n):
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
            cin = cout
        layers.append(nn.MaxPool2d(2))
    hidden = 4096 * width // 64
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                         nn.Linear(cin * 4, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, 1000))


class NasRNN(nn.Module):
    """The recurrent cell found by neural architecture search (Zoph and Le 2017), unrolled
    as in TASO's and Tensat's benchmark: each of 8 gates adds a projection of the input
    and one of the hidden state, combined by a tree of elementwise ops."""

    def __init__(self, hidden: int, steps: int):
        super().__init__()
        self.steps = steps
        self.wx = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(8))
        self.wh = nn.ModuleList(nn.Linear(hidden, hidden, bias=False) for _ in range(8))

    def forward(self, xs: Tensor) -> Tensor:
        h = torch.zeros_like(xs[0])
        for i in range(self.steps):
            t = [fx(xs[i]) + fh(h) for fx, fh in zip(self.wx, self.wh)]
            m0 = torch.relu(t[0]) + torch.sigmoid(t[3])
            m1 = torch.sigmoid(t[1]) + torch.tanh(t[2])
            m2 = torch.sigmoid(t[4]) * torch.tanh(t[5])
            m3 = torch.sigmoid(t[6]) * torch.relu(t[7])
            m4 = torch.sigmoid(m1) + torch.tanh(m2)
            m5 = torch.tanh(m0) * torch.tanh(m3)
            h = torch.tanh(torch.tanh(m4) * torch.tanh(m5))
        return h


class InceptionInference(nn.Module):
    """The zoo's Inception-v3 in inference: the main classifier's logits."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, images: Tensor) -> Tensor:
        n = self.net
        x = n.grid8(n.grid17(n.grid35(n.stem(images))))
        return n.fc(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def _inception(size: str) -> tuple[nn.Module, tuple[Tensor, ...]]:
    entry = get_entry("inception-v3-b32" if size == "bench" else "inception-v3-b32-quick")
    net, _ = entry.with_config(entry.name, batch=1, image_size=75 if size == "tiny" else 139
                               ).make()
    return InceptionInference(net), (torch.randn(1, 3, *(2 * [75 if size == "tiny" else 139])),)


#: Zoo entry → its sizes at ``"bench"``: batch 1, one inference in tens of milliseconds
#: on one CPU core. At ``"tiny"`` the zoo's own quick sizes.
ZOO_BENCH: dict[str, dict] = {
    "resnet-50": {"batch": 1, "image_size": 112},
    "amoebanet": {"batch": 1, "filters": 64, "image_size": 96, "normal_cells": 1},
    "wavenet-2x18": {"batch": 1, "length": 2048},
    "rnnlm-2": {"batch": 1, "hidden": 512, "vocab": 2000, "seq_len": 10},
    "gnmt-2": {"batch": 1, "hidden": 512, "vocab": 2000, "src_len": 10, "tgt_len": 10},
    "transformer-xl-2": {"batch": 1, "seg_len": 64, "mem_len": 64, "vocab": 2000},
    "gpt2-small": {"layers": 2, "batch": 1, "context": 64, "vocab": 2000},
}


def _zoo(name: str) -> Callable[[str], tuple[nn.Module, tuple[Tensor, ...]]]:
    def build(size: str) -> tuple[nn.Module, tuple[Tensor, ...]]:
        entry = (get_entry(name).with_config(name, **ZOO_BENCH[name]) if size == "bench"
                 else get_entry(f"{name}-quick"))
        return entry.make()  # forward returns the loss; eval mode turns dropout off
    return build


def _images(size: int, channels: int = 3) -> tuple[Tensor]:
    return (torch.randn(1, channels, size, size),)


#: Model name → ``size -> (module, example inputs)``. Sizes of ``"bench"``: BERT 4
#: layers of width 768, sequence 64; ResNeXt-50 32x4d on 112x112; Inception-v3 on
#: 139x139; SqueezeNet 1.1 on 224x224; VGG-19 on 112x112; NasRNN 5 steps of width 512.
MODELS: dict[str, Callable[[str], tuple[nn.Module, tuple[Tensor, ...]]]] = {
    "bert": lambda size: (nn.Sequential(*(BertLayer(768 if size == "bench" else 32,
                                                    12 if size == "bench" else 2)
                                          for _ in range(4 if size == "bench" else 1))),
                          (torch.randn(1, 64 if size == "bench" else 8,
                                       768 if size == "bench" else 32),)),
    "resnext-50": lambda size: (_resnext((3, 4, 6, 3) if size == "bench" else (1, 1), 128),
                                _images(112 if size == "bench" else 32)),
    "inception-v3": _inception,
    "squeezenet": lambda size: (_squeezenet(), _images(224 if size == "bench" else 48)),
    "vgg-19": lambda size: (_vgg19(64 if size == "bench" else 8),
                            _images(112 if size == "bench" else 32)),
    "nasrnn": lambda size: (NasRNN(512 if size == "bench" else 16, 5 if size == "bench" else 2),
                            (torch.randn(5 if size == "bench" else 2, 1,
                                         512 if size == "bench" else 16),)),
    **{name: _zoo(name) for name in ZOO_BENCH},
}
#: Tensat's own benchmark models (the rest of :data:`MODELS` is the zoo's).
TENSAT_MODELS = ("bert", "resnext-50", "inception-v3", "squeezenet", "vgg-19", "nasrnn")


def make_model(name: str, size: str = "bench", seed: int = 0
               ) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """Model ``name`` of :data:`MODELS` in eval mode and its example inputs (seeded).

    Raises
    ------
    GraphoptError
        Unknown name or size; the message lists the known ones.

    Examples
    --------
    >>> model, inputs = make_model("nasrnn", "tiny")
    >>> model(*inputs).shape
    torch.Size([1, 16])
    """
    if name not in MODELS:
        raise UsageError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    if size not in ("bench", "tiny"):
        raise UsageError(f"unknown size {size!r}; expected bench or tiny")
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        model, inputs = MODELS[name](size)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    return model.eval(), inputs
