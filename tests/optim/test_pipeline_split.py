"""The pipeline task's splits: even and parameter-balanced by rule, exact by dynamic
programming, held against brute force; the chiplet policy's, repaired into contiguous
stages, never below exact."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from graphopt.errors import GraphoptError
from graphopt.optim.partition.pipeline import (contiguous_split, even_split, exact_split,
                                               microbatch_candidates, params_split, plan_pipeline,
                                               plan_pipeline_auto)
from graphopt.sim.pipeline import LayerCosts, split_cost


def _costs(rng, nl: int, d: int) -> LayerCosts:
    return LayerCosts(time=rng.uniform(0.1, 2.0, (nl, d)), update=rng.uniform(0, 0.3, (nl, d)),
                      weights=rng.uniform(1, 10, nl), grads=rng.uniform(1, 10, nl),
                      state=rng.uniform(0, 5, nl), activations=rng.uniform(1, 8, nl),
                      boundary=rng.uniform(0, 5, nl - 1), layer=np.zeros(0, dtype=np.int64),
                      workspace=rng.uniform(0, 6, nl), output=float(rng.uniform(0, 2)))


def _problem(rng, d: int, capacity: float) -> SimpleNamespace:
    lat = rng.uniform(0, 0.1, (d, d))
    spb = rng.uniform(0, 0.05, (d, d))
    np.fill_diagonal(lat, 0)
    np.fill_diagonal(spb, 0)
    return SimpleNamespace(num_devices=d, capacity=np.full(d, capacity), latency=lat,
                           sec_per_byte=spb, cluster=SimpleNamespace(name="fake"))


def _brute(prob, costs, k, m, sched, overhead=0.0, cores=None, virtual=1):
    nl = costs.num_layers
    best = None
    for cuts in itertools.combinations(range(1, nl), k * virtual - 1):
        c = split_cost(prob, costs, (0, *cuts, nl), m, sched, overhead, cores, virtual)
        if c.fits and (best is None or c.step_time < best.step_time - 1e-12):
            best = c
    return best


@pytest.mark.parametrize("seed", range(24))
def test_exact_is_optimal_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    nl, k = int(rng.integers(3, 10)), int(rng.integers(1, 5))
    k = min(k, nl)
    m, sched = int(rng.integers(k, 9)), ["gpipe", "1f1b"][seed % 2]
    costs = _costs(rng, nl, k)
    # a capacity that often rules some splits out, sometimes all
    prob = _problem(rng, k, float(rng.uniform(10, 80)))
    overhead = float(rng.uniform(0, 0.5)) if seed % 3 else 0.0
    cores = [None, 1, 2][seed % 3]
    got = exact_split(prob, costs, k, m, sched, overhead=overhead, cores=cores)
    want = _brute(prob, costs, k, m, sched, overhead, cores)
    if want is None:
        assert got is None
    else:
        assert got is not None
        assert split_cost(prob, costs, got, m, sched, overhead, cores).step_time == \
            pytest.approx(want.step_time)


@pytest.mark.parametrize("seed", range(8))
def test_exact_interleaved_is_optimal_against_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    k, v = int(rng.integers(2, 4)), 2
    nl = int(rng.integers(k * v, 10))
    m = k * int(rng.integers(1, 3))
    costs = _costs(rng, nl, k)
    prob = _problem(rng, k, float(rng.uniform(20, 120)))
    overhead, cores = float(rng.uniform(0, 0.5)), [None, 1][seed % 2]
    got = exact_split(prob, costs, k, m, "interleaved", overhead=overhead, cores=cores, virtual=v)
    want = _brute(prob, costs, k, m, "interleaved", overhead, cores, v)
    if want is None:
        assert got is None
    else:
        assert len(got) == k * v + 1
        assert split_cost(prob, costs, got, m, "interleaved", overhead, cores, v).step_time == \
            pytest.approx(want.step_time)


def test_interleaved_shrinks_the_bubble_and_auto_leaves_it_out():
    # eight equal layers, no transfers: 2 ranks of 2 chunks fill and drain in half-stages
    nl, k, m = 8, 2, 2
    costs = LayerCosts(time=np.ones((nl, k)), update=np.zeros((nl, k)), weights=np.ones(nl),
                       grads=np.ones(nl), state=np.zeros(nl), activations=np.ones(nl),
                       boundary=np.zeros(nl - 1), layer=np.zeros(0, dtype=np.int64))
    prob = _problem(np.random.default_rng(0), k, 1e9)
    prob.latency, prob.sec_per_byte = np.zeros((k, k)), np.zeros((k, k))
    res = {r.method: r.cost for r in plan_pipeline(prob, costs, k, m, "interleaved")}
    assert all(c.schedule == "interleaved" and c.virtual == 2 for c in res.values())
    # measured no faster (docs/execution.md), so auto keeps to 1F1B and GPipe
    assert all(r.cost.virtual == 1 for r in plan_pipeline(prob, costs, k, m, "auto"))
    assert res["even"].bounds == (0, 2, 4, 6, 8)
    one = split_cost(prob, costs, (0, 4, 8), m, "1f1b").step_time
    assert one == (m + k - 1) * 4 and res["even"].step_time == (m + (k - 1) / 2) * 4
    # a cut's transfer, now paid at three cuts instead of one, makes it slower than 1F1B
    prob.latency = np.full((k, k), 0.5)
    np.fill_diagonal(prob.latency, 0)
    inter = plan_pipeline(prob, costs, k, m, "interleaved", ("exact",))[0].cost.step_time
    assert inter > plan_pipeline(prob, costs, k, m, "1f1b", ("exact",))[0].cost.step_time
    res = plan_pipeline(prob, costs, k, m, "interleaved", virtual=4)
    assert all(r.cost.virtual == 4 and len(r.cost.bounds) == 9 for r in res)
    for kwargs, msg in [({"microbatches": 1}, "at least as many"),
                        ({"virtual": 1}, "--virtual-stages 1"),
                        ({"virtual": 5}, "need 10 blocks")]:
        with pytest.raises(GraphoptError, match=msg):
            plan_pipeline(prob, costs, k, **{"microbatches": m, "schedule": "interleaved",
                                              **kwargs})
    with pytest.raises(GraphoptError, match="more than"):
        # C(39, 7) splits of 40 layers into 8 chunks: too many to price one by one
        exact_split(prob, _costs(np.random.default_rng(1), 40, k), k, m, "interleaved", virtual=4)


def test_even_and_params_splits():
    assert even_split(8, 2) == (0, 4, 8)
    assert even_split(7, 3) == (0, 3, 5, 7)
    assert even_split(3, 3) == (0, 1, 2, 3)
    assert params_split(np.array([1.0, 1, 1, 1]), 2) == (0, 2, 4)
    assert params_split(np.array([10.0, 1, 1, 1, 1, 1]), 2) == (0, 1, 6)
    assert params_split(np.array([0.0, 0, 0, 9]), 3) == (0, 1, 2, 4)  # a stage keeps a layer
    with pytest.raises(GraphoptError, match="only 2 blocks"):
        even_split(2, 3)


def test_plan_pipeline_methods_and_auto_schedule():
    rng = np.random.default_rng(3)
    costs = _costs(rng, 6, 2)
    prob = _problem(rng, 2, 1e9)
    res = {r.method: r.cost for r in plan_pipeline(prob, costs, 2, 4, "auto")}
    assert set(res) == {"even", "params", "exact"}
    assert res["exact"].step_time <= min(res["even"].step_time, res["params"].step_time) + 1e-12
    assert all(c.schedule == "1f1b" for c in res.values())  # same time, less memory
    assert plan_pipeline(prob, costs, 2, 1, "auto")[0].cost.schedule == "gpipe"
    for kwargs, msg in [({"stages": 7, "microbatches": 4}, "only 6 blocks"),
                        ({"stages": 2, "microbatches": 0}, "--microbatches 0"),
                        ({"stages": 3, "microbatches": 4}, "devices"),
                        ({"stages": 2, "microbatches": 4, "schedule": "zb"}, "--schedule"),
                        ({"stages": 2, "microbatches": 1, "schedule": "1f1b"}, "at least as many")]:
        with pytest.raises(GraphoptError, match=msg):
            plan_pipeline(prob, costs, **kwargs)


def test_microbatches_auto_keeps_the_count_whose_exact_split_is_fastest():
    rng = np.random.default_rng(5)
    base = _costs(rng, 5, 2)
    prob = _problem(rng, 2, 1e9)
    prob.latency, prob.sec_per_byte = np.zeros((2, 2)), np.zeros((2, 2))  # compute alone
    seen = []

    def problem_for(m):
        seen.append(m)
        # a fixed cost per microbatch beside compute that shrinks with it: 4 is best
        scale = {2: 0.5, 4: 0.25, 8: 0.25}[m]
        extra = {2: 0.0, 4: 0.0, 8: 0.3}[m]
        return prob, LayerCosts(base.time * scale + extra, base.update, base.weights, base.grads,
                                base.state, base.activations, base.boundary, base.layer,
                                base.workspace, base.output)

    assert microbatch_candidates(8, 2) == [2, 4, 8]
    res = plan_pipeline_auto(problem_for, [2, 4, 8], 2)
    assert seen == [2, 4, 8] and {r.cost.microbatches for r in res} == {4}
    assert [r.method for r in res] == ["even", "params", "exact"]
    with pytest.raises(GraphoptError, match="no count"):
        plan_pipeline_auto(problem_for, [1], 2, "1f1b")


def test_where_the_cores_bound_every_split_the_best_pipeline_is_kept():
    # four equal layers, two stages on one core: every split's step is the whole work,
    # 4 microbatches x 4 layers; the even split is the one that would pipeline best
    nl = 4
    costs = LayerCosts(time=np.ones((nl, 2)), update=np.zeros((nl, 2)), weights=np.ones(nl),
                       grads=np.ones(nl), state=np.zeros(nl), activations=np.ones(nl),
                       boundary=np.zeros(nl - 1), layer=np.zeros(0, dtype=np.int64))
    prob = SimpleNamespace(num_devices=2, capacity=np.full(2, 1e9), latency=np.zeros((2, 2)),
                           sec_per_byte=np.zeros((2, 2)), cluster=SimpleNamespace(name="fake"))
    steps = {b: split_cost(prob, costs, b, 4, "1f1b", cores=1).step_time
             for b in ((0, 1, 4), (0, 2, 4), (0, 3, 4))}
    assert set(steps.values()) == {16.0}
    assert exact_split(prob, costs, 2, 4, "1f1b", cores=1) == (0, 2, 4)


def _changes(chips, bounds) -> int:
    stage = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    return int((stage != np.asarray(chips)).sum())


def test_contiguous_split_keeps_a_contiguous_one_and_changes_fewest_layers():
    assert contiguous_split(np.array([0, 0, 1, 1, 1, 2]), 3) == (0, 2, 5, 6)  # kept as it is
    assert contiguous_split(np.array([0, 1, 2, 3]), 4) == (0, 1, 2, 3, 4)
    # every stage keeps a layer: one chip for all becomes three stages, two layers changed
    assert _changes([0] * 5, contiguous_split(np.array([0] * 5), 3)) == 2
    rng = np.random.default_rng(0)
    for _ in range(40):  # non-monotone proposals: the fewest changes among all splits
        nl = int(rng.integers(2, 9))
        k = int(rng.integers(1, nl + 1))
        chips = rng.integers(0, k + 1, nl)  # chip k matches no stage
        got = contiguous_split(chips, k)
        assert len(got) == k + 1 and got[0] == 0 and got[-1] == nl
        assert all(a < b for a, b in zip(got, got[1:]))
        best = min(_changes(chips, (0, *c, nl))
                   for c in itertools.combinations(range(1, nl), k - 1))
        assert _changes(chips, got) == best


@pytest.mark.parametrize("spec, stages", [("pipe:mlp:layers=4,hidden=16,batch=8", 3),
                                          ("pipe:mlp-uneven:layers=5,hidden=16,batch=8", 2),
                                          ("pipe:transformer-encoder:layers=2,hidden=16,heads=2,"
                                           "seq=8,batch=4,vocab=50", 3)])
def test_mcm_gives_k_contiguous_stages_never_below_exact(spec, stages):
    from graphopt.exec.pipeline import pipeline_problem, stage_cluster
    from graphopt.hardware import load_cluster
    from graphopt.zoo.pipeline import build_pipeline_model

    prob, costs = pipeline_problem(build_pipeline_model(spec), 2,
                                   stage_cluster(load_cluster("cpu"), stages))
    res = {r.method: r.cost for r in plan_pipeline(prob, costs, stages, 2, "auto",
                                                   ("exact", "mcm"))}
    b = res["mcm"].bounds
    assert len(b) == stages + 1 and b[0] == 0 and b[-1] == costs.num_layers
    assert all(x < y for x, y in zip(b, b[1:]))
    assert res["exact"].fits and res["mcm"].step_time >= res["exact"].step_time - 1e-12
    # greedy decoding draws nothing: the same split again
    assert plan_pipeline(prob, costs, stages, 2, "auto", ("mcm",))[0].cost.bounds == b
