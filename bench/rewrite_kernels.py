"""The kernels behind two of the rewriter's choices on this CPU, at the shapes of the bench
models (docs/rewrite.md):

- a fused activation (oneDNN's ``mkldnn._convolution_pointwise`` / ``_linear_pointwise``,
  what ``conv-relu-fuse`` and ``linear-gelu-fuse`` build) against the op and its
  activation as two ATen calls;
- two linears of one input merged into one wider linear (``merge-linear``, BERT's query
  and key projections) against the two.

Each pair is timed in turn, one pinned thread, ``--reps`` rounds after 3 warm-up rounds;
the figure is the median over rounds of the time of the unfused (or unmerged) form over
the fused (or merged) one in the same round: above 1, the rewrite pays.

Usage:  .venv/bin/python bench/rewrite_kernels.py [--reps 40]
Writes runs/bench/rewrite_kernels.json.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from graphopt.benchmarks import save_json

# (model, input shape, output channels, kernel, stride, padding, groups)
CONVS = (("vgg-19", (1, 64, 112, 112), 64, 3, 1, 1, 1),
         ("vgg-19", (1, 256, 28, 28), 256, 3, 1, 1, 1),
         ("vgg-19", (1, 512, 14, 14), 512, 3, 1, 1, 1),
         ("squeezenet", (1, 16, 55, 55), 64, 1, 1, 0, 1),
         ("squeezenet", (1, 16, 55, 55), 64, 3, 1, 1, 1),
         ("squeezenet", (1, 64, 13, 13), 256, 1, 1, 0, 1),
         ("resnext-50", (1, 128, 28, 28), 128, 3, 1, 1, 32),
         ("inception-v3", (1, 128, 7, 7), 128, (1, 7), 1, (0, 3), 1))
# (model, input shape, output features, activation)
LINEARS = (("bert", (1, 64, 768), 3072, "gelu"),
           ("vgg-19", (1, 2048), 4096, "relu"),
           ("vgg-19", (1, 4096), 4096, "relu"),
           ("nasrnn", (1, 512), 512, "relu"))
ACT = {"relu": (F.relu, "relu", None), "gelu": (F.gelu, "gelu", "none")}


def _paired(a, b, reps: int) -> float:
    """Median over rounds of ``a``'s time over ``b``'s, the two run back to back."""
    ratios = []
    with torch.no_grad():
        for r in range(3 + reps):
            t = []
            for fn in (a, b) if r % 2 else (b, a):
                start = time.perf_counter()
                fn()
                t.append(time.perf_counter() - start)
            if r >= 3:
                ratios.append(t[0] / t[1] if r % 2 else t[1] / t[0])
    return statistics.median(ratios)


def _conv(x, w, b, stride: int, pad: tuple[int, int], groups: int):
    """conv + relu as two ATen calls, and as oneDNN's fused kernel."""
    return (lambda: F.relu(F.conv2d(x, w, b, stride, pad, 1, groups)),
            lambda: torch.ops.mkldnn._convolution_pointwise(x, w, b, list(pad), [stride, stride],
                                                            [1, 1], groups, "relu", [None], None))


def _linear(x, w, b, act: str):
    """linear + ``act`` as two ATen calls, and as oneDNN's fused kernel."""
    fn, attr, alg = ACT[act]
    return (lambda: fn(F.linear(x, w, b)),
            lambda: torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [None], alg))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for model, shape, cout, k, stride, pad, groups in CONVS:
        kh, kw = k if isinstance(k, tuple) else (k, k)
        x = torch.randn(shape, generator=gen)
        w = torch.randn(cout, shape[1] // groups, kh, kw, generator=gen)
        b = torch.randn(cout, generator=gen)
        ratio = _paired(*_conv(x, w, b, stride, pad if isinstance(pad, tuple) else (pad, pad),
                               groups), args.reps)
        rows.append({"what": f"conv {kh}x{kw} {shape} -> {cout} (groups {groups}) + relu",
                     "model": model, "pair_over_fused": ratio})
    for model, shape, n, act in LINEARS:
        x = torch.randn(shape, generator=gen)
        w = torch.randn(n, shape[-1], generator=gen)
        b = torch.randn(n, generator=gen)
        rows.append({"what": f"linear {shape} -> {n} + {act}", "model": model,
                     "pair_over_fused": _paired(*_linear(x, w, b, act), args.reps)})
    x = torch.randn(1, 64, 768, generator=gen)
    w1, w2 = (torch.randn(768, 768, generator=gen) for _ in range(2))
    b1, b2 = (torch.randn(768, generator=gen) for _ in range(2))
    w12, b12 = torch.cat([w1, w2]), torch.cat([b1, b2])
    merged = _paired(lambda: (F.linear(x, w1, b1), F.linear(x, w2, b2)),
                     lambda: F.linear(x, w12, b12), args.reps)
    rows.append({"what": "two linears (1, 64, 768) -> 768 merged into one -> 1536",
                 "model": "bert", "separate_over_merged": merged})
    result = {"machine": {"cpu": platform.processor() or platform.machine(),
                          "torch": torch.__version__, "threads": 1},
              "reps": args.reps, "rows": rows}
    for r in rows:
        key = "pair_over_fused" if "pair_over_fused" in r else "separate_over_merged"
        print(f"{r['model']:>12}  {r['what']:<58} {key} {r[key]:.3f}")
    save_json(result, Path("runs/bench/rewrite_kernels.json"))


if __name__ == "__main__":
    main()
