"""Transfers cost the cores at both ends (a device's ``transfer_cpu_bw`` per byte, only
where the end is not idle while the bytes fly; ``transfer_cpu_overhead`` per message), and their
latencies may overlap on a link (``Cluster.overlap_latency``): hand-computed times, the
defaults left as they were, and the cluster file's keys validated."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from graphopt.errors import ClusterError
from graphopt.hardware import Cluster, Device, load_cluster, topology
from graphopt.hardware.presets import cluster_from_toml
from graphopt.ir import GraphBuilder
from graphopt.sim import Plan, Problem, simulate, simulate_batch

BW, LAT = 1e9, 1e-6


def cluster(transfer_cpu_bw: float = float("inf"), overlap: bool = False) -> Cluster:
    devs = tuple(Device(f"dev:{i}", "toy", {"float32": 1e12}, 1e11, 1e11, 1e12, 1e-6,
                        transfer_cpu_bw=transfer_cpu_bw) for i in range(2))
    return Cluster("toy", devs, *topology.all_to_all(2, BW, LAT), overlap_latency=overlap)


def fan_out() -> tuple:
    """a (dev 0) -> b, c (dev 1) -> d (dev 1): one transfer of a's 4 MB, read twice."""
    b = GraphBuilder("fan")
    b.add_node("a", "my_custom_op", flops=1e6, out_bytes=4e6)
    b.add_node("b", "my_custom_op", flops=2e6, out_bytes=8, inputs=["a"])
    b.add_node("c", "my_custom_op", flops=3e6, out_bytes=8, inputs=["a"])
    b.add_node("d", "my_custom_op", flops=1e6, out_bytes=8, inputs=["b", "c"])
    g = b.build()
    return g, Plan(placement=np.array([0, 1, 1, 1]), fusion=np.zeros(4))


def test_copies_overlap_the_link_where_both_ends_are_idle():
    # a's 4 MB take 4 ms on the link, longer than either end's 2 ms of copying, and
    # neither end runs anything meanwhile: the copies cost nothing more
    g, plan = fan_out()
    free = simulate(Problem(g, cluster()), plan, timeline=True)
    r = simulate(Problem(g, cluster(2e9)), plan, timeline=True)
    assert r.timeline.start.tolist() == free.timeline.start.tolist()
    assert r.step_time == free.step_time and r.busy.tolist() == free.busy.tolist()


def busy_ends(x_flops: float) -> tuple:
    """a (dev 0) sends 4 MB to b (dev 1); meanwhile dev 0 runs y, then z, and dev 1 runs
    x (which b also reads): the copies take time from what runs during the transfer."""
    b = GraphBuilder("busy")
    b.add_node("a", "my_custom_op", flops=1e6, out_bytes=4e6)
    b.add_node("y", "my_custom_op", flops=1e10, out_bytes=8)
    b.add_node("z", "my_custom_op", flops=1e6, out_bytes=8, inputs=["y"])
    b.add_node("x", "my_custom_op", flops=x_flops, out_bytes=8)
    b.add_node("b", "my_custom_op", flops=1e6, out_bytes=8, inputs=["a", "x"])
    plan = Plan(placement=np.array([0, 0, 0, 1, 1]), fusion=np.zeros(5),
                priority=np.array([2.0, 1.0, 0.0, 0.0, 0.0]))
    return b.build(), plan


def test_a_busy_end_pays_for_its_copies_in_its_next_kernel():
    g, plan = busy_ends(1e10)
    prob = Problem(g, cluster(2e9))
    tl = simulate(prob, plan, timeline=True).timeline
    t, work = prob.costs.time[:, 0], 4e6 / 2e9
    arrive = t[0] + LAT + 4e6 / BW
    assert tl.start[1] == pytest.approx(t[0]) and tl.end[1] > arrive  # y runs through it
    assert tl.end[3] > arrive  # and so does x
    assert tl.end[2] - tl.start[2] == pytest.approx(t[2] + work, rel=1e-12)  # z pays the send
    assert tl.end[4] - tl.start[4] == pytest.approx(t[4] + work, rel=1e-12)  # b the receive


def test_idle_time_during_the_transfer_takes_its_share_of_the_copy():
    # x ends while the bytes are in flight: dev 1 copies in its idle time from then on,
    # and b pays the rest
    g, plan = busy_ends(9e7)  # x takes 3 ms
    prob = Problem(g, cluster(2e9))
    tl = simulate(prob, plan, timeline=True).timeline
    t, work = prob.costs.time[:, 0], 4e6 / 2e9
    arrive = t[0] + LAT + 4e6 / BW
    assert t[0] < tl.end[3] < arrive and arrive - tl.end[3] < work
    assert tl.start[4] == pytest.approx(arrive, rel=1e-12)
    assert tl.end[4] - tl.start[4] == pytest.approx(t[4] + work - (arrive - tl.end[3]), rel=1e-9)


