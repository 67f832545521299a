"""GO: the three methods, their checkpoints and the shipped policy (the environment and
PPO are tested in tests/rl)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim import Budget, optimize
from graphopt.optim.learned.go.method import SHIPPED, load_go_policy
from graphopt.optim.learned.go.train import pretrain
from graphopt.runs.checkpoint import CheckpointError
from graphopt.rl.ppo import PPOConfig
from graphopt.sim import Problem, simulate, simulate_batch

ALL = frozenset({"placement", "scheduling", "fusion"})



def test_go_one_beats_random_placement(prob):
    plan, stats = optimize(prob, "go-one", "placement", Budget(320), seed=0, dim=32,
                           progress=False)
    rng = np.random.default_rng(0)
    random = simulate_batch(prob, rng.integers(0, 4, (64, prob.num_nodes)))
    assert stats["evals"] == 320 and stats["valid"]
    assert simulate(prob, plan).step_time == pytest.approx(stats["step_time"])
    assert stats["step_time"] < np.median(random.step_time[random.valid])
    # the policy learned: its late batches beat its first
    means = [m for _, m in stats["curve"] if m is not None]
    assert np.mean(means[-4:]) < means[0]


def test_go_one_is_deterministic_and_does_multitask(training_prob):
    kw = {"dim": 16, "progress": False, "num_samples": 4}
    a, sa = optimize(training_prob, "go-one", "placement,scheduling,fusion", Budget(12), 1, **kw)
    b, sb = optimize(training_prob, "go-one", "placement,scheduling,fusion", Budget(12), 1, **kw)
    assert a == b and sa["step_time"] == sb["step_time"]
    assert a.priority is not None and a.fusion is not None


def test_checkpoint_of_another_run_is_refused(prob, tmp_path):
    d = str(tmp_path / "run")
    optimize(prob, "go-one", "placement", Budget(8), 0, checkpoint_dir=d, dim=16, progress=False,
             num_samples=4)
    with pytest.raises(CheckpointError, match="config differs"):
        optimize(prob, "go-one", "placement", Budget(8), 0, checkpoint_dir=d, dim=16,
                 progress=False, num_samples=4, lr=0.5)


# -- pre-training and the saved policy ---------------------------------------------------------
def test_pretrain_saves_a_policy_go_loads(tmp_path, prob, training_prob):
    out = tmp_path / "pre"
    res = pretrain([prob, training_prob], out, updates=4, ppo=PPOConfig(num_samples=4),
                   progress=False, dim=16, command="test")
    assert res["updates"] == 4 and (out / "policy.safetensors").is_file()
    policy, info = load_go_policy(out)
    assert info["command"] == "test" and info["updates"] == 4 and policy.config.dim == 16
    plan, stats = optimize(prob, "go", "placement", Budget(8), 0, checkpoint=str(out))
    assert stats["evals"] == 8 and stats["valid"]


def test_missing_policy_is_a_clear_error(prob, tmp_path):
    with pytest.raises(CheckpointError, match=str(tmp_path)):
        optimize(prob, "go", "placement", Budget(4), 0, checkpoint=str(tmp_path))


def test_too_many_devices_is_a_clear_error(tmp_path, training_prob):
    out = tmp_path / "two"
    pretrain([training_prob], out, updates=1, ppo=PPOConfig(num_samples=2), progress=False,
             dim=8, max_devices=2)
    four = Problem(layered_graph(4, 4, seed=0), load_cluster("p100:4"))
    with pytest.raises(GraphoptError, match="at most 2 devices"):
        optimize(four, "go", "placement", Budget(4), 0, checkpoint=str(out))


@pytest.mark.skipif(not (SHIPPED / "policy.safetensors").is_file(), reason="no shipped policy")
def test_shipped_policy_places_every_zoo_family():
    from tests.zoo.test_models import NAMES, tiny_entry

    from graphopt.zoo import build, get_entry

    policy, info = load_go_policy()
    assert info["graphs"] and "wavenet" not in " ".join(info["graphs"])
    for name in NAMES:
        g = build(tiny_entry(name))
        p = Problem(g, load_cluster(f"p100:{get_entry(name).num_devices}"))
        plan, stats = optimize(p, "go", "placement", Budget(4), 0)
        assert len(plan.placement) == g.num_nodes and plan.placement.max() < p.num_devices
        assert stats["valid"], name


def _outside_model(name: str):
    """A model written by another library, at a tiny size, and its example inputs."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "torch.nn.TransformerEncoderLayer":
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        return layer, (torch.randn(2, 8, 32),)
    models = pytest.importorskip("torch_geometric.nn.models")
    # add_self_loops=False: adding them drops existing ones by a data-dependent mask,
    # which a training step cannot trace
    return (models.GCN(8, 16, 2, 4, add_self_loops=False),
            (torch.randn(20, 8), torch.randint(0, 20, (2, 60))))


