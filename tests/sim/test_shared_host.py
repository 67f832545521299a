"""Devices that share a host slow each other down (a device's ``shared_slowdown``):
hand-computed step times, the default left bit for bit as it was, the bound and the
timing rules still holding, and the cluster file's key validated."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphopt.errors import ClusterError
from graphopt.hardware import Cluster, Device, load_cluster, topology
from graphopt.ir import GraphBuilder
from graphopt.sim import Plan, Problem, simulate, simulate_batch
from tests.sim.test_simulate import REL, assert_same_result, check_timeline, problem_and_plan


def host_cluster(slowdown: float, d: int = 2, host: str = "box") -> Cluster:
    devs = tuple(Device(f"dev:{i}", "toy", {"float32": 1e12}, 1e11, 1e11, 1e12, 1e-6,
                        host=host, shared_slowdown=slowdown) for i in range(d))
    return Cluster("toy", devs, *topology.all_to_all(d, 1e9, 1e-6))


def chains(flops: list[list[float]]) -> tuple:
    """Independent chains of ops (FLOPs each), chain c on device c, fusion off."""
    b = GraphBuilder("chains")
    for c, ops in enumerate(flops):
        for i, f in enumerate(ops):
            b.add_node(f"c{c}_{i}", "my_custom_op", flops=f, out_bytes=8,
                       inputs=[f"c{c}_{i - 1}"] if i else [])
    g = b.build()
    place = np.array([int(str(name)[1:].split("_")[0]) for name in g.names])
    return g, Plan(placement=place, fusion=np.zeros(g.num_nodes))


@pytest.mark.parametrize("s", [1.0, 1.25, 2.0, 3.5])
def test_two_equal_chains_at_once_take_slowdown_times_as_long(s):
    g, plan = chains([[1e6, 2e6, 3e6]] * 2)
    independent = simulate(Problem(g, host_cluster(1.0)), plan).step_time
    r = simulate(Problem(g, host_cluster(s)), plan, timeline=True)
    assert r.step_time == pytest.approx(s * independent, rel=1e-12)
    assert r.busy == pytest.approx([s * independent] * 2, rel=1e-12)


def test_a_kernel_speeds_up_when_its_neighbour_ends():
    # a: 1 unit of work on dev 0, b: 1/2 on dev 1, slowdown 2. Both run at half speed
    # until b ends at 2 * 1/2 = 1; a then has 1/2 left, alone at full speed: ends at 1.5.
    g, plan = chains([[1e6], [0.5e6]])
    prob = Problem(g, host_cluster(2.0))
    ta, tb = prob.costs.time[0, 0], prob.costs.time[1, 1]
    r = simulate(prob, plan, timeline=True)
    assert r.timeline.end.tolist() == pytest.approx([2 * tb + (ta - tb), 2 * tb], rel=1e-12)


def test_the_slowdown_grows_linearly_with_the_busy_devices_of_a_host():
    # 3 devices of one host, 2 busy: each runs 1 + (s - 1) * (2 - 1) / (3 - 1) times slower
    g, plan = chains([[1e6], [1e6]])
    prob = Problem(g, host_cluster(3.0, d=3))
    assert simulate(prob, plan).step_time == pytest.approx(2.0 * prob.costs.time[0, 0], rel=1e-12)
    # devices of different hosts never slow each other
    devs = tuple(replace(x, host=f"box{i}") for i, x in enumerate(host_cluster(3.0).devices))
    apart = Problem(g, Cluster("apart", devs, *topology.all_to_all(2, 1e9, 1e-6)))
    assert not apart.shared
    assert simulate(apart, plan).step_time == prob.costs.time[0, 0]


def test_transfers_are_not_slowed():
    # a (dev 0) -> b (dev 1): never two kernels at once, so nothing slows down
    g, _ = chains([[1e6, 2e6]])
    plan = Plan(placement=[0, 1], fusion=np.zeros(2))
    assert_same_result(simulate(Problem(g, host_cluster(3.0)), plan, timeline=True),
                       simulate(Problem(g, host_cluster(1.0)), plan, timeline=True))


@given(problem_and_plan(respect_coloc=False))
@settings(max_examples=40)
def test_without_a_slowdown_the_sharing_code_changes_nothing(pp):
    # the fast path (every preset) against the processor-sharing code run with no
    # slowdown: the same step, memory and timeline to the bit; busy time to rounding
    prob, plan = pp
    fast = simulate(prob, plan, timeline=True)
    prob.shared = True
    slow = simulate(prob, plan, timeline=True)
    assert slow.busy == pytest.approx(fast.busy, rel=REL, abs=1e-15)
    assert_same_result(slow, replace(fast, busy=slow.busy))


@given(problem_and_plan(respect_coloc=False, max_nodes=16), st.floats(1.0, 4.0))
@settings(max_examples=40)
def test_with_a_slowdown_every_rule_and_the_bound_still_hold(pp, s):
    prob, plan = pp
    prob = Problem(prob.graph, prob.cluster.with_shared_slowdown(s))
    r = simulate(prob, plan, timeline=True)
    check_timeline(prob, plan, r)
    assert r.step_time >= prob.lower_bound * (1 - REL)
    if plan.fusion is not None and not plan.fusion.any():
        # a kernel takes between its own time and s times that
        tl, t = r.timeline, prob.costs.time[r.timeline.kernel, r.timeline.device]
        assert (tl.end - tl.start >= t * (1 - REL) - 1e-15).all()
        assert (tl.end - tl.start <= s * t * (1 + REL) + 1e-15).all()
    place = np.zeros((1, prob.num_nodes), np.int64) if plan.placement is None else plan.placement[None]
    prio = None if plan.priority is None else plan.priority[None]
    fusion = None if plan.fusion is None else plan.fusion[None]
    assert simulate_batch(prob, place, prio, fusion).step_time[0] == simulate(
        prob, Plan(placement=place[0], priority=plan.priority, fusion=plan.fusion)).step_time


def test_presets_share_nothing_by_default_and_a_file_sets_the_slowdown(tmp_path):
    c = load_cluster("cpu:2")
    assert [d.shared_slowdown for d in c.devices] == [1.0, 1.0]
    assert c.devices[0].host == c.devices[1].host and not Problem(
        chains([[1.0]])[0], c).shared
    assert c.to_dict()["devices"][0]["shared_slowdown"] == 1.0
    assert [d.shared_slowdown for d in c.with_shared_slowdown(1.2).devices] == [1.2, 1.2]
    alone = Cluster("x", (replace(c.devices[0], host=""),), np.zeros((1, 1)), np.zeros((1, 1)))
    assert alone.with_shared_slowdown(1.2).devices[0].shared_slowdown == 1.0  # shares no host
    path = tmp_path / "c.toml"
    base = ('[[devices]]\nkind = "x"\ncount = 2\nprefix = "cpu"\npeak_tflops = { float32 = 1 }\n'
            'vector_tflops = 1\nmem_gbps = 10\nmemory_gib = 1\nshared_slowdown = VALUE\n'
            '[topology]\ntype = "all_to_all"\nlink_gbps = 1\nlatency_us = 1\n')
    path.write_text(base.replace("VALUE", "1.5"))
    assert load_cluster(str(path)).devices[1].shared_slowdown == 1.5
    for bad in ("0.5", "nan", "inf", '"fast"'):
        path.write_text(base.replace("VALUE", bad))
        with pytest.raises(ClusterError, match=r"c\.toml.*'shared_slowdown'"):
            load_cluster(str(path))


def test_a_cluster_rejects_bad_slowdowns():
    with pytest.raises(ClusterError, match="shared_slowdown=0.9"):
        host_cluster(0.9)
    a, b = host_cluster(2.0).devices
    with pytest.raises(ClusterError, match="one value per host"):
        Cluster("mixed", (a, replace(b, shared_slowdown=3.0)), *topology.all_to_all(2, 1e9, 1e-6))
