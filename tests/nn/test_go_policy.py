"""GO's network: shapes, masking, segment boundaries and the graph context."""

from __future__ import annotations

import pytest
import torch

from graphopt.nn import BiSAGE, SegmentRecurrentAttention
from graphopt.optim.learned.go.policy import GOPolicy, GOPolicyConfig


def _inputs(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.arange(n - 1)
    edges = torch.stack([src, src + 1]) if n > 1 else torch.zeros(2, 0, dtype=torch.long)
    return torch.rand(n, 6, generator=g), torch.randint(0, 20, (n,), generator=g), \
        torch.arange(n), edges


@pytest.mark.parametrize("n", [1, 7, 64, 65, 300])
@pytest.mark.parametrize("devices", [1, 3, 8])
def test_policy_shapes_and_device_mask(n, devices):
    net = GOPolicy(GOPolicyConfig(in_dim=6, num_op_types=20, dim=16, segment=16))
    out = net(*_inputs(n), num_devices=devices)
    assert out["placement"].shape == (n, 8)
    assert out["scheduling"].shape == (n, 8) and out["fusion"].shape == (n, 4)
    assert torch.isinf(out["placement"][:, devices:]).all()
    assert torch.isfinite(out["placement"][:, :devices]).all()
    assert torch.isfinite(out["scheduling"]).all() and torch.isfinite(out["fusion"]).all()


def test_policy_only_computes_asked_tasks_and_rejects_too_many_devices():
    net = GOPolicy(GOPolicyConfig(in_dim=6, num_op_types=20, dim=16, segment=8, max_devices=4))
    assert set(net(*_inputs(10), num_devices=2, tasks=("placement",))) == {"placement"}
    with pytest.raises(ValueError, match="1..4 devices"):
        net(*_inputs(10), num_devices=5)


def test_unknown_op_ids_read_as_unknown():
    net = GOPolicy(GOPolicyConfig(in_dim=6, num_op_types=20, dim=16, segment=8))
    x, ids, node, e = _inputs(10)
    a = net(x, torch.where(ids == 3, 0, ids), node, e, 2)
    b = net(x, torch.where(ids == 3, 999, ids), node, e, 2)
    assert torch.equal(a["placement"], b["placement"])


def test_groups_pool_the_op_embeddings():
    # Two nodes, each standing for a group of ops: output depends on ops through groups.
    net = GOPolicy(GOPolicyConfig(in_dim=2, num_op_types=5, dim=8, segment=4))
    x, e = torch.zeros(2, 2), torch.tensor([[0], [1]])
    a = net(x, torch.tensor([1, 2, 3]), torch.tensor([0, 0, 1]), e, 2)["placement"]
    b = net(x, torch.tensor([2, 1, 3]), torch.tensor([0, 0, 1]), e, 2)["placement"]
    assert torch.allclose(a, b)  # mean over a group ignores op order


def test_attention_sees_exactly_one_segment_back():
    torch.manual_seed(0)
    layer = SegmentRecurrentAttention(8, heads=2, segment=4, context_dim=3).eval()
    h, ctx = torch.rand(12, 8), torch.rand(3)
    base = layer(h, ctx)
    h2 = h.clone()
    h2[1, 0] += 1.0  # segment 0 (one feature: LayerNorm removes a uniform shift)
    out = layer(h2, ctx)
    assert not torch.allclose(out[4:8], base[4:8])   # segment 1 reads segment 0 as memory
    assert torch.allclose(out[8:], base[8:])         # segment 2 does not
    h3 = h.clone()
    h3[9, 0] += 1.0  # segment 2 never reaches back to earlier segments
    assert torch.allclose(layer(h3, ctx)[:8], base[:8])


def test_padding_does_not_leak():
    torch.manual_seed(0)
    layer = SegmentRecurrentAttention(8, heads=2, segment=4, context_dim=3)
    h, ctx = torch.rand(2, 8), torch.rand(3)
    base = layer(h, ctx)
    # 2 rows pad to one segment of 4: key positions pos[4 + 2], pos[4 + 3] hold only
    # padding (and the first segment's memory is masked), so changing them must leave
    # every real output unchanged.
    with torch.no_grad():
        layer.pos[6:] += 5.0
    assert torch.allclose(layer(h, ctx), base)
    with torch.no_grad():
        layer.pos[5] += 5.0  # a real key position: the same change does show
    assert not torch.allclose(layer(h, ctx), base)


def test_bisage_tells_producers_from_consumers():
    torch.manual_seed(0)
    enc = BiSAGE(4, layers=1)
    x = torch.rand(3, 4)
    fwd = enc(x, torch.tensor([[0, 1], [1, 2]]))
    rev = enc(x, torch.tensor([[1, 2], [0, 1]]))
    assert not torch.allclose(fwd, rev)
