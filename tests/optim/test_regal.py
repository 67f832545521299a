"""REGAL: the head's distributions, the chromosome, the method and its trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphopt.evaluate.local import LocalEvaluator
from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim.learned.regal.head import REGALHead
from graphopt.optim import Budget, optimize
from graphopt.optim.learned.regal.method import (REGAL, RegalSpace, layer_split_prior, load_regal_policy,
                                          pretrain_regal, regal_value)
from graphopt.optim.search.brkga import crossover
from graphopt.optim.learned.regal.train import RegalConfig, gene_params, input_dim, regal_inputs, train_regal
from graphopt.sim import Plan, Problem, simulate

TASK = frozenset({"placement", "scheduling"})


@pytest.fixture(scope="module")
def prob() -> Problem:
    return Problem(layered_graph(6, 5, seed=3), load_cluster("p100:2"))


@pytest.mark.parametrize("layers,width", [(1, 1), (1, 2), (3, 4), (40, 25)])
@pytest.mark.parametrize("scale", [0.0, 1.0, 1e4])
def test_beta_parameters_are_positive_and_finite(layers, width, scale):
    """Whatever the graph's size and however large the weights, every gene's Beta is
    valid and every inheritance probability a probability."""
    p = Problem(layered_graph(layers, width, seed=1), load_cluster("p100:4"))
    torch.manual_seed(0)
    head = REGALHead(input_dim(), dim=8, max_devices=8)
    with torch.no_grad():
        for w in head.parameters():
            w.copy_(torch.randn_like(w) * scale)
        out = head(*regal_inputs(p))
    space = RegalSpace(p, TASK)
    g = gene_params(head, out, space.unit_of, space.num_units, 4, True, 0.5, elite_bias=True)
    assert all(len(v) == space.num_genes for v in g.values())
    for k in ("alpha", "beta"):
        assert np.isfinite(g[k]).all() and (g[k] > 0).all()
    assert ((g["inheritance"] >= 0) & (g["inheritance"] <= 1)).all()


def test_untrained_head_is_uniform_brkga(prob):
    head, info = load_regal_policy("untrained")
    space = RegalSpace(prob, TASK)
    with torch.no_grad():
        out = head(*regal_inputs(prob))
    for elite_bias in (False, True):
        g = gene_params(head, out, space.unit_of, space.num_units, 2, True, 0.7, elite_bias)
        assert (g["alpha"] == 1).all() and (g["beta"] == 1).all()
        assert np.allclose(g["inheritance"], 0.7)
    # untrained REGAL is BRKGA's defaults on REGAL's chromosome, draw for draw
    plan, stats = REGAL(checkpoint="untrained").optimize(
        prob, TASK, Budget(400, objective="memory"), seed=5)
    assert stats["value"] == regal_value(prob, None, 5, 400, "memory")
    assert stats["prior"] == "uniform"
    # with a prior, an untrained head hands BRKGA the prior itself; a trained one scales it
    base = layer_split_prior(space)
    g = gene_params(head, out, space.unit_of, space.num_units, 2, True, 0.7, base=base)
    assert np.array_equal(g["alpha"], base["alpha"]) and np.array_equal(g["beta"], base["beta"])
    with torch.no_grad():
        head.out.bias[0] = 1.0  # log alpha of device 0's affinity
        g = gene_params(head, head(*regal_inputs(prob)), space.unit_of, space.num_units, 2, True,
                        0.7, base=base)
    assert np.allclose(g["alpha"][0::2][:space.num_units], np.e * base["alpha"][0::2][:space.num_units])
    _, stats = REGAL(checkpoint="untrained", prior="layer-split").optimize(
        prob, TASK, Budget(400, objective="memory"), seed=5)
    assert stats["prior"] == "layer-split"
    assert stats["value"] == regal_value(prob, base, 5, 400, "memory")


def test_elite_bias_is_the_policy_offset_only_when_asked(prob):
    head, _ = load_regal_policy("untrained")
    space = RegalSpace(prob, TASK)
    with torch.no_grad():
        head.out.bias[2 * head.max_devices + 2] = 1.0  # the crossover offset
        out = head(*regal_inputs(prob))
    args = (head, out, space.unit_of, space.num_units, 2, True, 0.7)
    assert np.allclose(gene_params(*args)["inheritance"], 0.7)
    assert np.allclose(gene_params(*args, elite_bias=True)["inheritance"],
                       1 / (1 + np.exp(-(np.log(0.7 / 0.3) + 1.0))))
    assert head.used(2).sum() == 7 and head.used(2, cross=False).sum() == 6


def test_a_units_affinities_cross_over_together(prob):
    """One crossover coin per unit: a child's unit has both its affinities, so its device,
    from one parent (uniform REGAL is then BRKGA in distribution); priorities on their own."""
    space = RegalSpace(prob, TASK)
    groups, u, d = space.crossover_groups, space.num_units, prob.num_devices
    assert len(groups) == space.num_genes
    assert np.array_equal(groups[:u * d], np.repeat(np.arange(u), d))
    assert np.array_equal(groups[u * d:], u + np.arange(prob.num_nodes))
    rng = np.random.default_rng(0)
    elite, rest = rng.random((3, space.num_genes)), rng.random((5, space.num_genes))
    kids = crossover(rng, elite, rest, 50, np.full(space.num_genes, 0.7), groups)
    parents = np.concatenate([elite, rest])
    for kid in kids:
        for unit in range(u):
            genes = slice(unit * d, unit * d + d)
            assert any(np.array_equal(kid[genes], p[genes]) for p in parents)


def test_decoding_round_trip_and_semantics(prob):
    space = RegalSpace(prob, TASK)
    d, u = prob.num_devices, space.num_units
    keys = np.random.default_rng(0).random((7, space.num_genes))
    dec = space.decode(keys)
    aff = keys[:, :u * d].reshape(7, u, d)
    assert np.array_equal(dec.units, aff.argmax(axis=2))
    assert np.array_equal(dec.priority, keys[:, u * d:])
    again = space.decode(space.encode(dec))
    assert np.array_equal(again.units, dec.units)
    # priorities keep their order (what the simulator reads)
    assert np.array_equal(np.argsort(-again.priority, axis=1, kind="stable"),
                          np.argsort(-dec.priority, axis=1, kind="stable"))
    # the plan a chromosome decodes to is what the evaluator prices
    ev = LocalEvaluator(prob, objective="memory")
    scores = space.evaluate(ev, dec)
    one = simulate(prob, Plan(placement=space.placements(dec)[3], priority=dec.priority[3]))
    assert scores[3] == pytest.approx(one.peak_memory.max())
    with pytest.raises(GraphoptError, match="regal decides placement and scheduling"):
        RegalSpace(prob, frozenset({"placement", "fusion"}))


def test_regal_method_lowers_peak_memory_deterministically(prob):
    kw = {"checkpoint": "untrained", "population": 20}
    a, sa = optimize(prob, "regal", TASK, Budget(300, objective="memory"), seed=1, **kw)
    b, _ = optimize(prob, "regal", TASK, Budget(300, objective="memory"), seed=1, **kw)
    assert np.array_equal(a.placement, b.placement) and np.array_equal(a.priority, b.priority)
    assert sa["evals"] == 300 and sa["value"] <= sa["initial_value"]
    assert simulate(prob, a).peak_memory.max() == pytest.approx(sa["value"])
    assert sa["policy"] == "untrained"


def test_reinforce_raises_a_reward_it_can_see(prob, tmp_path):
    """With a reward that grows with the device-affinity α of every gene, a short run
    moves the policy's mean there: the gradient has the right sign end to end."""
    space = RegalSpace(prob, TASK)

    def to_params(head, out, problem):
        return gene_params(head, out, space.unit_of, space.num_units, 2, True, 0.5)

    def search(problem, params, seed):  # lower is better, as an objective value
        return 2.0 if params is None else 2.0 - float(np.log(params["alpha"][:10]).mean())

    cfg = RegalConfig(updates=30, samples=4, lr=0.05, dim=8, save_every=100)
    head, state = train_regal([prob], cfg, search, to_params, tmp_path)
    rewards = [r["charts/reward_mean"] for r in state["log"]]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.05
    with torch.no_grad():
        g = to_params(head, head(*regal_inputs(prob)), prob)
    assert g["alpha"][:10].mean() > 1.1


