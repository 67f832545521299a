"""Shared REINFORCE pieces: checkpoints round-trip, group inputs, the group cap."""

import numpy as np
import pytest
import torch

from graphopt.ir.coarsen import colocation_groups
from graphopt.ir.generate import mlp_training_graph
from graphopt.rl import (
    AttentionLSTMPlacer,
    CheckpointError,
    EMABaseline,
    GroupFeatures,
    cap_groups,
    load_checkpoint,
    save_checkpoint,
    time_to_within,
)


def trained_placer(generator):
    torch.manual_seed(0)
    placer = AttentionLSTMPlacer(6, num_devices=3, hidden=8)
    opt = torch.optim.Adam(placer.parameters(), lr=0.1)
    x = torch.rand(1, 5, 6, generator=generator)
    _, logp, _ = placer(x, 4, generator, noise=0.5)
    logp.mean().backward()
    opt.step()
    return placer, opt, x


def test_checkpoint_round_trip(tmp_path):
    gen = torch.Generator().manual_seed(1)
    placer, opt, x = trained_placer(gen)
    save_checkpoint(tmp_path, {"a": (1, 2)}, {"placer": placer}, opt, gen, {"update": 1})
    fresh = AttentionLSTMPlacer(6, num_devices=3, hidden=8)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.1)
    fresh_gen = torch.Generator()
    state = load_checkpoint(tmp_path, {"a": [1, 2]}, {"placer": fresh}, fresh_opt, fresh_gen)
    assert state == {"update": 1}
    for (k, a), (_, b) in zip(placer.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), k
    mine, theirs = opt.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert sorted(mine) == sorted(theirs)
    assert all(torch.equal(mine[i][k], theirs[i][k]) for i in mine for k in mine[i])
    with torch.no_grad():
        assert torch.equal(placer(x, 4, gen)[0], fresh(x, 4, fresh_gen)[0])


def test_checkpoint_refuses_other_config_and_corruption(tmp_path):
    gen = torch.Generator().manual_seed(1)
    placer, opt, _ = trained_placer(gen)
    assert load_checkpoint(tmp_path, {}, {"placer": placer}, opt, gen) is None
    save_checkpoint(tmp_path, {"lr": 0.1}, {"placer": placer}, opt, gen, {})
    with pytest.raises(CheckpointError, match="lr"):
        load_checkpoint(tmp_path, {"lr": 0.2}, {"placer": placer}, opt, gen)
    (tmp_path / "weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(tmp_path, {"lr": 0.1}, {"placer": placer}, opt, gen)


def test_cap_groups_keeps_colocation_whole():
    g = mlp_training_graph(layers=6, hidden=64, batch=8)
    groups = cap_groups(colocation_groups(g), np.ones(g.num_nodes), 3)
    assert groups.max() + 1 <= 3
    for c in np.unique(g.coloc[g.coloc >= 0]):
        assert len(set(groups[g.coloc == c].tolist())) == 1


def test_group_features_count_edges():
    g = mlp_training_graph(layers=2, hidden=16, batch=4)
    feats = GroupFeatures(g)
    one = feats(torch.zeros(1, g.num_nodes, dtype=torch.long), 1)
    assert one.shape == (1, 1, feats.dim(1)) and torch.isfinite(one).all()
    assert float(one[0, 0, 0]) == 1.0  # every edge inside the one group


def test_baseline_and_convergence_edge_cases():
    b = EMABaseline(0.9)
    b.update(np.array([5.0]), np.array([False]))
    assert b.value is None and b.advantage(np.array([1.0, 3.0])).tolist() == [-0.5, 0.5]
    assert time_to_within([(4, 0.1, None)]) == (None, None)