def test_a_message_costs_both_ends_whatever_its_size():
    g, plan = fan_out()
    free = simulate(Problem(g, cluster()), plan).step_time
    devs = tuple(replace(d, transfer_cpu_overhead=1e-3) for d in cluster().devices)
    r = simulate(Problem(g, Cluster("toy", devs, *topology.all_to_all(2, BW, LAT))), plan)
    assert r.step_time == pytest.approx(free + 2e-3, rel=1e-12)  # one message, two ends


def test_one_device_and_free_transfers_are_unchanged():
    g, plan = fan_out()
    prob_free, prob_cost = Problem(g, cluster()), Problem(g, cluster(1e9))
    one = Plan(placement=np.zeros(4, int), fusion=np.zeros(4))
    assert simulate(prob_cost, one).step_time == simulate(prob_free, one).step_time
    # every preset is free: the array the engine gets is all zeros
    assert not Problem(g, load_cluster("p100:2")).host_work.any()


@pytest.mark.parametrize("overlap", [False, True])
def test_batch_agrees_with_single_plans(overlap):
    g, _ = fan_out()
    prob = Problem(g, cluster(1e9, overlap))
    places = np.random.default_rng(0).integers(0, 2, (16, 4))
    batch = simulate_batch(prob, places, fusion=np.zeros((16, 4)))
    one = [simulate(prob, Plan(placement=p, fusion=np.zeros(4))).step_time for p in places]
    assert batch.step_time.tolist() == pytest.approx(one, rel=1e-12)


def test_overlapped_latencies_free_the_link_after_the_bytes():
    # a and b (dev 0) each send 1 MB to c (dev 1); a link is busy 1 ms per transfer
    b = GraphBuilder("two")
    b.add_node("a", "my_custom_op", flops=1e6, out_bytes=1e6)
    b.add_node("b", "my_custom_op", flops=1e6, out_bytes=1e6)
    b.add_node("c", "my_custom_op", flops=1e6, out_bytes=8, inputs=["a", "b"])
    g = b.build()
    plan = Plan(placement=np.array([0, 0, 1]), fusion=np.zeros(3))
    lat = 5e-3
    c = Cluster("toy", cluster().devices, *topology.all_to_all(2, BW, lat))
    serial = simulate(Problem(g, c), plan, timeline=True).timeline
    over = simulate(Problem(g, replace(c, overlap_latency=True)), plan, timeline=True).timeline
    t = Problem(g, c).costs.time[:, 0]
    # serial: the second transfer waits for the first one's latency and bytes
    assert serial.transfer_start[1] == pytest.approx(serial.transfer_end[0], rel=1e-12)
    # overlapped: only for its bytes; each still arrives latency after its bytes
    assert over.transfer_start.tolist() == pytest.approx([t[0], t[0] + 1e-3], rel=1e-12)
    assert over.transfer_end.tolist() == pytest.approx(
        [t[0] + 1e-3 + lat, t[0] + 2e-3 + lat], rel=1e-12)
    assert over.start[2] == pytest.approx(t[0] + 2e-3 + lat, rel=1e-12)


def _toml(extra: str, topology: str = "") -> dict:
    import tomllib

    return tomllib.loads(f"""
[[devices]]
kind = "w"
count = 2
prefix = "cpu"
peak_tflops = {{ float32 = 0.1 }}
vector_tflops = 0.1
mem_gbps = 10
memory_gib = 4
{extra}
[topology]
type = "all_to_all"
link_gbps = 2
latency_us = 100
{topology}
""")


def test_cluster_file_key():
    c = cluster_from_toml(_toml("transfer_cpu_gbps = 0.5\ntransfer_cpu_us = 20"), "x.toml")
    assert [d.transfer_cpu_bw for d in c.devices] == [0.5e9, 0.5e9]
    assert c.devices[1].transfer_cpu_overhead == pytest.approx(20e-6)
    with pytest.raises(ClusterError, match="x.toml.*transfer_cpu_us"):
        cluster_from_toml(_toml("transfer_cpu_us = -1"), "x.toml")
    assert np.isinf(cluster_from_toml(_toml(""), "x.toml").devices[0].transfer_cpu_bw)
    with pytest.raises(ClusterError, match="x.toml.*transfer_cpu_gbps"):
        cluster_from_toml(_toml("transfer_cpu_gbps = 0"), "x.toml")
    assert cluster_from_toml(_toml("", "overlap_latency = true"), "x.toml").overlap_latency
    assert not cluster_from_toml(_toml(""), "x.toml").overlap_latency
    with pytest.raises(ClusterError, match="x.toml.*overlap_latency"):
        cluster_from_toml(_toml("", "overlap_latency = 1"), "x.toml")
    with pytest.raises(ClusterError, match="transfer_cpu_bw"):
        Cluster("toy", tuple(replace(d, transfer_cpu_bw=-1.0) for d in cluster().devices),
                *topology.all_to_all(2, BW, LAT))
