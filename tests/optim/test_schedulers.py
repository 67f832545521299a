"""Scheduling defaults: priorities that respect dependencies, the memory and speed
each scheduler promises, and the two scheduling-only optimizers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from graphopt.ir import GraphBuilder
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import optimize
from graphopt.optim.heuristics.schedulers import (MEMORY_SCHEDULERS, best_memory_schedule,
                                                  critical_path, dfs_memory, fifo, list_memory,
                                                  postorder)
from graphopt.sim import Plan, Problem, simulate
from tests.conftest import cluster, graphs

ORDERS = {"list": list_memory, "dfs": dfs_memory, "postorder": postorder}


def fan(branches: int = 4, nbytes: float = 1e8) -> Problem:
    """An input feeding ``branches`` independent pairs: a big producer, then a reduction
    that frees it. First-ready-first-run holds every big tensor at once."""
    b = GraphBuilder("fan")
    x = b.add_node("x", "input", shape=(1,), out_bytes=4)
    for k in range(branches):
        a = b.add_node(f"a{k}", "my_custom_op", shape=(1,), flops=1e6, bytes_written=nbytes,
                       inputs=[x])
        b.add_node(f"r{k}", "my_custom_op", shape=(1,), flops=1e6, bytes_read=nbytes,
                   bytes_written=4, inputs=[a])
    return Problem(b.build(), cluster("dgx1-v100:1"))


@pytest.fixture(scope="module")
def mlp() -> Problem:
    return Problem(mlp_training_graph(layers=4, hidden=256, batch=32), cluster("dgx1-v100:2"))


def test_fifo_is_the_simulator_default(mlp):
    assert fifo(mlp) is None


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_memory_orders_are_topological(mlp, name):
    prio = ORDERS[name](mlp)
    g = mlp.graph
    assert prio.shape == (g.num_nodes,) and len(set(prio.tolist())) == g.num_nodes
    assert (prio[g.src] > prio[g.dst]).all()


def test_critical_path_ranks_never_increase_along_an_edge(mlp):
    place = np.arange(mlp.num_nodes) % 2
    prio = critical_path(mlp, place)
    assert (prio[mlp.graph.src] >= prio[mlp.graph.dst]).all()


def test_critical_path_is_the_longest_path_to_a_sink():
    b = GraphBuilder("diamond")
    x = b.add_node("x", "my_custom_op", shape=(1,), flops=1e9)
    y = b.add_node("y", "my_custom_op", shape=(1,), flops=4e9, inputs=[x])
    z = b.add_node("z", "my_custom_op", shape=(1,), flops=2e9, inputs=[x])
    b.add_node("w", "my_custom_op", shape=(1,), flops=1e9, inputs=[y, z])
    prob = Problem(b.build(), cluster("dgx1-v100:1"))
    t = prob.costs.time[:, 0]
    prio = critical_path(prob)
    assert prio[3] == pytest.approx(t[3])
    assert prio[0] == pytest.approx(t[0] + max(t[1], t[2]) + t[3])


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_memory_schedulers_beat_first_ready_on_a_fan(name):
    prob = fan()
    off = np.zeros(prob.num_nodes)  # no fusion: every tensor materializes
    fifo_peak = simulate(prob, Plan(fusion=off)).peak_memory[0]
    peak = simulate(prob, Plan(priority=ORDERS[name](prob), fusion=off)).peak_memory[0]
    assert fifo_peak >= 4e8 and peak < 2.1e8


def test_best_memory_schedule_keeps_the_lowest_peak(mlp):
    plan = Plan(placement=optimize(mlp, "heft")[0].placement, fusion=np.zeros(mlp.num_nodes))
    prio, name = best_memory_schedule(mlp, plan)
    peaks = {n: (simulate(mlp, plan.replace(priority=f(mlp, plan.placement))).peak_memory
                 / mlp.capacity).max() for n, f in MEMORY_SCHEDULERS.items()}
    assert peaks[name] == min(peaks.values())
    assert np.array_equal(prio, MEMORY_SCHEDULERS[name](mlp, plan.placement))


def test_critical_path_first_beats_first_ready():
    """Four short independent ops come first in index order on device 0; the op heading a
    long chain on device 1 comes last. Running it first lets device 1 start at once."""
    b = GraphBuilder("head-last")
    for k in range(4):
        b.add_node(f"s{k}", "my_custom_op", shape=(1,), flops=1e10)
    h = b.add_node("head", "my_custom_op", shape=(1,), flops=1e9, bytes_written=4)
    for k in range(3):
        h = b.add_node(f"c{k}", "my_custom_op", shape=(1,), flops=1e10, inputs=[h])
    prob = Problem(b.build(), cluster("dgx1-v100:2"))
    place = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    first_ready = simulate(prob, Plan(placement=place)).step_time
    cp = simulate(prob, Plan(placement=place, priority=critical_path(prob, place))).step_time
    assert cp < 0.8 * first_ready


@settings(max_examples=15)
@given(graphs(max_nodes=24))
def test_priorities_on_random_dags(graph):
    prob = Problem(graph, cluster("dgx1-v100:2"))
    place = np.zeros(graph.num_nodes, dtype=np.int64)
    for scheduler in (critical_path, *ORDERS.values()):
        prio = scheduler(prob, place)
        assert prio.shape == (graph.num_nodes,) and np.isfinite(prio).all()
        assert (prio[graph.src] >= prio[graph.dst]).all()
        assert simulate(prob, Plan(priority=prio)).valid


@pytest.mark.parametrize("method", ["critical-path", "xla-memory"])
def test_scheduling_optimizers_keep_the_init_placement_and_fusion(mlp, method):
    init, _ = optimize(mlp, "heft")
    init = init.replace(fusion=np.zeros(mlp.num_nodes))
    plan, stats = optimize(mlp, method, "scheduling", init=init)
    assert np.array_equal(plan.placement, init.placement)
    assert np.array_equal(plan.fusion, init.fusion)
    assert plan.priority is not None and stats["valid"] and stats["evals"] >= 1
    again, _ = optimize(mlp, method, "scheduling", init=init)
    assert again == plan


@pytest.mark.parametrize("method", ["critical-path", "xla-memory"])
def test_scheduling_optimizers_without_init_keep_the_default_placement(method):
    prob = Problem(layered_graph(6, 4), cluster("dgx1-v100:2"))
    plan, stats = optimize(prob, method, "scheduling")
    assert plan.placement is None and plan.fusion is None and plan.priority is not None
    assert stats["valid"]
    if method == "xla-memory":
        assert stats["scheduler"] in MEMORY_SCHEDULERS
