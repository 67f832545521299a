"""The training-pipeline model: schedules' memory, the bubble, and a split's stage times
held against the per-input cost of :func:`graphopt.sim.pipeline.pipeline_cost`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from graphopt.errors import PlanError
from graphopt.exec.export import forward_ops
from graphopt.exec.pipeline import trace_microbatch
from graphopt.hardware import load_cluster
from graphopt.sim import Problem
from graphopt.sim.pipeline import (PipelinePlan, in_flight, layer_costs, op_layers, pipeline_cost,
                                   split_cost, training_stage_time, training_step_time)
from graphopt.zoo.pipeline import build_pipeline_model


def test_in_flight_gpipe_keeps_all_1f1b_keeps_stages_left():
    assert in_flight("gpipe", 3, 5).tolist() == [5, 5, 5]
    assert in_flight("1f1b", 3, 5).tolist() == [3, 2, 1]
    assert in_flight("1f1b", 4, 2).tolist() == [2, 2, 2, 1]
    with pytest.raises(ValueError, match="schedule"):
        in_flight("zb", 2, 2)
    with pytest.raises(ValueError, match=">= 1"):
        in_flight("gpipe", 2, 0)


def _flow_shop(t, m: int) -> float:
    """Makespan of ``m`` identical microbatches passing stages of times ``t`` in order,
    each stage taking them one at a time, event by event."""
    done = np.zeros(len(t))  # when each stage finished its previous microbatch
    for _ in range(m):
        ready = 0.0
        for s, ts in enumerate(t):
            done[s] = max(done[s], ready) + ts
            ready = done[s]
    return float(done[-1])


@pytest.mark.parametrize("seed", range(6))
def test_step_is_the_fill_and_drain_plus_the_slowest_stage(seed):
    rng = np.random.default_rng(seed)
    k, m = int(rng.integers(1, 6)), int(rng.integers(1, 9))
    t = rng.uniform(0.1, 3.0, k)
    assert training_step_time(t, np.zeros(k), m) == pytest.approx(_flow_shop(t, m))
    # equal stages: the bubble formula
    assert training_step_time(np.full(k, 2.0), np.zeros(k), m) == pytest.approx((m + k - 1) * 2.0)
    u = rng.uniform(0, 1, k)
    assert training_step_time(t, u, m) == pytest.approx(t.sum() + max((m - 1) * t + u))
    # processes sharing one core take their whole work at least
    assert training_step_time(t, u, m, cores=1) == pytest.approx(
        max(t.sum() + max((m - 1) * t + u), (m * t + u).sum()))


def _torch_order(k: int, v: int, m: int) -> list[list[tuple[int, bool, int]]]:
    """Each rank's (chunk, forward?, microbatch) in the order torch's
    ScheduleInterleaved1F1B runs them, from its own planner."""
    sched = pytest.importorskip("torch.distributed.pipelining.schedules")
    rounds = max(1, m // k)
    me = SimpleNamespace(n_local_stages=v, pp_group_size=k, _n_microbatches=m,
                         microbatches_per_round=m // rounds)
    fwd = sched._ComputationType.FORWARD
    return [[(a.stage_index, a.computation_type == fwd, a.microbatch_index)
             for a in sched.ScheduleInterleaved1F1B._calculate_single_rank_operations(me, r)
             if a is not None] for r in range(k)]


def _run_order(order, f, b) -> float:
    """Makespan of every rank running its ops in ``order``, each when its inputs are
    done (a chunk's forward after the previous chunk's, its backward after its own
    forward and the next chunk's backward), event by event."""
    last = len(f) - 1
    done: dict = {}
    free = np.zeros(len(order))
    pos = [0] * len(order)
    while any(p < len(o) for p, o in zip(pos, order)):
        moved = False
        for r, ops in enumerate(order):
            while pos[r] < len(ops):
                c, fwd, i = ops[pos[r]]
                need = [(c - 1, True, i)] if fwd and c > 0 else []
                if not fwd:
                    need = [(c, True, i)] + ([(c + 1, False, i)] if c < last else [])
                if any(n not in done for n in need):
                    break
                start = max([free[r], *(done[n] for n in need)])
                free[r] = done[(c, fwd, i)] = start + (f[c] if fwd else b[c])
                pos[r] += 1
                moved = True
        assert moved, "the order deadlocks"
    return float(free.max())


@pytest.mark.parametrize("k, v, m", [(2, 2, 2), (2, 2, 3), (2, 3, 6), (3, 2, 6), (4, 2, 4),
                                     (4, 2, 5), (4, 3, 8)])
def test_interleaved_step_and_memory_against_torchs_order(k, v, m):
    order = _torch_order(k, v, m)
    # memory: the most chunk activations a rank holds, forwards not yet undone by backwards
    held = [max(np.cumsum([1 if fwd else -1 for _, fwd, _ in ops])) for ops in order]
    assert in_flight("interleaved", k, m, v).tolist() == held
    # equal chunks, backward twice the forward: the model's step is exact
    f = np.ones(k * v)
    for back in (1.0, 2.0):
        t = (f + back * f).reshape(v, k).sum(axis=0)
        want = _run_order(order, f, back * f)
        assert training_step_time(t, np.zeros(k), m, virtual=v) == pytest.approx(want)
        assert want == pytest.approx((m * v + k - 1) * (1 + back))  # bubble (K-1)/V stages


def test_interleaved_step_is_approximate_for_unequal_chunks():
    """The documented band: within 5% on average, and under by at most ~25%."""
    rng = np.random.default_rng(0)
    err = []
    for _ in range(60):
        k, v = int(rng.integers(2, 5)), int(rng.integers(2, 4))
        m = k * int(rng.integers(1, 4))
        f = rng.uniform(0.2, 2.0, k * v)
        t = (3 * f).reshape(v, k).sum(axis=0)
        want = _run_order(_torch_order(k, v, m), f, 2 * f)
        err.append(training_step_time(t, np.zeros(k), m, virtual=v) / want - 1)
    err = np.array(err)
    assert np.abs(err).mean() < 0.07 and err.min() > -0.25 and err.max() < 0.2


@pytest.fixture(scope="module")
def mlp():
    model = build_pipeline_model("mlp-uneven:layers=5,hidden=32,batch=8")
    traced = trace_microbatch(model, 2)
    prob = Problem(traced.graph, load_cluster("cpu:2"))
    return model, prob, layer_costs(prob, forward_ops(traced))


def test_layers_and_memory_accounting(mlp):
    model, prob, costs = mlp
    assert costs.num_layers == len(model.layers) == 6
    params = [sum(p.numel() * 4 for p in layer.parameters()) for layer in model.layers]
    assert costs.weights.tolist() == params and costs.grads.tolist() == params
    assert not costs.state.any()  # SGD keeps no state
    assert (costs.activations > 0).all() and (costs.boundary > 0).all()
    # the largest backward buffer: here a weight's gradient, made before it is accumulated
    assert costs.workspace.tolist() == [max(p.numel() * 4 for p in layer.parameters())
                                        for layer in model.layers]
    assert costs.output == 4 * 4 * 10  # a microbatch of 4, 10 classes, float32
    for sched in ("gpipe", "1f1b"):
        c = split_cost(prob, costs, (0, 2, 6), 2, sched)
        keep = in_flight(sched, 2, 2)
        # in a backward: the other microbatches' activations, this one's up to the layer
        # whose workspace is live
        want = [2 * costs.weights[a:b].sum() + (keep[s] - 1) * costs.activations[a:b].sum()
                + max(costs.activations[a:j + 1].sum() + costs.workspace[j] for j in range(a, b))
                + (2 * costs.output if s == 1 else 0)
                for s, (a, b) in enumerate([(0, 2), (2, 6)])]
        assert c.memory == pytest.approx(want)
    assert (split_cost(prob, costs, (0, 2, 6), 2, "gpipe").memory
            >= split_cost(prob, costs, (0, 2, 6), 2, "1f1b").memory).all()


def test_stage_times_are_the_per_input_pipeline_cost(mlp):
    """One model of a pipeline: a split's stage time per microbatch is what
    pipeline_cost gives the placement of every op on its layer's stage, without overlap."""
    _, prob, costs = mlp
    layer = op_layers(prob.graph)
    update = np.isin(prob.graph.op, ("sgd_update", "adam_update"))
    for bounds in [(0, 1, 6), (0, 3, 6), (0, 5, 6), (0, 1, 3, 4, 6), (0, 2, 3, 5, 6)]:
        virtual = (len(bounds) - 1) // 2
        sched = "interleaved" if virtual > 1 else "1f1b"
        # chunk c on rank c mod 2: interleaved chunks send to and fro across the cuts
        place = np.searchsorted(np.array(bounds[1:-1]), layer, side="right") % 2
        per_input = training_stage_time(pipeline_cost(prob, place))[0]
        upd = np.bincount(place, np.where(update, prob.costs.time[np.arange(len(place)), place], 0), 2)
        c = split_cost(prob, costs, bounds, 2, sched, virtual=virtual)
        assert c.stage_time == pytest.approx(per_input - upd, rel=1e-9)
        # the runtime's overhead is paid once per chunk
        slow = split_cost(prob, costs, bounds, 2, sched, overhead=1e-3, virtual=virtual)
        assert slow.stage_time - c.stage_time == pytest.approx(np.full(2, virtual * 1e-3))


def test_interleaved_memory_counts_chunks_as_torch_holds_them(mlp):
    _, prob, costs = mlp
    bounds = (0, 1, 3, 4, 6)
    c = split_cost(prob, costs, bounds, 4, "interleaved", virtual=2)
    keep = in_flight("interleaved", 2, 4, 2)
    chunks = [(0, 1), (1, 3), (3, 4), (4, 6)]
    a = costs.activations
    for r in range(2):
        mine = chunks[r::2]
        fixed = sum(costs.weights[lo:hi].sum() * 2 for lo, hi in mine)  # weights and grads
        act = sum(a[lo:hi].sum() for lo, hi in mine)
        back = max(a[lo:j + 1].sum() + costs.workspace[j] for lo, hi in mine for j in range(lo, hi))
        want = fixed + (keep[r] - 1) * act / 2 + back + (4 * costs.output if r == 1 else 0)
        assert c.memory[r] == pytest.approx(want)
    assert c.virtual == 2 and c.stage_time.shape == (2,)
    with pytest.raises(ValueError, match="chunks"):
        split_cost(prob, costs, (0, 1, 3, 6), 4, "interleaved", virtual=2)
    with pytest.raises(ValueError, match="--virtual-stages"):
        split_cost(prob, costs, bounds, 4, "1f1b", virtual=2)


def test_split_cost_refuses_bad_bounds(mlp):
    _, prob, costs = mlp
    for bounds in [(0, 6), (0, 3, 3, 6)]:
        if len(bounds) == 2:
            assert split_cost(prob, costs, bounds, 2, "gpipe").stage_time.shape == (1,)
        else:
            with pytest.raises(ValueError, match="rise strictly"):
                split_cost(prob, costs, bounds, 2, "gpipe")
    with pytest.raises(ValueError, match="devices"):
        split_cost(prob, costs, (0, 1, 2, 6), 3, "gpipe")


def test_plan_file_round_trip_and_refusals(tmp_path):
    p = PipelinePlan("pipe:mlp", (0, 3, 9), "1f1b", 4, "exact", {"step_time": 0.1})
    path = p.save(tmp_path / "p.json")
    assert PipelinePlan.load(path) == p
    assert p.split_spec() == {"3": "beginning"}
    inter = PipelinePlan("pipe:mlp", (0, 2, 4, 6, 9), "interleaved", 4, "even", {}, 2)
    assert PipelinePlan.load(inter.save(tmp_path / "i.json")) == inter and inter.stages == 2
    # a version 1 file, before chunks: one a rank
    (tmp_path / "v1.json").write_text('{"format": "graphopt-pipeline", "version": 1, "model": '
                                      '"pipe:mlp", "bounds": [0, 3, 9], "schedule": "1f1b", '
                                      '"microbatches": 4, "method": "exact"}')
    assert PipelinePlan.load(tmp_path / "v1.json").virtual == 1
    for text, msg in [('{"format": "x"}', "not a pipeline plan"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "bounds": [1, 2], '
                       '"schedule": "gpipe", "microbatches": 1}', "bounds"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "bounds": [0, 2], '
                       '"schedule": "zb", "microbatches": 1}', "schedule"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "bounds": [0, 1, 2], '
                       '"schedule": "1f1b", "microbatches": 1}', "at least as many"),
                      ('{"format": "graphopt-pipeline", "version": 4, "model": "pipe:mlp", '
                       '"bounds": [0, 1, 2], "schedule": "1f1b", "microbatches": 2}', "version 4"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "virtual": 2, '
                       '"bounds": [0, 1, 2, 3], "schedule": "interleaved", "microbatches": 2}',
                       "divides the 3 chunks"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "virtual": 2, '
                       '"bounds": [0, 1, 2, 3, 4], "schedule": "1f1b", "microbatches": 2}',
                       "--virtual-stages 2"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "virtual": 2, '
                       '"bounds": [0, 1, 2, 3, 4], "schedule": "interleaved", "microbatches": 5}',
                       "multiple of microbatches // stages")]:
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(PlanError, match=msg):
            PipelinePlan.load(bad)
