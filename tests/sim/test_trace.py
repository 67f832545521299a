"""Chrome trace export: one event per kernel and transfer, on the right tracks, in time."""

import json
from collections import Counter
from itertools import pairwise

import numpy as np
import pytest

from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.sim import Plan, Problem, simulate
from graphopt.sim.trace import chrome_trace, save_chrome_trace

EPS_US = 1e-6


def _layer_placement(graph):
    """``layers.N`` -> device N % 2, everything else on device 0: colocation groups stay whole."""
    return np.array([int(m.split(".")[1]) % 2 if m.startswith("layers.") else 0
                     for m in graph.module])


def _mlp():
    g = mlp_training_graph()
    prob = Problem(g, load_cluster("dgx1-v100:2"))
    return prob, simulate(prob, Plan(placement=_layer_placement(g)), timeline=True)


def _layered():
    g = layered_graph(30, 6, seed=3)
    prob = Problem(g, load_cluster("dgx1-v100:4"))
    place = np.random.default_rng(0).integers(0, 4, g.num_nodes)
    return prob, simulate(prob, Plan(placement=place), timeline=True)


@pytest.fixture(params=[_mlp, _layered], ids=["mlp", "layered"])
def case(request):
    return request.param()


def _x(trace, transfer):
    return [e for e in trace["traceEvents"]
            if e["ph"] == "X" and (e["cat"] == "transfer") == transfer]


def test_saved_trace_is_json_with_one_event_per_kernel_and_transfer(case, tmp_path):
    prob, r = case
    tl, names, devs = r.timeline, prob.graph.names, prob.cluster.devices
    assert len(tl.transfer_kernel) > 0  # the plans split the graph
    path = save_chrome_trace(prob, r, tmp_path / "out" / "step.json")
    trace = json.loads(path.read_text())
    assert trace["displayTimeUnit"] == "ms"
    kernels, transfers = _x(trace, False), _x(trace, True)
    assert Counter(e["args"]["root"] for e in kernels) == Counter(str(names[k]) for k in tl.kernel)
    assert Counter(e["name"] for e in transfers) == Counter(
        f"{names[k]} -> {devs[d].name}" for k, d in zip(tl.transfer_kernel, tl.transfer_dst))
    assert sorted(e["args"]["bytes"] for e in transfers) == sorted(tl.transfer_bytes.tolist())
    assert trace["metadata"] == {"graph": prob.graph.name, "cluster": prob.cluster.name,
                                 "step_time": r.step_time, "lower_bound": r.lower_bound,
                                 "valid": True, "reason": ""}


def test_events_lie_in_the_step_and_never_overlap_on_a_track(case):
    prob, r = case
    trace = chrome_trace(prob, r)
    step_us = r.step_time * 1e6
    tracks = {}
    for e in _x(trace, False) + _x(trace, True):
        assert 0 <= e["ts"] and e["dur"] >= 0 and e["ts"] + e["dur"] <= step_us + EPS_US
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    assert max(e["ts"] + e["dur"] for e in _x(trace, False) + _x(trace, True)) == pytest.approx(
        step_us)
    for spans in tracks.values():  # one kernel per device, one transfer per link at a time
        spans.sort()
        assert all(b0 >= a1 - EPS_US for (_, a1), (b0, _) in pairwise(spans))


def test_tracks_are_named_devices_and_used_links(case):
    prob, r = case
    trace = chrome_trace(prob, r)
    tl, devs = r.timeline, prob.cluster.devices
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert [procs[d] for d in range(len(devs))] == [d.name for d in devs]
    assert procs[len(devs)] == "links"
    used = {f"{devs[s].name} -> {devs[d].name}" for s, d in zip(tl.transfer_src, tl.transfer_dst)}
    assert {n for (p, _), n in threads.items() if p == len(devs)} == used
    for e in _x(trace, False):  # kernels sit on their device's compute thread
        assert threads[e["pid"], e["tid"]] == f"{e['args']['device']} compute"
    for e in _x(trace, True):  # transfers on the link to their destination
        assert threads[e["pid"], e["tid"]].endswith(e["name"].rsplit(" -> ", 1)[1])


def test_kernel_args_account_for_every_node_once(case):
    prob, r = case
    g = prob.graph
    kernels = _x(chrome_trace(prob, r), False)
    assert sum(e["args"]["fused_ops"] for e in kernels) == g.num_nodes
    assert sum(e["args"]["flops"] for e in kernels) == pytest.approx(g.flops.sum())
    for e in kernels:
        assert e["args"]["op"] == str(g.op[g.index[e["name"]]])
    assert any(e["args"]["fused_ops"] > 1 for e in kernels)  # default fusion fused something


def test_trace_of_an_invalid_plan_says_why():
    g = mlp_training_graph()
    prob = Problem(g, load_cluster("dgx1-v100:2").with_memory(2**20))
    r = simulate(prob, Plan(placement=_layer_placement(g)), timeline=True)
    meta = chrome_trace(prob, r)["metadata"]
    assert meta["valid"] is False and meta["reason"].startswith("OOM on gpu:")


def test_missing_timeline_is_an_error(tmp_path):
    prob, _ = _mlp()
    r = simulate(prob, Plan())
    with pytest.raises(GraphoptError, match=r"timeline=True"):
        chrome_trace(prob, r)
    with pytest.raises(GraphoptError, match=r"timeline=True"):
        save_chrome_trace(prob, r, tmp_path / "t.json")
    assert not list(tmp_path.iterdir())


def test_fused_kernel_named_by_its_dominant_op_and_lists_its_ops():
    """A fused kernel takes the name of its most expensive op alone on its device (e.g. a
    matmul, not the relu_backward that roots it); its args name the root and every op."""
    prob, r = _mlp()
    tl = r.timeline
    g, time = prob.graph, prob.costs.time
    index = {name: i for i, name in enumerate(g.names.tolist())}
    kernels = [e for e in chrome_trace(prob, r)["traceEvents"]
               if e["ph"] == "X" and e["cat"] != "transfer"]
    assert len(kernels) == len(tl.kernel)
    renamed = 0
    for e, root, dev in zip(kernels, tl.kernel.tolist(), tl.device.tolist()):
        ops = [index[o] for o in e["args"]["ops"]]
        assert e["args"]["root"] == g.names[root] and root in ops
        assert len(ops) == e["args"]["fused_ops"] and ops == sorted(ops)
        assert index[e["name"]] == max(ops, key=lambda i: (time[i, dev], -i))
        assert e["args"]["op"] == g.op[index[e["name"]]]
        renamed += e["name"] != e["args"]["root"]
    assert renamed  # some fused kernel's root is not its most expensive op
