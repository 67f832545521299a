"""A device that waits pays for it in the kernel it starts next (``Device.wake_cost``:
``(idle, extra)`` pairs, linear in between); timelines computed by hand on the fan-out
graph, where device 1 waits for a's 4 MB."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from graphopt.errors import ClusterError
from graphopt.hardware import Cluster, Device, load_cluster, topology
from graphopt.hardware.presets import cluster_from_toml
from graphopt.sim import Plan, Problem, simulate, simulate_batch
from tests.sim.test_transfer_cpu import BW, LAT, _toml, fan_out

IDLE = (3e-5, 3e-4, 3e-3, 1e-2)
EXTRA = (10e-6, 50e-6, 200e-6, 400e-6)
COST = tuple(zip(IDLE, EXTRA))


def cluster(wake: tuple = COST) -> Cluster:
    devs = tuple(Device(f"dev:{i}", "toy", {"float32": 1e12}, 1e11, 1e11, 1e12, 1e-6,
                        wake_cost=wake) for i in range(2))
    return Cluster("toy", devs, *topology.all_to_all(2, BW, LAT))


def expected_wake(idle: float) -> float:
    """The cost after ``idle`` seconds, from the docstring's rule (written out apart from
    the engine's loop)."""
    return float(np.interp(idle, (0.0, *IDLE), (0.0, *EXTRA)))


def test_the_device_that_waits_pays_in_its_next_kernel():
    g, plan = fan_out()
    prob = Problem(g, cluster())
    free = simulate(Problem(g, cluster(())), plan, timeline=True).timeline
    tl = simulate(prob, plan, timeline=True).timeline
    t = prob.costs.time[:, 0]
    # dev 1 is idle from the start until a's bytes arrive: b pays for that wait, and c,
    # which follows b with no wait, pays nothing
    arrive = t[0] + LAT + 4e6 / BW
    assert IDLE[-2] < arrive < IDLE[-1]  # between two measured points
    assert tl.start[1] == pytest.approx(arrive, rel=1e-12)
    assert tl.end[1] - tl.start[1] == pytest.approx(t[1] + expected_wake(arrive), rel=1e-12)
    assert tl.end[2] - tl.start[2] == pytest.approx(t[2], rel=1e-12)
    # dev 0 never waits: a starts at 0
    assert tl.end[0] == free.end[0]


def test_a_wait_beyond_the_last_idle_time_costs_the_last_figure():
    g, plan = fan_out()
    slow = Cluster("toy", cluster().devices, *topology.all_to_all(2, 1e8, LAT))  # a 40 ms transfer
    prob = Problem(g, slow)
    tl = simulate(prob, plan, timeline=True).timeline
    assert tl.start[1] > IDLE[-1]
    assert tl.end[1] - tl.start[1] == pytest.approx(prob.costs.time[1, 0] + EXTRA[-1], rel=1e-12)


def test_a_short_wait_costs_its_share_of_the_first_figure():
    g, plan = fan_out()
    devs = tuple(Device(f"dev:{i}", "toy", {"float32": 1e14}, 1e14, 1e14, 1e12, 1e-6, wake_cost=COST)
                 for i in range(2))
    prob = Problem(g, Cluster("toy", devs, *topology.all_to_all(2, 1e12, LAT)))  # 4 us on the link
    tl = simulate(prob, plan, timeline=True).timeline
    idle = tl.start[1]
    assert 0 < idle < IDLE[0]
    assert tl.end[1] - tl.start[1] == pytest.approx(prob.costs.time[1, 0] + EXTRA[0] * idle / IDLE[0],
                                                    rel=1e-9)


def test_one_device_never_waits_and_presets_are_free():
    g, _ = fan_out()
    one = Plan(placement=np.zeros(4, int), fusion=np.zeros(4))
    assert simulate(Problem(g, cluster()), one).step_time == simulate(Problem(g, cluster(())), one).step_time
    assert Problem(g, load_cluster("p100:2")).host_work.shape[0] == 2  # no wake rows at all


def test_zero_extras_change_nothing():
    from graphopt.ir.generate import layered_graph

    g = layered_graph(8, 6, seed=3)
    preset = load_cluster("p100:2")
    zero = preset.with_wake_cost(((1e-4, 0.0), (1e-2, 0.0)))
    places = np.random.default_rng(1).integers(0, 2, (24, g.num_nodes))
    a, b = simulate_batch(Problem(g, preset), places), simulate_batch(Problem(g, zero), places)
    assert np.array_equal(a.step_time, b.step_time) and np.array_equal(a.peak_memory, b.peak_memory)


def test_a_problem_without_its_wake_cost_shares_its_costs():
    g, plan = fan_out()
    prob = Problem(g, cluster())
    still = prob.with_wake_cost(())
    assert still.costs is prob.costs and prob.cluster.devices[0].wake_cost == COST
    assert simulate(still, plan).step_time == simulate(Problem(g, cluster(())), plan).step_time
    assert simulate(still.with_wake_cost(COST), plan).step_time == simulate(prob, plan).step_time


def test_batch_agrees_with_single_plans():
    g, _ = fan_out()
    prob = Problem(g, cluster())
    places = np.random.default_rng(0).integers(0, 2, (16, 4))
    batch = simulate_batch(prob, places, fusion=np.zeros((16, 4)))
    for p, s in zip(places, batch.step_time):
        assert simulate(prob, Plan(placement=p, fusion=np.zeros(4))).step_time == s


def test_the_busy_time_counts_the_wake():
    g, plan = fan_out()
    prob = Problem(g, cluster())
    r = simulate(prob, plan, timeline=True)
    tl = r.timeline
    on1 = tl.device == 1
    assert r.busy[1] == pytest.approx(float((tl.end - tl.start)[on1].sum()), rel=1e-12)


def test_devices_with_fewer_pairs_or_none_beside_others():
    g, plan = fan_out()
    devs = cluster().devices
    mixed = Cluster("toy", (replace(devs[0], wake_cost=()), replace(devs[1], wake_cost=COST[:2])),
                    *topology.all_to_all(2, BW, LAT))
    prob = Problem(g, mixed)
    tl = simulate(prob, plan, timeline=True).timeline
    # dev 1 waits about 4 ms, beyond its last pair (0.3 ms): its last extra
    assert tl.end[1] - tl.start[1] == pytest.approx(prob.costs.time[1, 0] + EXTRA[1], rel=1e-12)


def test_cluster_files_give_it_in_microseconds_and_refuse_bad_lists():
    c = cluster_from_toml(_toml("wake_cost_us = [[30, 10], [300, 50], [3000, 200], [10000, 400]]"), "x.toml")
    assert np.allclose(c.devices[1].wake_cost, COST)
    assert cluster_from_toml(_toml(""), "x.toml").devices[0].wake_cost == ()
    for bad in ("[1, 2]", "[[1, 2], [1, 3]]", "[[1, 2], [3, -4]]", "[[0, 2]]", '[[1, "4"]]',
                "[[1, inf]]", "[[1, 2, 3]]", "[[true, 2]]", "5"):
        with pytest.raises(ClusterError, match="x.toml.*wake_cost_us"):
            cluster_from_toml(_toml(f"wake_cost_us = {bad}"), "x.toml")
    with pytest.raises(ClusterError, match="wake_cost"):
        cluster(((1e-3, 1e-6), (1e-4, 1e-6)))  # idle times not increasing
