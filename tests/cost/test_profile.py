"""Measured profiles: profiling a graph, the JSON file, and their use by op_costs."""

import dataclasses
import json
import re

import numpy as np
import pytest

from graphopt.cost import Profile, op_costs, profile_graph
from graphopt.errors import ProfileError
from graphopt.hardware import load_cluster
from graphopt.ir import GraphBuilder
from graphopt.ir.generate import mlp_training_graph
from graphopt.ir.ops import op_class


@pytest.fixture(scope="module")
def graph():
    return mlp_training_graph(layers=2, hidden=64, batch=8)


@pytest.fixture(scope="module")
def profile(graph):
    return profile_graph(graph, repeats=2, progress=False)


def _kernels(graph):
    return np.array([op_class(str(o)) not in ("view", "input") for o in graph.op])


def test_every_kernel_gets_a_positive_finite_time(graph, profile):
    secs = profile.lookup(graph)
    kern = _kernels(graph)
    assert secs.dtype == np.float64 and secs.shape == (graph.num_nodes,)
    assert np.isfinite(secs[kern]).all() and (secs[kern] > 0).all()
    assert np.isnan(secs[~kern]).all()
    assert profile.meta["measured"] == profile.meta["signatures"] == len(profile.entries)
    assert profile.device_kind.startswith("cpu:")


def test_save_load_round_trips_exactly(tmp_path, profile, graph):
    path = profile.save(tmp_path / "p.json")
    back = Profile.load(path)
    assert back == profile
    np.testing.assert_array_equal(back.lookup(graph), profile.lookup(graph))


def test_op_costs_uses_the_profile_for_covered_nodes(graph, profile):
    cluster = load_cluster("cpu")
    p = profile.for_kind(cluster.devices[0].kind)
    assert p.entries == profile.entries and p.meta["measured_on"] == profile.device_kind
    base = op_costs(graph, cluster)
    costs = op_costs(graph, cluster, profile=p)
    secs = p.lookup(graph)
    hit = ~np.isnan(secs)
    assert costs.measured[hit].all() and not costs.measured[~hit].any()
    for j in range(cluster.num_devices):
        np.testing.assert_allclose(costs.time[hit, j], np.maximum(secs[hit], costs.launch[hit, j]),
                                   rtol=1e-12)
    np.testing.assert_array_equal(costs.time[~hit], base.time[~hit])


def test_profile_of_another_kind_changes_nothing(graph, profile):
    cluster = load_cluster("cpu")
    assert profile.device_kind != cluster.devices[0].kind
    with pytest.warns(UserWarning, match="matches no device of 'cpu'.*@KIND"):
        base, costs = op_costs(graph, cluster), op_costs(graph, cluster, profile=[profile])
    assert not costs.measured.any()
    for f in dataclasses.fields(base):
        np.testing.assert_array_equal(getattr(costs, f.name), getattr(base, f.name))


def test_max_ops_and_time_limit_stop_early(graph):
    p = profile_graph(graph, repeats=1, warmup=0, max_ops=3, progress=False)
    assert len(p.entries) == p.meta["measured"] == 3 < p.meta["signatures"]
    p = profile_graph(graph, repeats=1, warmup=0, time_limit=0.0, progress=False)
    assert p.entries == {} and p.meta["measured"] == 0


def test_an_op_larger_than_memory_is_left_to_the_roofline():
    """A graph file says how large its ops are: one of 10^12 floats (4 TB) is counted,
    not allocated (it was a RuntimeError traceback, or the OOM killer)."""
    b = GraphBuilder("huge")
    x = b.add_node("x", "input", shape=(4, 16))
    b.add_node("small", "relu", shape=(4, 16), inputs=[x])
    b.add_node("huge", "gelu", shape=(10**12,), inputs=[x])
    p = profile_graph(b.build(), repeats=1, warmup=0, progress=False)
    assert p.meta["too_large"] == 1 and p.meta["measured"] == len(p.entries) == 1
    assert next(iter(p.entries))[0] == "relu"


def test_every_op_class_has_a_proxy_kernel():
    b = GraphBuilder("classes")
    img = b.add_node("img", "input", shape=(2, 3, 16, 16))
    w = b.add_node("w", "parameter", shape=(8, 3, 3, 3))
    table = b.add_node("table", "parameter", shape=(50, 16))
    ids = b.add_node("ids", "input", shape=(2, 5), dtype="int64")
    x = b.add_node("x", "input", shape=(4, 16), dtype="bfloat16")
    conv = b.add_node("conv", "conv", shape=(2, 8, 8, 8), flops=2 * 2 * 8 * 8 * 8 * 27,
                      inputs=[img, w])
    b.add_node("pool", "max_pool", shape=(2, 8, 4, 4), inputs=[conv])
    b.add_node("emb", "embedding", shape=(2, 5, 16), inputs=[table, ids])
    for op in ("gelu", "softmax", "layer_norm", "transpose", "sum", "my_custom_op"):
        b.add_node(op, op, shape=(16, 4) if op == "transpose" else (4, 16), dtype="bfloat16",
                   inputs=[x])
    g = b.build()
    secs = profile_graph(g, repeats=1, warmup=0, progress=False).lookup(g)
    kern = _kernels(g)
    assert np.isfinite(secs[kern]).all() and (secs[kern] > 0).all()


@pytest.mark.parametrize("breakage, message", [
    (lambda text, doc: text[: len(text) // 2], "not valid JSON"),
    (lambda text, doc: json.dumps({**doc, "format": "graphopt.plan"}), "format"),
    (lambda text, doc: json.dumps({**doc, "entries": [{**doc["entries"][0], "seconds": -1.0}]}),
     "entry 0: seconds is -1.0"),
    (lambda text, doc: json.dumps({**doc, "entries": [doc["entries"][0], {
        k: v for k, v in doc["entries"][1].items() if k != "seconds"}]}),
     "entry 1: missing key(s) seconds"),
    (lambda text, doc: json.dumps({**doc, "entries": [{**doc["entries"][0],
                                                      "out_shape": [8.5, 64]}]}),
     "entry 0: out_shape"),
    (lambda text, doc: json.dumps({k: v for k, v in doc.items() if k != "device_kind"}),
     "device_kind"),
])
def test_bad_files_raise_profile_error_naming_the_file(tmp_path, profile, breakage, message):
    path = profile.save(tmp_path / "p.json")
    text = path.read_text()
    path.write_text(breakage(text, json.loads(text)))
    with pytest.raises(ProfileError, match=re.escape(message)) as err:
        Profile.load(path)
    assert str(path) in str(err.value)
