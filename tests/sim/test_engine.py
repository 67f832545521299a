"""The engine's machinery around the semantics: compiling once, numba's cache, and
simulate sharing nothing between calls (the semantics themselves: test_simulate.py)."""

from __future__ import annotations

import importlib.util
import sys
import threading

import numba
import numpy as np
import pytest

from graphopt.errors import PlanError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.sim import Plan, Problem, ensure_compiled, simulate, simulate_batch
from graphopt.sim.engine import _jit
from tests.sim.test_simulate import assert_same_result


def test_ensure_compiled_returns_a_bool_and_simulate_works_after_it():
    first = ensure_compiled()
    assert isinstance(first, bool)
    assert ensure_compiled() is False, "the second call finds the engine loaded"
    prob = Problem(layered_graph(4, 3, seed=0), load_cluster("dgx1-v100:2"))
    assert simulate(prob, Plan()).valid


def test_without_a_writable_cache_directory_the_engine_compiles_with_a_warning(
        tmp_path, monkeypatch):
    # numba raises, rather than fall back, when it can write its cache nowhere: no
    # NUMBA_CACHE_DIR, no __pycache__ beside the source (a file of that name is in the
    # way), no user cache directory
    (tmp_path / "__pycache__").write_text("")
    (tmp_path / "mod_no_cache.py").write_text("def twice(x):\n    return 2 * x\n")
    spec = importlib.util.spec_from_file_location("mod_no_cache", tmp_path / "mod_no_cache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    monkeypatch.setenv("HOME", "/dev/null/home")
    monkeypatch.setenv("XDG_CACHE_HOME", "/dev/null/cache")
    with pytest.raises(RuntimeError, match="no locator available"):
        numba.njit(cache=True)(mod.twice)
    with pytest.warns(RuntimeWarning, match="NUMBA_CACHE_DIR"):
        twice = _jit()(mod.twice)
    assert twice(21) == 42
    sys.modules.pop("mod_no_cache", None)


@pytest.fixture(scope="module")
def prob_and_plans():
    prob = Problem(layered_graph(30, 8, seed=1), load_cluster("dgx1-v100:4"))
    rng = np.random.default_rng(0)
    n = prob.num_nodes
    plans = [Plan(placement=rng.integers(0, 4, n), priority=rng.normal(size=n) if i % 2 else None,
                  fusion=None if i % 3 else rng.uniform(-1, 1, n)) for i in range(6)]
    return prob, plans


def test_simulate_shares_nothing_between_calls(prob_and_plans):
    # interleaved with other plans and another problem, a plan gives the same result
    prob, plans = prob_and_plans
    other = Problem(layered_graph(7, 5, seed=2), load_cluster("dgx1-v100:4"))
    alone = [simulate(prob, p, timeline=True) for p in plans]
    for p, want in zip(plans, alone):
        simulate(other, Plan(placement=np.full(other.num_nodes, 3)))
        got = simulate(prob, p, timeline=True)
        assert_same_result(got, want)
        simulate(prob, plans[0])
        assert_same_result(got, want)  # a later call leaves an earlier result alone


def test_simulate_from_several_threads_at_once(prob_and_plans):
    prob, plans = prob_and_plans
    want = [simulate(prob, p, timeline=True) for p in plans]
    got: dict[tuple[int, int], object] = {}

    def work(t: int) -> None:
        for _ in range(3):
            for i, p in enumerate(plans):
                got[t, i] = simulate(prob, p, timeline=True)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for (_, i), r in got.items():
        assert_same_result(r, want[i])


# Step time (hex), peak memory per device (hex) and kernels of a few plans on zoo graphs
# (tiny sizes) and a layered graph on dgx1-v100:4, with the compiler's default fusion,
# as the engine gave them before its speed work (issue 38): a faster engine must give
# them bit for bit.
PINNED = {
    ("gnmt-2", "one device"):
        ("0x1.656647c356eaap-9", ["0x1.1cec000000000p+17", "0x0.0p+0",
          "0x0.0p+0", "0x0.0p+0"],
         725),
    ("gnmt-2", "contiguous"):
        ("0x1.42c234e7e8eb0p-9", ["0x1.9f80000000000p+15", "0x1.24c0000000000p+16",
          "0x1.9ca0000000000p+16", "0x1.60b8000000000p+16"],
         870),
    ("gnmt-2", "random"):
        ("0x1.0b07a2e5f3d03p-8", ["0x1.e7fc000000000p+16", "0x1.ccbd000000000p+16",
          "0x1.3c00000000000p+17", "0x1.d0d2800000000p+17"],
         1802),
    ("gnmt-2", "random, priorities"):
        ("0x1.136277ff48ca0p-8", ["0x1.5c2e000000000p+17", "0x1.7232800000000p+17",
          "0x1.bf89000000000p+16", "0x1.2b3e000000000p+17"],
         1810),
    ("transformer-xl-2", "one device"):
        ("0x1.0e173c0574169p-11", ["0x1.3750000000000p+15", "0x0.0p+0",
          "0x0.0p+0", "0x0.0p+0"],
         191),
    ("transformer-xl-2", "contiguous"):
        ("0x1.10c61558bf68fp-11", ["0x1.5da0000000000p+14", "0x1.a400000000000p+13",
          "0x1.6160000000000p+14", "0x1.a620000000000p+14"],
         208),
    ("transformer-xl-2", "random"):
        ("0x1.855c08e60fe5cp-10", ["0x1.03a0000000000p+15", "0x1.da80000000000p+14",
          "0x1.b180000000000p+14", "0x1.c420000000000p+14"],
         485),
    ("transformer-xl-2", "random, priorities"):
        ("0x1.950d06fbd55a1p-10", ["0x1.efa0000000000p+14", "0x1.c010000000000p+14",
          "0x1.cf60000000000p+14", "0x1.9ef0000000000p+14"],
         473),
    ("inception-v3-b32", "one device"):
        ("0x1.54a7f485997d5p-8", ["0x1.c7df4a0000000p+26", "0x0.0p+0",
          "0x0.0p+0", "0x0.0p+0"],
         1621),
    ("inception-v3-b32", "contiguous"):
        ("0x1.b56c04e9c15b3p-8", ["0x1.705df80000000p+24", "0x1.255f3c0000000p+26",
          "0x1.4d2dce0000000p+26", "0x1.f5ded80000000p+24"],
         1910),
    ("inception-v3-b32", "random"):
        ("0x1.f95e9d141b472p-8", ["0x1.1592360000000p+26", "0x1.03de140000000p+26",
          "0x1.c233fc0000000p+25", "0x1.2c954a0000000p+26"],
         2386),
    ("inception-v3-b32", "random, priorities"):
        ("0x1.03238b46dcd4bp-7", ["0x1.4f43b80000000p+26", "0x1.1ec6ac0000000p+26",
          "0x1.00813e0000000p+26", "0x1.f1a64c0000000p+25"],
         2406),
    ("bert-base", "one device"):
        ("0x1.28742975530d7p-11", ["0x1.94e4000000000p+16", "0x0.0p+0",
          "0x0.0p+0", "0x0.0p+0"],
         213),
    ("bert-base", "contiguous"):
        ("0x1.2b32e89f61829p-11", ["0x1.d408000000000p+15", "0x1.3650000000000p+14",
          "0x1.02b0000000000p+15", "0x1.4b40000000000p+16"],
         234),
    ("bert-base", "random"):
        ("0x1.664cb5eab8f21p-10", ["0x1.2ae0000000000p+16", "0x1.1b58000000000p+16",
          "0x1.2960000000000p+15", "0x1.17c4000000000p+16"],
         437),
    ("bert-base", "random, priorities"):
        ("0x1.6990e603ee764p-10", ["0x1.0fd0000000000p+15", "0x1.4d00000000000p+15",
          "0x1.6a90000000000p+15", "0x1.c5a0000000000p+15"],
         442),
    ("layered", "one device"):
        ("0x1.c92a681c3537fp-9", ["0x1.17a9000000000p+29", "0x0.0p+0",
          "0x0.0p+0", "0x0.0p+0"],
         496),
    ("layered", "contiguous"):
        ("0x1.b86332d8f8c23p-9", ["0x1.ef48000000000p+26", "0x1.f868000000000p+26",
          "0x1.83d4000000000p+27", "0x1.03bc000000000p+27"],
         502),
    ("layered", "random"):
        ("0x1.9cc38f17c5d62p-10", ["0x1.fb50000000000p+26", "0x1.1d38000000000p+27",
          "0x1.5ba4000000000p+27", "0x1.e3a0000000000p+26"],
         795),
    ("layered", "random, priorities"):
        ("0x1.c764605e408aap-10", ["0x1.1b88000000000p+27", "0x1.00b8000000000p+27",
          "0x1.3f10000000000p+27", "0x1.0d10000000000p+27"],
         767),
}


def _pinned_plans(n: int, d: int):
    rng = np.random.default_rng(1)
    yield "one device", Plan()
    yield "contiguous", Plan(placement=np.arange(n) * d // n)
    yield "random", Plan(placement=rng.integers(0, d, n))
    yield "random, priorities", Plan(placement=rng.integers(0, d, n), priority=rng.random(n))


@pytest.mark.parametrize("name", ["gnmt-2", "transformer-xl-2", "inception-v3-b32", "bert-base",
                                  "layered"])
def test_default_fusion_gives_the_pinned_figures_bit_for_bit(name):
    if name == "layered":
        g = layered_graph(50, 20, seed=0)
    else:
        from tests.zoo.test_models import tiny_entry

        from graphopt.zoo import build

        g = build(tiny_entry(name))
    prob = Problem(g, load_cluster("dgx1-v100:4"))
    for plan_name, plan in _pinned_plans(g.num_nodes, 4):
        r = simulate(prob, plan)
        got = (r.step_time.hex(), [float(x).hex() for x in r.peak_memory], r.num_kernels)
        assert got == PINNED[name, plan_name], (name, plan_name)
        b = simulate_batch(prob, plan.placement[None] if plan.placement is not None
                           else np.zeros((1, g.num_nodes), np.int64),
                           None if plan.priority is None else plan.priority[None])
        assert b.step_time[0].hex() == got[0] and [float(x).hex() for x in b.peak_memory[0]] == got[1]


def test_with_op_times_is_what_the_engine_reads_by_op_and_by_device():
    # the engine reads op costs from copies kept per problem, by device (D x N) for a plan
    # with runs of ops on one device and by op otherwise: both see the new times
    prob = Problem(layered_graph(30, 8, seed=1), load_cluster("dgx1-v100:4"))
    n = prob.num_nodes
    off = np.zeros(n)
    alone = Plan(fusion=off)
    twice = prob.with_op_times(2 * prob.costs.time)
    assert simulate(twice, alone).step_time == 2 * simulate(prob, alone).step_time
    rng = np.random.default_rng(0)
    for place in (np.arange(n) * 4 // n, rng.integers(0, 4, n)):
        plan = Plan(placement=place, fusion=off)
        assert simulate(twice, plan).step_time > simulate(prob, plan).step_time
    assert twice.lower_bound > prob.lower_bound
    with pytest.raises(PlanError, match="op times"):
        prob.with_op_times(np.zeros(3))
