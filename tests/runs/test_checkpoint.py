"""Checkpoints: a round trip restores weights, optimizer and generator; another run's or
a corrupt checkpoint is refused; extra tensors come back."""

import json

import pytest
import torch

from graphopt.nn import AttentionLSTMPlacer
from graphopt.runs import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint


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
    with pytest.raises(CheckpointError, match="torn checkpoint"):  # its hash, before parsing
        load_checkpoint(tmp_path, {"lr": 0.1}, {"placer": placer}, opt, gen)
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    del meta["weights_sha256"]  # as graphopt wrote it before it kept the hash
    (tmp_path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(tmp_path, {"lr": 0.1}, {"placer": placer}, opt, gen)


def test_checkpoint_state_of_the_wrong_json_types_is_refused_before_restoring(tmp_path):
    """A hand-edited checkpoint.json (a count as text, a log as a number, state a list)
    was a TypeError traceback in the trainer; an optimizer's param_groups an object, in
    torch. Each is one CheckpointError naming the file, and the weights stay untouched."""
    import json

    gen = torch.Generator().manual_seed(1)
    placer, opt, _ = trained_placer(gen)
    fresh = {"update": 0, "seconds": 0.0, "log": [], "best": None}
    save_checkpoint(tmp_path, {}, {"placer": placer}, opt, gen,
                    {"update": 3, "seconds": 1.5, "log": [{"a": 1}], "best": [0, 1]})
    assert load_checkpoint(tmp_path, {}, {"placer": placer}, opt, gen, fresh=fresh)["update"] == 3
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    other = AttentionLSTMPlacer(6, num_devices=3, hidden=8)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    for state, match in [({**meta["state"], "update": "3"}, "state 'update' is a str, expected a number"),
                         ({**meta["state"], "log": 7}, "state 'log' is a number, expected a list"),
                         ([1], "state is a list, expected an object")]:
        (tmp_path / "checkpoint.json").write_text(json.dumps({**meta, "state": state}))
        with pytest.raises(CheckpointError, match=f"checkpoint.json: {match}"):
            load_checkpoint(tmp_path, {}, {"placer": other}, opt, gen, fresh=fresh)
        assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())
    (tmp_path / "checkpoint.json").write_text(json.dumps({**meta, "param_groups": {"a": 1}}))
    with pytest.raises(CheckpointError, match="does not fit this model"):
        load_checkpoint(tmp_path, {}, {"placer": placer}, opt, gen, fresh=fresh)


def test_extra_tensors_and_no_generator(tmp_path):
    net = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(net.parameters())
    mean = torch.arange(3.0)
    save_checkpoint(tmp_path, {}, {"net": net}, opt, None, {"epoch": 4}, {"norm.mean": mean})
    meta, tensors = read_checkpoint(tmp_path)
    assert meta["state"] == {"epoch": 4} and "rng" not in tensors
    assert torch.equal(tensors["data.norm.mean"], mean)
    assert load_checkpoint(tmp_path, {}, {"net": net}, opt, None) == {"epoch": 4}
    assert read_checkpoint(tmp_path / "none") is None


def test_policy_config_larger_than_its_weights_is_refused_unbuilt(tmp_path, monkeypatch):
    import json

    from graphopt.optim.learned.go.policy import GOPolicy, GOPolicyConfig
    from graphopt.optim.learned.go.method import new_policy
    from graphopt.runs.checkpoint import load_policy, save_policy

    policy = new_policy(0, dim=8)
    save_policy(tmp_path, policy, policy.config_dict(), {})
    meta = json.loads((tmp_path / "policy.json").read_text())
    built = []
    monkeypatch.setattr(torch.nn.Module, "load_state_dict", lambda *a, **k: built.append(a))
    for key, value, message in [("dim", 4000, "does not fit its config .* shape"),  # 1.7 GB if built
                                # building a million layers, even on the meta device, hung
                                ("attn_layers", 10**6, r"attn_layers=1000000: expected an integer in 0..64"),
                                ("dim", 40000, r"dim=40000: expected an integer in 1..4096"),
                                ("heads", "4", r"heads='4': expected an integer")]:
        (tmp_path / "policy.json").write_text(json.dumps({**meta, "config": {**meta["config"], key: value}}))
        with pytest.raises(CheckpointError, match=message):
            load_policy(tmp_path, lambda c: GOPolicy(GOPolicyConfig(**c)))
    assert not built
    (tmp_path / "policy.json").write_text("[" * 100000)
    with pytest.raises(CheckpointError, match="policy.json: not valid JSON"):
        load_policy(tmp_path, lambda c: GOPolicy(GOPolicyConfig(**c)))
