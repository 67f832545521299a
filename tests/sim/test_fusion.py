"""XLA's fusion rules in the simulator (docs/simulator.md "Fusion"): duplication with
recomputation, sibling multi-output fusion, limits, the efficiency of large kernels,
kernels that wait for all inputs, and the default being XLA's greedy choice; each on a
graph small enough that its figures are worked out by hand, and as properties on random
graphs (no cycle, memory exact, bound <= step time)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from graphopt.ir import GraphBuilder
from graphopt.sim import Plan, Problem, simulate, simulate_batch
from tests.sim.test_simulate import (REL, check_fusion, check_timeline, kernel_edges,
                                     placement_of, problem_and_plan, reference_peak,
                                     without_free_ops)

B = 4096  # bytes of every tensor below (1024 float32)


def kernel_time(prob: Problem, flop: float, mem: float, ops: int = 1) -> float:
    """What a kernel of these sums takes on device 0 (docs/simulator.md)."""
    slow = 1 + prob.fusion_slowdown_per_op * max(ops - prob.fusion_efficient_ops, 0)
    return prob.costs.launch[:, 0].max() + max(flop, mem) * slow


def fan_out(one_device, op: str = "add", consumers: int = 2, nbytes: float = B) -> Problem:
    """x, y -> u = op(x, y) -> c_i = relu(u) for each consumer; tensors of ``nbytes``."""
    b = GraphBuilder("fan")
    n = nbytes / 4
    b.add_node("x", "input", out_bytes=nbytes)
    b.add_node("y", "input", out_bytes=nbytes)
    b.add_node("u", op, flops=n, bytes_read=2 * nbytes, bytes_written=nbytes,
               out_bytes=nbytes, inputs=["x", "y"])
    for i in range(consumers):
        b.add_node(f"c{i}", "relu", flops=n, bytes_read=nbytes, bytes_written=nbytes,
                   out_bytes=nbytes, inputs=["u"])
    return Problem(b.build(), one_device)


def test_a_cheap_producer_is_duplicated_into_every_consumer_at_the_cost_of_recomputing_it(
        one_device):
    prob = fan_out(one_device)
    r = simulate(prob, Plan(), timeline=True)  # XLA's default duplicates
    tl = r.timeline
    assert tl.duplicated.tolist() == [False, False, True, False, False]
    assert r.num_kernels == 2 + 2  # two inputs (free) and one kernel per consumer
    check_fusion(prob, Plan(), tl)
    c = prob.costs
    spb_u, spb_c = c.sec_per_byte[c.class_id[2], 0], c.sec_per_byte[c.class_id[3], 0]
    # each consumer's kernel: u's FLOPs again, u's reads, none of u's write nor its read
    flop = c.flop_time[2, 0] + c.flop_time[3, 0]
    mem = c.mem_time[2, 0] - B * spb_u + c.mem_time[3, 0] - B * spb_c
    assert r.step_time == pytest.approx(2 * kernel_time(prob, flop, mem), rel=REL)
    # u's output is never written: peak = two inputs + one consumer's output
    assert r.peak_memory[0] == pytest.approx(3 * B)
    off = simulate(prob, Plan(fusion=np.zeros(prob.num_nodes)))
    assert off.num_kernels == 5 and r.step_time < off.step_time


def test_duplication_is_all_or_nothing_and_never_for_expensive_ops(one_device, small_cluster):
    prob = Problem(fan_out(one_device).graph, small_cluster)
    split = Plan(placement=[0, 0, 0, 0, 1])  # one consumer elsewhere: no copy anywhere
    r = simulate(prob, split, timeline=True)
    assert not r.timeline.duplicated.any()
    check_fusion(prob, split, r.timeline)
    for op in ("exp", "div", "matmul"):  # XLA's expensive ops stay kernels of their own
        r = simulate(fan_out(one_device, op), Plan(), timeline=True)
        assert not r.timeline.duplicated.any()


def test_duplicating_into_many_consumers_can_cost_more_than_it_saves(one_device):
    # a binary op into k consumers of 64 MiB tensors (memory-bound): k copies read 2k
    # tensors and write k; kept, u reads 2 and writes 1, its consumers read k and write k
    for k, better in ((2, True), (6, False)):
        prob = fan_out(one_device, consumers=k, nbytes=64 * 2**20)
        dup = simulate(prob, Plan(), timeline=True)
        assert dup.timeline.duplicated[2]
        keep = np.ones(prob.num_nodes)
        keep[2] = 0.0  # u stays a kernel; nothing else can fuse here
        kept = simulate(prob, Plan(fusion=keep), timeline=True)
        assert not kept.timeline.duplicated.any()
        assert (dup.step_time < kept.step_time) == better


def siblings(one_device) -> Problem:
    """x -> a = relu(x), b = neg(x): siblings of one level sharing x."""
    b = GraphBuilder("sib")
    b.add_node("w", "input", out_bytes=B)
    b.add_node("v", "input", out_bytes=B)
    b.add_node("x", "matmul", flops=2 * 1024 * 1024, bytes_read=2 * B, bytes_written=B,
               out_bytes=B, inputs=["w", "v"])
    for nm, op in (("a", "relu"), ("b", "neg")):  # outputs twice as big (say, a cast up)
        b.add_node(nm, op, flops=1024, bytes_read=B, bytes_written=2 * B, out_bytes=2 * B,
                   inputs=["x"])
    return Problem(b.build(), one_device)


def test_siblings_merge_into_one_kernel_that_reads_their_input_once(one_device):
    prob = siblings(one_device)
    r = simulate(prob, Plan(), timeline=True)
    tl = r.timeline
    assert tl.group.tolist() == [0, 1, 2, 4, 4] and not tl.duplicated.any()
    check_fusion(prob, Plan(), tl)
    c = prob.costs
    spb = c.sec_per_byte[c.class_id[3], 0]
    mem = c.mem_time[3, 0] + c.mem_time[4, 0] - B * spb  # x read once
    expect = c.time[2, 0] + kernel_time(prob, c.flop_time[3, 0] + c.flop_time[4, 0], mem)
    assert r.step_time == pytest.approx(expect, rel=REL)
    # both outputs live from the merged kernel's start, x until it ends: 2 + 2 + 1
    assert r.peak_memory[0] == pytest.approx(5 * B)
    # a priority <= 0 on x keeps them apart
    fus = np.ones(5)
    fus[2] = 0.0
    apart = simulate(prob, Plan(fusion=fus), timeline=True)
    assert apart.num_kernels == r.num_kernels + 1


def test_siblings_of_different_levels_never_merge_so_no_cycle(one_device):
    # x -> a -> c and x -> c: a and c are siblings of x at levels 1 and 2; merged, the
    # kernel {a, c} would be fine, but a -> d -> c would not: levels keep them apart
    gb = GraphBuilder("tri")
    gb.add_node("x", "input", shape=(1024,), out_bytes=B)
    gb.add_node("a", "relu", flops=1024, bytes_read=B, bytes_written=B, out_bytes=B,
                inputs=["x"])
    gb.add_node("d", "sum", flops=1024, bytes_read=B, bytes_written=4, out_bytes=4,
                inputs=["a"])
    gb.add_node("c", "add", flops=1024, bytes_read=2 * B, bytes_written=B, out_bytes=B,
                inputs=["x", "a"])
    prob = Problem(gb.build(), one_device)
    for fusion in (None, np.ones(4), np.array([1.0, 0.0, 1.0, 1.0])):
        plan = Plan(fusion=fusion)
        r = simulate(prob, plan, timeline=True)
        check_fusion(prob, plan, r.timeline)
        check_timeline(prob, plan, r)


def test_a_large_kernel_loses_efficiency(one_device):
    def chain(n):
        b = GraphBuilder("chain")
        b.add_node("x", "input", shape=(1024,), out_bytes=B)
        for i in range(n):
            b.add_node(f"r{i}", "mul", flops=1e9, bytes_read=B, bytes_written=B, out_bytes=B,
                       inputs=[f"r{i - 1}" if i else "x"])
        return Problem(b.build(), one_device)

    for n in (16, 30):  # compute bound: the fused kernel is its FLOPs, slowed past 16 ops
        prob = chain(n)
        r = simulate(prob, Plan())
        assert r.num_kernels == 2
        flop = prob.costs.flop_time[1:, 0].sum()
        assert r.step_time == pytest.approx(kernel_time(prob, flop, 0.0, n), rel=REL)
    prob = chain(30)
    split = np.ones(31)
    split[15] = 0.0  # two kernels of 15 ops: no slowdown, one more launch
    assert simulate(prob, Plan(fusion=split)).step_time < simulate(prob, Plan()).step_time


def test_operand_limit(one_device):
    b = GraphBuilder("wide")
    names = []
    for i in range(6):
        b.add_node(f"in{i}", "input", shape=(1024,), out_bytes=B)
        names.append(f"in{i}")
    prev = names[0]
    for i in range(1, 6):
        b.add_node(f"add{i}", "add", flops=1024, bytes_read=2 * B, bytes_written=B,
                   out_bytes=B, inputs=[prev, names[i]])
        prev = f"add{i}"
    g = b.build()
    wide = simulate(Problem(g, one_device), Plan())
    narrow = Problem(g, one_device, max_fusion_operands=4)
    r = simulate(narrow, Plan(), timeline=True)
    check_fusion(narrow, Plan(), r.timeline)
    assert r.num_kernels > wide.num_kernels


def test_a_fused_kernel_waits_for_all_its_inputs(small_cluster):
    # u on device 0 needs y, which comes late from device 1; fused into c, u's work waits
    b = GraphBuilder("wait")
    b.add_node("x", "input", shape=(1024,), out_bytes=B)
    b.add_node("y0", "relu", flops=1e12, bytes_read=B, bytes_written=B, out_bytes=B,
               inputs=["x"])
    b.add_node("u", "mul", flops=1e12, bytes_read=B, bytes_written=B, out_bytes=B,
               inputs=["x"])
    b.add_node("c", "add", flops=1024, bytes_read=2 * B, bytes_written=B, out_bytes=B,
               inputs=["u", "y0"])
    prob = Problem(b.build(), small_cluster)
    place = [0, 1, 0, 0]
    fused = simulate(prob, Plan(placement=place), timeline=True)
    apart = simulate(prob, Plan(placement=place, fusion=np.zeros(4)), timeline=True)
    assert fused.timeline.group[2] == 3  # u inside c's kernel
    check_timeline(prob, Plan(placement=place), fused)
    # apart, u runs while y0 runs on device 1; fused, after y0 arrives
    assert apart.step_time < fused.step_time


@given(problem_and_plan(respect_coloc=False))
@settings(max_examples=40)
def test_every_rule_memory_and_bound_hold_with_copies_and_siblings(pp):
    prob, plan = pp
    prob = without_free_ops(prob)
    for p in (plan, plan.replace(fusion=None), plan.replace(fusion=np.ones(prob.num_nodes))):
        r = simulate(prob, p, timeline=True)
        check_fusion(prob, p, r.timeline)
        check_timeline(prob, p, r)
        assert r.step_time >= prob.lower_bound * (1 - REL)
        assert r.peak_memory == pytest.approx(reference_peak(prob, p, r), rel=1e-12)
        batch = simulate_batch(prob, placement_of(prob, p)[None],
                               None if p.priority is None else p.priority[None],
                               None if p.fusion is None else p.fusion[None])
        assert batch.step_time[0] == r.step_time
        assert np.array_equal(batch.peak_memory[0], r.peak_memory)


def test_random_graphs_exercise_copies_and_siblings():
    """The property tests above mean something: on the random graphs of tests/conftest,
    the default fusion duplicates ops and merges siblings."""
    from graphopt.ir.generate import layered_graph
    from tests.conftest import cluster

    dup = multi = 0
    for seed in range(5):
        prob = Problem(layered_graph(8, 6, seed=seed), cluster("dgx1-v100:1"))
        tl = simulate(prob, Plan(), timeline=True).timeline
        dup += int(tl.duplicated.sum())
        exits = {(ku, u) for u, ku, _ in kernel_edges(prob, tl)}
        multi += len(exits) - len({k for k, _ in exits})
    assert dup > 0 and multi > 0
