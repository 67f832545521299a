"""The training-pipeline model: schedules' memory, the bubble, and a split's stage times
held against the per-input cost of :func:`graphopt.sim.pipeline.pipeline_cost`."""

from __future__ import annotations

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
    for bounds in [(0, 1, 6), (0, 3, 6), (0, 5, 6)]:
        place = np.searchsorted(np.array(bounds[1:-1]), layer, side="right")
        per_input = training_stage_time(pipeline_cost(prob, place))[0]
        upd = np.bincount(place, np.where(update, prob.costs.time[np.arange(len(place)), place], 0), 2)
        c = split_cost(prob, costs, bounds, 2, "1f1b")
        assert c.stage_time == pytest.approx(per_input - upd, rel=1e-9)


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
    for text, msg in [('{"format": "x"}', "not a pipeline plan"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "bounds": [1, 2], '
                       '"schedule": "gpipe", "microbatches": 1}', "bounds"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "bounds": [0, 2], '
                       '"schedule": "zb", "microbatches": 1}', "schedule"),
                      ('{"format": "graphopt-pipeline", "model": "pipe:mlp", "bounds": [0, 1, 2], '
                       '"schedule": "1f1b", "microbatches": 1}', "at least as many")]:
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(PlanError, match=msg):
            PipelinePlan.load(bad)
