"""The rewriter on modules written outside graphopt: PyTorch's own layers and PyG's."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from graphopt.rewrite import RewriteError, rewrite
from graphopt.rewrite.codegen import fused_dtypes, fused_kernels


def _cases() -> dict:
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2,
                                enable_nested_tensor=False)
    return {
        "TransformerEncoder": (enc, (torch.randn(2, 6, 32),)),
        "MultiheadAttention": (nn.MultiheadAttention(32, 4, batch_first=True),
                               (torch.randn(2, 5, 32),) * 3),
        # the zero initial state is made inside the program, on the CPU: shapes are
        # inferred on meta tensors, where it must go too
        "LSTM": (nn.LSTM(16, 32, 2, batch_first=True), (torch.randn(2, 4, 16),)),
        "GRU": (nn.GRU(16, 32), (torch.randn(4, 2, 16),)),
        "ConvNet": (nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.SiLU(),
                                  nn.Conv2d(8, 8, 3, groups=2), nn.BatchNorm2d(8), nn.GELU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)),
                    (torch.randn(2, 3, 12, 12),)),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_torch_nn_modules_rewrite_to_equal_programs(name):
    model, inputs = _cases()[name]
    model.eval()
    res = rewrite(model, inputs)
    assert res.stats["cost_after"] <= res.stats["cost_before"] * (1 + 1e-9)
    with torch.no_grad():
        want, got = model(*inputs), res.module(*inputs)
    for a, b in zip(torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_pyg_sage_rewrites_and_gat_is_refused_by_name():
    pyg = pytest.importorskip("torch_geometric.nn")

    class Sage(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = pyg.SAGEConv(8, 8), pyg.SAGEConv(8, 4)

        def forward(self, x, edges):
            return self.b(self.a(x, edges).relu(), edges)

    gen = torch.Generator().manual_seed(0)
    x, edges = torch.randn(10, 8, generator=gen), torch.randint(0, 10, (2, 30), generator=gen)
    sage = Sage().eval()
    res = rewrite(sage, (x, edges))
    with torch.no_grad():
        torch.testing.assert_close(res.module(x, edges), sage(x, edges), rtol=1e-4, atol=1e-5)
    # GATConv drops self-loops first: sizes that depend on the edges
    with pytest.raises(RewriteError, match="depends on the input data"):
        rewrite(pyg.GATConv(8, 4, heads=2).eval(), (x, edges))


def test_bfloat16_programs_are_checked_at_their_precision():
    """A fused linear + gelu rounds differently from the pair in bfloat16 (by 0.4% here):
    the output check allows two units in the last place of the dtype, not float32's 0.1%."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU()).to(torch.bfloat16).eval()
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    res = rewrite(model, (x,))
    if fused_kernels() and torch.bfloat16 in fused_dtypes():  # this torch and CPU run it
        assert res.stats["ops_after"] < res.stats["ops_before"]
    else:  # an AVX2 CPU: the pair stays, and the program runs
        assert res.stats["ops_after"] == res.stats["ops_before"]
    assert res.stats["max_error"] <= 2 * torch.finfo(torch.bfloat16).eps


def test_empty_inputs_are_refused_by_name():
    with pytest.raises(RewriteError, match=r"example input 0 has shape \(0, 4\)"):
        rewrite(nn.Linear(4, 4), (torch.randn(0, 4),))
