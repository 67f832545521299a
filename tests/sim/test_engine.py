"""The engine's machinery around the semantics: compiling once, numba's cache, and
simulate sharing nothing between calls (the semantics themselves: test_simulate.py)."""

from __future__ import annotations

import importlib.util
import sys
import threading

import numba
import numpy as np
import pytest

from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.sim import Plan, Problem, ensure_compiled, simulate
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
