"""GO: the environment, PPO, the three methods, checkpoints and the shipped policy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.coarsen import colocation_groups
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import Budget, optimize
from graphopt.optim.learned.go import SHIPPED, load_go_policy, new_policy, pretrain
from graphopt.rl.checkpoint import CheckpointError
from graphopt.rl.go_env import UNIT_FEATURES, GOEnv
from graphopt.rl.ppo import PPOConfig, log_prob, sample, train
from graphopt.sim import Problem, simulate, simulate_batch

ALL = frozenset({"placement", "scheduling", "fusion"})


@pytest.fixture(scope="module")
def prob():
    return Problem(layered_graph(12, 6, seed=3), load_cluster("p100:4"))


@pytest.fixture(scope="module")
def training_prob():
    return Problem(mlp_training_graph(), load_cluster("p100:2"))


# -- environment ---------------------------------------------------------------------------
def test_env_features_are_finite_and_bounded(training_prob):
    env = GOEnv(training_prob, ALL)
    assert env.x.shape == (env.num_units, len(UNIT_FEATURES))
    assert torch.isfinite(env.x).all() and env.x.abs().max() < 10
    assert env.edge_index.max() < env.num_units
    assert (env.edge_index[0] != env.edge_index[1]).all()
    ops = GOEnv(training_prob, ALL, units="ops")
    assert ops.num_units == training_prob.num_nodes


def test_env_plans_keep_colocation_groups_whole(training_prob):
    env = GOEnv(training_prob, ALL)
    rng = np.random.default_rng(0)
    actions = {"placement": rng.integers(0, 2, (5, env.num_units)),
               "scheduling": rng.integers(0, 8, (5, env.num_units)),
               "fusion": rng.integers(0, 4, (5, env.num_units))}
    place, prio, fuse = env.plans(actions)
    assert place.shape == prio.shape == fuse.shape == (5, training_prob.num_nodes)
    groups = colocation_groups(training_prob.graph)
    for row in place:
        for gid in np.unique(groups):
            assert len(np.unique(row[groups == gid])) == 1
    res = simulate_batch(training_prob, place, prio, fuse)
    assert not (res.reason_code == 2).any()  # no split colocation group


def test_env_task_subset_leaves_defaults(prob):
    env = GOEnv(prob, frozenset({"scheduling"}))
    place, prio, fuse = env.plans({"scheduling": np.zeros((2, env.num_units), np.int64)})
    assert (place == 0).all() and prio is not None and fuse is None


# -- PPO -----------------------------------------------------------------------------------
def test_one_ppo_update_lowers_the_loss_on_a_fixed_batch(prob):
    env = GOEnv(prob, ALL)
    policy = new_policy(0, dim=16)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        logits = policy(*env.inputs(), tasks=env.tasks)
    actions = sample(logits, 8, gen)
    old, _ = log_prob(logits, actions)
    adv = torch.linspace(-1, 1, 8)

    def loss():
        lp, _ = log_prob(policy(*env.inputs(), tasks=env.tasks), actions)
        return (-adv[:, None] * (lp - old).exp()).mean()

    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    before = loss()
    opt.zero_grad()
    before.backward()
    opt.step()
    assert float(loss().detach()) < float(before.detach())


def test_greedy_sample_is_the_argmax(prob):
    env = GOEnv(prob, frozenset({"placement"}))
    with torch.no_grad():
        logits = new_policy(0, dim=16)(*env.inputs(), tasks=env.tasks)
    a = sample(logits, 3, torch.Generator(), greedy=True)["placement"]
    assert (a == logits["placement"].argmax(1).numpy()).all() and a.max() < 4


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


def test_training_checkpoint_resumes_exactly(prob, tmp_path):
    # 8 evaluations, then a second call on the same folder for 8 more, against 16 at once
    env = GOEnv(prob, frozenset({"placement"}))
    policy = new_policy(0, dim=16)
    out = train(policy, [env], PPOConfig(num_samples=4, anneal_lr=False), seed=0, evals=8,
                checkpoint_dir=str(tmp_path / "other"), progress=False)
    assert out["updates"] == 2
    resumed = train(new_policy(0, dim=16), [env], PPOConfig(num_samples=4, anneal_lr=False),
                    seed=0, evals=8, checkpoint_dir=str(tmp_path / "other"), progress=False)
    assert resumed["resumed_from_update"] == 2 and resumed["updates"] == 4
    straight = train(new_policy(0, dim=16), [env], PPOConfig(num_samples=4, anneal_lr=False),
                     seed=0, evals=16, progress=False)
    assert resumed["log"][-1]["best_ratio"] == straight["log"][-1]["best_ratio"]
    assert resumed["log"][-1]["loss"] == straight["log"][-1]["loss"]
    assert (tmp_path / "other" / "log.csv").is_file() and (tmp_path / "other" / "curve.png").is_file()


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
    r = CliRunner().invoke(app, ["train", "--corpus", "example:mlp", "--out", str(out)])
    assert r.exit_code == 2 and "GRAPH@CLUSTER" in r.output
    r = CliRunner().invoke(app, ["train", "--corpus", "example:mlp", "--cluster", "p100:2",
                                 "--updates", "1", "--num-samples", "2", "--out",
                                 str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