@pytest.mark.skipif(not (SHIPPED / "policy.safetensors").is_file(), reason="no shipped policy")
@pytest.mark.parametrize("name", ["torch.nn.TransformerEncoderLayer", "torch_geometric.GCN"])
def test_shipped_policy_places_models_written_elsewhere(name):
    """Outside models are test material only (never pre-training data): their training
    steps trace to valid graphs and zero-shot GO gives each a valid plan on p100:2."""
    import warnings

    from graphopt.frontends.torch import from_torch

    model, inputs = _outside_model(name)
    with warnings.catch_warnings():  # ops without a cost formula are costed from sizes
        warnings.simplefilter("ignore")
        g = from_torch(model, inputs, training=True)
    assert g.validate() is g and g.num_nodes > 50, name
    p = Problem(g, load_cluster("p100:2"))
    plan, stats = optimize(p, "go", "placement", Budget(4), 0)
    assert stats["evals"] == 4 and stats["valid"], name
    assert len(plan.placement) == g.num_nodes and 0 <= plan.placement.min()
    assert plan.placement.max() < p.num_devices
    # colocation groups (a parameter with its update) stay on one device
    for c in np.unique(g.coloc[g.coloc >= 0]):
        assert len(np.unique(plan.placement[g.coloc == c])) == 1, name
    assert simulate(p, plan).step_time == pytest.approx(stats["step_time"])


def test_cli_train_then_optimize_with_the_policy(tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    out = tmp_path / "pre"
    r = CliRunner().invoke(app, ["train", "--corpus", "example:layered-40@p100:2,example:mlp@p100:2",
                                 "--updates", "2", "--num-samples", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "layered" in r.output and (out / "policy.json").is_file()
    r = CliRunner().invoke(app, ["optimize", "example:mlp", "-c", "p100:2", "-m", "single,go",
                                 "-p", f"go.checkpoint={out}", "-b", "4"])
    assert r.exit_code == 0, r.output
    # --init: pre-training continued from a saved policy (a tiny step: weights barely move)
    more = tmp_path / "more"
    r = CliRunner().invoke(app, ["train", "--corpus", "example:mlp@p100:2", "--init", str(out),
                                 "--updates", "1", "--num-samples", "2", "--lr", "1e-12",
                                 "--out", str(more)])
    assert r.exit_code == 0, r.output
    before, after = load_go_policy(out)[0].state_dict(), load_go_policy(more)[0].state_dict()
    assert all(torch.allclose(before[k], after[k], atol=1e-9) for k in before)
    assert json.loads((more / "policy.json").read_text())["info"]["init"] == str(out)
    r = CliRunner().invoke(app, ["train", "--corpus", "example:mlp@p100:2", "--init", str(tmp_path),
                                 "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and str(tmp_path) in r.output
    r = CliRunner().invoke(app, ["train", "--corpus", "example:mlp", "--cluster", "p100:2",
                                 "--updates", "1", "--num-samples", "2", "--out",
                                 str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