def test_checkpoint_resume_is_exact(prob, tmp_path):
    """A run killed after its checkpoint at update 2 and resumed ends exactly as one run."""
    cfg = RegalConfig(updates=4, samples=2, evals=40, dim=8, save_every=2)
    corpus = [prob, Problem(layered_graph(4, 4, seed=9), load_cluster("p100:2"))]
    whole = pretrain_regal(corpus, tmp_path / "a", cfg)

    def crash(update, row):
        if update == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pretrain_regal(corpus, tmp_path / "c", cfg, on_update=crash)
    resumed = pretrain_regal(corpus, tmp_path / "c", cfg)

    def same(rows):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert len(whole["log"]) == 4 and same(resumed["log"]) == same(whole["log"])
    a, _ = load_regal_policy(tmp_path / "a")
    c, _ = load_regal_policy(tmp_path / "c")
    for x, y in zip(a.state_dict().values(), c.state_dict().values()):
        assert torch.equal(x, y)


def test_shipped_policy_loads_and_says_how_it_was_made(prob):
    head, info = load_regal_policy(None)
    assert info["command"].startswith("graphopt train regal") and info["updates"] > 0
    assert info["objective"] == "memory" and "wavenet-2x18-quick" not in info["corpus"]
    space = RegalSpace(prob, TASK)
    with torch.no_grad():
        g = gene_params(head, head(*regal_inputs(prob)), space.unit_of, space.num_units, 2, True,
                        0.5)
    assert all(np.isfinite(v).all() for v in g.values()) and (g["alpha"] > 0).all()


