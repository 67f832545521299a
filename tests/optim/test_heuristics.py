"""Placement heuristics: valid plans that keep colocation groups and fit memory, the
same plan for the same seed, and the behaviour each method promises."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings

from graphopt.hardware import Cluster
from graphopt.ir import Graph, GraphBuilder
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import Budget, list_optimizers, optimize
from graphopt.optim.heuristics._common import coplace
from graphopt.optim.heuristics.baechi import favourite_children
from graphopt.ir.features import layer_of
from graphopt.optim.heuristics.expert import expert_placement
from graphopt.sim import Plan, Problem, simulate
from tests.conftest import cluster, graphs

PLACEMENT = ("single", "expert", "round-robin", "random", "metis", "m-topo", "m-etf", "m-sct",
             "heft")
MEMORY_AWARE = ("metis", "m-topo", "m-etf", "m-sct", "heft")
SCHEDULES = ("heft", "m-etf", "m-sct")  # methods that also return their schedule's order


def colocated(graph, placement) -> bool:
    """Whether every colocation group sits on one device."""
    g = graph.coloc
    return all(len(set(placement[g == k].tolist())) == 1 for k in np.unique(g[g >= 0]))


@pytest.fixture(scope="module")
def problems() -> dict[str, Problem]:
    mlp = mlp_training_graph(layers=4, hidden=256, batch=32)
    return {"layered": Problem(layered_graph(12, 6, seed=1), cluster("dgx1-v100:4")),
            "mlp": Problem(mlp, cluster("dgx1-v100:4")),
            "mlp-hetero": Problem(mlp, cluster("cpu-v100:3"))}


def test_every_method_is_registered():
    assert set(PLACEMENT) | {"critical-path", "xla-memory"} <= set(list_optimizers())


@pytest.mark.parametrize("name", ["layered", "mlp", "mlp-hetero"])
@pytest.mark.parametrize("method", PLACEMENT)
def test_valid_plan(problems, name, method):
    prob = problems[name]
    plan, stats = optimize(prob, method, "placement", seed=0)
    res = simulate(prob, plan)
    assert res.valid, res.reason
    assert len(plan.placement) == prob.num_nodes and colocated(prob.graph, plan.placement)
    assert plan.priority is None and plan.fusion is None
    assert stats["evals"] >= 0 and stats["seconds"] >= 0


@settings(max_examples=8)
@given(graphs(max_nodes=20))
def test_random_dags_with_colocation(graph):
    prob = Problem(graph, cluster("dgx1-v100:4"))
    for method in PLACEMENT:
        plan, _ = optimize(prob, method, "placement,scheduling", seed=3)
        res = simulate(prob, plan)
        assert res.valid, (method, res.reason)
        assert colocated(graph, plan.placement), method


@pytest.mark.parametrize("method", PLACEMENT)
def test_same_seed_same_plan(problems, method):
    prob = problems["layered"]
    a, _ = optimize(prob, method, "placement,scheduling", seed=7)
    b, _ = optimize(prob, method, "placement,scheduling", seed=7)
    assert a == b


def test_random_depends_on_the_seed(problems):
    prob = problems["layered"]
    a, _ = optimize(prob, "random", seed=0)
    b, _ = optimize(prob, "random", seed=1)
    assert not np.array_equal(a.placement, b.placement)


@pytest.fixture(scope="module")
def tight() -> Problem:
    """An 8-layer MLP on 4 GPUs whose memory holds less than half of the one-device peak."""
    g = mlp_training_graph(layers=8, hidden=1024, batch=64)
    c = cluster("dgx1-v100:4")
    peak = simulate(Problem(g, c)).peak_memory[0]
    return Problem(g, c.with_memory(0.45 * peak))


def test_single_reports_that_nothing_fits(tight):
    plan, stats = optimize(tight, "single")
    assert not stats["fits"] and not stats["valid"] and "OOM" in stats["reason"]
    assert not simulate(tight, plan).valid


@pytest.mark.parametrize("method", MEMORY_AWARE)
def test_memory_aware_methods_fit_tight_memory(tight, method):
    plan, stats = optimize(tight, method, seed=0)
    res = simulate(tight, plan)
    assert res.valid, res.reason
    assert (res.peak_memory <= tight.capacity).all()
    assert stats["valid"] and colocated(tight.graph, plan.placement)


def test_single_fails_over_to_the_next_fastest_device():
    c = cluster("dgx1-v100:2")
    g = mlp_training_graph(layers=2, hidden=512, batch=32)
    peak = simulate(Problem(g, c)).peak_memory[0]
    small = Cluster("small-gpu0", (replace(c.devices[0], memory=peak / 2), c.devices[1]),
                    c.bandwidth, c.latency)
    plan, stats = optimize(Problem(g, small), "single")
    assert stats["device"] == 1 and stats["fits"] and stats["valid"]
    assert (plan.placement == 1).all()


def test_single_picks_the_fastest_device(problems):
    plan, stats = optimize(problems["mlp-hetero"], "single")  # a CPU, then two V100s
    assert stats["device"] == 1 and (plan.placement == 1).all()


def test_impossible_memory_gives_an_invalid_plan_not_an_error():
    g = mlp_training_graph(layers=2, hidden=512, batch=32)
    prob = Problem(g, cluster("dgx1-v100:2").with_memory(g.persistent_bytes.max() / 2))
    for method in MEMORY_AWARE:
        plan, stats = optimize(prob, method, budget=Budget(evals=20))
        assert not stats["valid"] and "OOM" in stats["reason"], method
        assert colocated(g, plan.placement)


# -- expert -----------------------------------------------------------------------------
@pytest.mark.parametrize("num_devices", [2, 4, 8])
def test_expert_places_mlp_layer_n_on_device_n_d_over_8(num_devices):
    g = mlp_training_graph(layers=8, hidden=64, batch=8)
    prob = Problem(g, cluster(f"dgx1-v100:{num_devices}"))
    plan, stats = optimize(prob, "expert")
    assert stats["rule"] == "layer-wise"
    for i, module in enumerate(g.module):
        found = layer_of(str(module))
        if found:
            assert plan.placement[i] == found[1] * num_devices // 8, g.names[i]
    assert plan.placement[g.index["loss"]] == num_devices - 1
    assert plan.placement[g.index["x"]] == 0  # no module: with its consumer


def lstm_like(steps: int = 3, layers: int = 8) -> Graph:
    """An unrolled stacked LSTM language model: embedding, ``layers`` cells per step,
    softmax per step, loss."""
    b = GraphBuilder("lstm-like")
    emb = b.add_node("embedding.weight", "parameter", shape=(100, 16), out_bytes=6400,
                     persistent_bytes=6400, module="embedding")
    state: dict[int, int] = {}  # each layer's last cell
    outs = []
    for t in range(steps):
        tok = b.add_node(f"tok{t}", "input", shape=(4,), out_bytes=16)
        h = b.add_node(f"embed{t}", "embedding", shape=(4, 16), flops=64, bytes_written=256,
                       inputs=[tok, emb], module="embedding")
        for layer in range(layers):
            ins = [h] + ([state[layer]] if layer in state else [])
            h = b.add_node(f"cell{t}.{layer}", "mm", shape=(4, 16), flops=1e6, bytes_written=256,
                           inputs=ins, module=f"rnn.lstm.{layer}")
            state[layer] = h
        outs.append(b.add_node(f"softmax{t}", "softmax", shape=(4, 100), flops=400,
                               bytes_written=1600, inputs=[h], module="softmax"))
    b.add_node("loss", "mean", shape=(1,), flops=1200, bytes_written=4, inputs=outs, module="loss")
    return b.build()


def test_expert_lstm_layers_embedding_first_softmax_last():
    g = lstm_like()
    prob = Problem(g, cluster("dgx1-v100:4"))
    place, rule = expert_placement(prob)
    assert rule == "layer-wise"
    for i, m in enumerate(g.module):
        m = str(m)
        if m.startswith("rnn.lstm."):
            assert place[i] == int(m.rsplit(".", 1)[1]) * 4 // 8
        elif m == "embedding":
            assert place[i] == 0
        elif m in ("softmax", "loss"):
            assert place[i] == 3


def test_expert_encoder_decoder():
    b = GraphBuilder("gnmt-like")
    src = b.add_node("src", "input", shape=(4,), out_bytes=16)
    h = b.add_node("enc.emb", "embedding", shape=(4, 8), flops=32, bytes_written=128,
                   inputs=[src], module="encoder.embedding")
    for i in range(4):
        h = b.add_node(f"enc{i}", "mm", shape=(4, 8), flops=1e6, bytes_written=128, inputs=[h],
                       module=f"encoder.layers.{i}")
    tgt = b.add_node("tgt", "input", shape=(4,), out_bytes=16)
    d = b.add_node("dec.emb", "embedding", shape=(4, 8), flops=32, bytes_written=128,
                   inputs=[tgt], module="decoder.embedding")
    d = b.add_node("dec0", "mm", shape=(4, 8), flops=1e6, bytes_written=128, inputs=[d],
                   module="decoder.layers.0")
    a = b.add_node("attn", "bmm", shape=(4, 8), flops=1e5, bytes_written=128, inputs=[d, h],
                   module="decoder.attention")
    for i in range(1, 4):
        a = b.add_node(f"dec{i}", "mm", shape=(4, 8), flops=1e6, bytes_written=128, inputs=[a],
                       module=f"decoder.layers.{i}")
    b.add_node("softmax", "softmax", shape=(4, 8), flops=100, bytes_written=128, inputs=[a],
               module="softmax")
    g = b.build()
    place, rule = expert_placement(Problem(g, cluster("dgx1-v100:4")))
    assert rule == "encoder-decoder"
    at = {str(n): int(place[i]) for i, n in enumerate(g.names)}
    assert [at[f"enc{i}"] for i in range(4)] == [0, 1, 2, 3]
    assert [at[f"dec{i}"] for i in range(4)] == [0, 1, 2, 3]
    assert at["attn"] == at["dec0"] == 0
    assert at["enc.emb"] == at["dec.emb"] == 0
    assert at["softmax"] == 3


def test_expert_pipeline_stages_are_contiguous_and_balanced(problems):
    prob = Problem(layered_graph(40, 5, seed=2), cluster("dgx1-v100:4"))
    plan, stats = optimize(prob, "expert")
    assert stats["rule"] == "pipeline"
    layer = np.array([int(str(m)[5:]) for m in prob.graph.module])
    stage = np.array([plan.placement[layer == k][0] for k in range(40)])
    assert (np.diff(stage) >= 0).all() and set(stage.tolist()) == {0, 1, 2, 3}
    work = np.bincount(plan.placement, weights=prob.costs.time[:, 0], minlength=4)
    assert work.max() < 2 * work.mean()


def test_layer_of():
    assert layer_of("transformer.h.11.mlp") == ("transformer.h", 11)
    assert layer_of("layer1.0.conv1") == ("layer1", 0)
    assert layer_of("layers") is None and layer_of("") is None


# -- list schedulers ----------------------------------------------------------------------
def wide_graph(branches: int = 16, depth: int = 3):
    """Independent chains of heavy matrix products between one input and one sum."""
    b = GraphBuilder("wide")
    x = b.add_node("x", "input", shape=(64, 64), out_bytes=64 * 64 * 4)
    ends = []
    for k in range(branches):
        h = x
        for j in range(depth):
            h = b.add_node(f"b{k}.mm{j}", "mm", shape=(64, 64), flops=2e10, bytes_read=32768,
                           bytes_written=16384, inputs=[h], module=f"branch{k}")
        ends.append(h)
    b.add_node("out", "sum", shape=(64, 64), flops=1e5, bytes_read=16384 * branches,
               bytes_written=16384, inputs=ends)
    return b.build()


@pytest.mark.parametrize("method", ["heft", "m-etf"])
def test_list_schedulers_use_every_device_on_a_wide_graph(method):
    prob = Problem(wide_graph(), cluster("dgx1-v100:4"))
    single = simulate(prob, optimize(prob, "single")[0]).step_time
    plan, _ = optimize(prob, method)
    res = simulate(prob, plan)
    assert res.valid and res.step_time < 0.35 * single
    assert set(plan.placement.tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("method", SCHEDULES)
def test_schedule_order_is_returned_when_scheduling_is_asked(problems, method):
    prob = problems["layered"]
    plan, _ = optimize(prob, method, "placement,scheduling")
    assert plan.priority is not None and simulate(prob, plan).valid
    assert optimize(prob, method, "placement")[0].priority is None


@pytest.mark.parametrize("method", PLACEMENT)
def test_init_fusion_and_priority_are_kept(problems, method):
    prob = problems["mlp"]
    init = Plan(priority=np.arange(prob.num_nodes, dtype=float), fusion=np.zeros(prob.num_nodes))
    plan, _ = optimize(prob, method, "placement", init=init)
    assert np.array_equal(plan.fusion, init.fusion) and np.array_equal(plan.priority, init.priority)


def test_m_sct_stats_and_greedy_favourites(problems):
    prob = problems["layered"]
    _, stats = optimize(prob, "m-sct")
    assert stats["favourites"] == "lp" and stats["favourite_edges"] > 0
    plan, stats = optimize(prob, "m-sct", lp_max_edges=0)
    assert stats["favourites"] == "greedy" and simulate(prob, plan).valid


@pytest.mark.parametrize("lp_max_edges", [10_000, 0])
def test_favourite_children_are_one_per_parent_and_child(problems, lp_max_edges):
    prob = problems["layered"]
    fav, _ = favourite_children(prob, lp_max_edges)
    children = fav[fav >= 0]
    assert len(children) == len(set(children.tolist()))
    edges = set(zip(prob.graph.src.tolist(), prob.graph.dst.tolist()))
    assert all((int(i), int(fav[i])) in edges for i in np.flatnonzero(fav >= 0))


@pytest.mark.parametrize("method", MEMORY_AWARE)
def test_simulations_stay_within_the_budget(tight, method):
    _, stats = optimize(tight, method, budget=Budget(evals=3))
    assert 1 <= stats["evals"] <= 3


@settings(max_examples=20)
@given(graphs(max_nodes=24))
def test_coplace_keeps_groups_and_single_consumer_chains_together(graph):
    groups = coplace(Problem(graph, cluster("dgx1-v100:1")))
    for k in np.unique(graph.coloc[graph.coloc >= 0]):
        members = groups[graph.coloc == k]
        assert (members >= 0).all() and len(set(members.tolist())) == 1
    for u in np.flatnonzero(graph.out_degree == 1):
        v = graph.successors(u)[0]
        assert groups[u] >= 0 and groups[u] == groups[v]


@pytest.mark.parametrize(("method", "grouped"), [("m-etf", False), ("m-topo", False),
                                                 ("heft", True)])
def test_coplacement_can_be_switched(problems, method, grouped):
    prob = problems["mlp"]
    plan, _ = optimize(prob, method, coplace=grouped)
    assert simulate(prob, plan).valid and colocated(prob.graph, plan.placement)
    relu, addmm = prob.graph.index["layers.0.relu"], prob.graph.index["layers.0.addmm"]
    if grouped:
        assert plan.placement[relu] == plan.placement[addmm]


def test_metis_spreads_a_graph_with_one_op_heavier_than_a_device_share():
    """An op with most of the compute (a one-layer BLOOM's embedding) made METIS's
    bisection fail and put every op on one device; it now takes one part and the rest
    spread over the others."""
    from graphopt.optim.heuristics.metis import metis_parts

    b = GraphBuilder("heavy")
    prev = b.add_node("x", "input", out_bytes=1024)
    prev = b.add_node("big", "matmul", inputs=[prev], flops=1e13, out_bytes=1024)
    for i in range(12):
        prev = b.add_node(f"l{i}", "matmul", inputs=[prev], flops=1e9, out_bytes=1024)
    part = metis_parts(Problem(b.build(), cluster("p100:8")), 8)
    assert len(set(part.tolist())) >= 4
