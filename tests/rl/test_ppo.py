"""PPO: an update lowers the loss, greedy sampling, checkpoints that resume exactly."""

from __future__ import annotations

import pytest
import torch

from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim.learned.go.method import new_policy
from graphopt.optim.learned.go.env import GOEnv
from graphopt.rl.ppo import PPOConfig, log_prob, sample, train
from graphopt.sim import Problem

ALL = frozenset({"placement", "scheduling", "fusion"})


@pytest.fixture(scope="module")
def prob():
    return Problem(layered_graph(12, 6, seed=3), load_cluster("p100:4"))


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
    assert resumed["log"][-1]["charts/best_ratio"] == straight["log"][-1]["charts/best_ratio"]
    assert resumed["log"][-1]["losses/loss"] == straight["log"][-1]["losses/loss"]
    assert (tmp_path / "other" / "log.csv").is_file() and (tmp_path / "other" / "curve.png").is_file()


def test_ctrl_c_checkpoints_between_whole_updates_and_resumes_exactly(prob, tmp_path):
    # Ctrl-C lands inside update 2 (issue 13: the checkpoint held a half-applied update)
    import os
    import signal

    def interrupt_during(env, update):
        calls, plans = [], env.plans

        def wrapped(actions):
            calls.append(1)
            if len(calls) == update:
                os.kill(os.getpid(), signal.SIGINT)
            return plans(actions)
        env.plans = wrapped
        return env

    cfg = PPOConfig(num_samples=4, anneal_lr=False)
    env = interrupt_during(GOEnv(prob, frozenset({"placement"})), 2)
    cut = train(new_policy(0, dim=16), [env], cfg, seed=0, updates=4,
                checkpoint_dir=str(tmp_path), progress=False)
    assert cut["interrupted"] and cut["updates"] < 4
    env = GOEnv(prob, frozenset({"placement"}))
    resumed_policy, straight_policy = new_policy(0, dim=16), new_policy(0, dim=16)
    resumed = train(resumed_policy, [env], cfg, seed=0, updates=4, checkpoint_dir=str(tmp_path),
                    progress=False)
    train(straight_policy, [env], cfg, seed=0, updates=4, progress=False)
    assert resumed["resumed_from_update"] == cut["updates"] and not resumed["interrupted"]
    for a, b in zip(resumed_policy.parameters(), straight_policy.parameters()):
        assert torch.equal(a, b)


def test_embed_then_decide_is_forward(prob):
    env = GOEnv(prob, ALL)
    policy = new_policy(0, dim=16)
    with torch.no_grad():
        whole = policy(*env.inputs(), tasks=env.tasks)
        parts = policy.decide(*policy.embed(*env.inputs()), prob.num_devices, env.tasks)
    assert all(torch.equal(whole[t], parts[t]) for t in env.tasks)


def test_tune_heads_trains_only_the_task_layers(prob):
    env = GOEnv(prob, frozenset({"placement"}))
    policy = new_policy(0, dim=16)
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    out = train(policy, [env], PPOConfig(num_samples=8, tune="heads"), seed=0, evals=32,
                progress=False)
    assert out["updates"] == 4
    moved = {k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])}
    assert moved and all(k.startswith(("task_attn.placement.", "head.placement.")) for k in moved)