def test_layer_features_and_the_layer_split_prior_cut_a_model_by_layers():
    """On a training graph the layer-order features run from 0 to 1 layer by layer (a
    layer's backward ops beside its forward ones), and the hand-written prior leans the
    first layers to device 0 and the last to device 1, priorities left uniform."""
    from graphopt.ir.generate import mlp_training_graph

    p = Problem(mlp_training_graph(layers=4, hidden=256, batch=8), load_cluster("p100:2"))
    g = p.graph
    x, _ = regal_inputs(p)
    assert x.shape == (g.num_nodes, input_dim())
    place, share = x[:, -2].numpy(), x[:, -1].numpy()
    assert ((share > 0) & (share < 1)).all() and ((place >= 0) & (place <= 1)).all()
    first, last = g.index["layers.0.addmm"], g.index["layers.3.addmm"]
    assert place[first] < place[last] and share[first] < share[last]
    space = RegalSpace(p, TASK)
    pr = layer_split_prior(space, strength=3.0)
    n_aff = space.num_units * 2
    lean = (pr["alpha"][:n_aff] > pr["beta"][:n_aff]).reshape(-1, 2).argmax(axis=1)
    assert lean[space.unit_of[first]] == 0 and lean[space.unit_of[last]] == 1
    assert (pr["alpha"][n_aff:] == 1).all() and (pr["beta"][n_aff:] == 1).all()
    assert len(pr["alpha"]) == space.num_genes and np.allclose(pr["inheritance"], 0.7)


def test_an_update_cut_short_by_a_signal_is_undone_and_resumed_whole(prob, tmp_path):
    """SIGTERM (or Ctrl-C) in the middle of an update's searches, which a stop request cuts
    short: the update is undone (its draws and its reference value too), the checkpoint
    holds the updates before it, and a resume ends exactly as a run never stopped."""
    import os
    import signal

    from graphopt.evaluate.interrupt import stop_on_interrupt

    space = RegalSpace(prob, TASK)

    def to_params(head, out, problem):
        return gene_params(head, out, space.unit_of, space.num_units, 2, True, 0.5)

    def search(problem, params, seed):
        return 2.0 if params is None else 2.0 - float(np.log(params["alpha"][:10]).mean())

    calls = []

    def stopped(problem, params, seed):  # the 2nd update's reference search is cut short
        calls.append(seed)
        if len(calls) == 4:  # 1st update: 1 + 2 searches
            os.kill(os.getpid(), signal.SIGTERM)
            return 99.0
        return search(problem, params, seed)

    cfg = RegalConfig(updates=4, samples=2, lr=0.05, dim=8, save_every=100)
    _, whole = train_regal([prob], cfg, search, to_params, tmp_path / "a")
    with stop_on_interrupt():
        _, cut = train_regal([prob], cfg, stopped, to_params, tmp_path / "c")
    assert cut["update"] == 1 and len(cut["log"]) == 1 and len(cut["uniform"]) == 1
    _, resumed = train_regal([prob], cfg, search, to_params, tmp_path / "c")

    def same(rows):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert same(resumed["log"]) == same(whole["log"])
