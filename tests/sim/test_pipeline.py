"""The pipelined throughput of a partition, held against the event simulator."""

from __future__ import annotations

import numpy as np
import pytest

from graphopt.hardware import load_cluster
from graphopt.ir import GraphBuilder
from graphopt.ir.generate import layered_graph
from graphopt.sim import Problem
from graphopt.sim.pipeline import pipeline_cost, simulated_interval, stationary, stream_graph


def _contiguous(n: int, d: int, rng) -> np.ndarray:
    cuts = np.sort(rng.choice(np.arange(1, n), d - 1, replace=False))
    return np.searchsorted(cuts, np.arange(n), side="right")


@pytest.mark.parametrize("preset", ["mcm-ring4", "mcm-ring8"])
def test_interval_is_the_event_simulators_steady_state(preset):
    prob = Problem(layered_graph(8, 4, seed=1), load_cluster(preset))
    rng = np.random.default_rng(0)
    for _ in range(3):
        place = _contiguous(prob.num_nodes, prob.num_devices, rng)
        analytic = pipeline_cost(prob, place).interval[0]
        assert simulated_interval(prob, place) == pytest.approx(analytic, rel=0.01)


def test_one_chip_is_the_sum_of_its_ops_and_links_idle():
    prob = Problem(layered_graph(4, 3), load_cluster("mcm-ring4"))
    cost = pipeline_cost(prob, np.zeros((2, prob.num_nodes), int))
    assert np.allclose(cost.interval, prob.costs.time[:, 0].sum())
    assert not cost.link.any() and (cost.bottleneck == 0).all()
    assert np.allclose(cost.throughput, 1 / cost.interval)


def test_bottleneck_link_sets_the_interval():
    b = GraphBuilder("two")
    x = b.add_node("x", "input", out_bytes=32e6)
    b.add_node("y", "relu", inputs=[x], flops=1e3, bytes_read=32e6, bytes_written=32e6)
    prob = Problem(b.build(), load_cluster("mcm-ring4"))
    cost = pipeline_cost(prob, np.array([0, 1]))
    # 32 MB over a 32 GB/s link with 1 us latency: 1.001 ms, far above either op
    assert cost.link[0, 0, 1] == pytest.approx(1e-6 + 32e6 / 32e9)
    assert cost.interval[0] == pytest.approx(cost.link[0, 0, 1])


def test_stationary_weights_never_cross_a_link():
    b = GraphBuilder("tied")
    w = b.add_node("w", "parameter", out_bytes=4e6, persistent_bytes=4e6)
    x = b.add_node("x", "input", out_bytes=1e3)
    a = b.add_node("a", "matmul", inputs=[x, w], flops=1e6, bytes_written=1e3)
    b.add_node("c", "matmul", inputs=[a, w], flops=1e6, bytes_written=1e3)
    g = b.build()
    assert stationary(g).tolist() == [g.names.tolist().index("w") == i for i in range(4)]
    prob = Problem(g, load_cluster("mcm-ring4"))
    place = np.zeros(4, int)
    place[g.names.tolist().index("c")] = 1
    cost = pipeline_cost(prob, place)
    assert cost.link[0, 0, 1] == pytest.approx(1e-6 + 1e3 / 32e9)  # only a's output
    s = stream_graph(g, 3)
    assert s.num_nodes == 12 and len(s.src) == 3 * 2  # the weight's edges left out


def test_simulated_interval_rejects_bad_copies():
    prob = Problem(layered_graph(2, 2), load_cluster("mcm-ring4"))
    with pytest.raises(ValueError, match="increasing"):
        simulated_interval(prob, np.zeros(prob.num_nodes, int), copies=(4, 4))
