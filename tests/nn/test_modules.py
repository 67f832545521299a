"""What every layer of graphopt.nn has, as PyTorch Geometric writes them: a
``reset_parameters()`` that re-draws a seeded initialization, a short ``repr``, and
errors that name the values received."""

from __future__ import annotations

import pytest
import torch

from graphopt.nn import AttentionLSTMPlacer, BiSAGE, FiLM, SegmentRecurrentAttention
from graphopt.optim.learned.go.policy import GOPolicy, GOPolicyConfig
from graphopt.optim.learned.hdp.grouper import Grouper

LAYERS = {
    "FiLM(8, context_dim=3)": lambda: FiLM(8, context_dim=3),
    "SegmentRecurrentAttention(8, heads=2, segment=4, context_dim=3)":
        lambda: SegmentRecurrentAttention(8, heads=2, segment=4, context_dim=3),
    "BiSAGE(8, layers=2)": lambda: BiSAGE(8, layers=2),
    "GOPolicy(in_dim=5, dim=16, sage_layers=2, attn_layers=2, heads=4, segment=4)":
        lambda: GOPolicy(GOPolicyConfig(in_dim=5, num_op_types=10, dim=16, segment=4)),
    "AttentionLSTMPlacer(in_dim=5, num_devices=3, hidden=8, bidirectional=True)":
        lambda: AttentionLSTMPlacer(5, num_devices=3, hidden=8),
    "Grouper(types=3, hidden=64, num_groups=5)": lambda: Grouper(3, 4, num_groups=5),
}


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("text", sorted(LAYERS))
def test_repr_is_short(text):
    assert repr(LAYERS[text]()) == text


@pytest.mark.parametrize("text", sorted(LAYERS))
def test_reset_parameters_redraws_a_seeded_init(text):
    torch.manual_seed(0)
    module = LAYERS[text]()
    torch.manual_seed(1)
    module.reset_parameters()
    init = _state(module)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(1.0)
    assert any(not torch.equal(init[k], v) for k, v in module.state_dict().items())
    torch.manual_seed(1)
    module.reset_parameters()
    assert all(torch.equal(init[k], v) for k, v in module.state_dict().items())


def test_film_resets_to_the_identity():
    film = FiLM(4, context_dim=3)
    with torch.no_grad():
        film.proj.weight.add_(1.0)
    film.reset_parameters()
    h = torch.rand(5, 4)
    assert torch.equal(film(h, torch.rand(3)), h)


@pytest.mark.parametrize("dim, heads", [(10, 4), (8, 3), (8, 0)])
def test_attention_width_must_split_into_heads(dim, heads):
    with pytest.raises(ValueError, match=f"dim={dim} must be a multiple of heads={heads}"):
        SegmentRecurrentAttention(dim, heads=heads, segment=4, context_dim=3)
    # the policy's config refuses 0 heads itself, as every size out of its range
    message = "heads=0: expected an integer in 1..64" if heads == 0 else \
        f"dim={dim} must be a multiple of heads={heads}"
    with pytest.raises(ValueError, match=message):
        GOPolicy(GOPolicyConfig(in_dim=5, num_op_types=10, dim=dim, heads=heads))
