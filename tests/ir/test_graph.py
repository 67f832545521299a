"""The graph IR: GraphBuilder, Graph invariants and validation, derived views, features."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given

from graphopt.errors import GraphError, GraphoptError
from graphopt.ir import MAX_RANK, Graph, GraphBuilder, node_features
from graphopt.ir.features import FEATURE_NAMES, layer_of, layer_order
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.ir.graph import pad_shape
from graphopt.ir.ops import OP_VOCAB
from tests.conftest import graphs

_FLOAT_FIELDS = ("flops", "bytes_read", "bytes_written", "out_bytes", "persistent_bytes",
                 "temp_bytes")


def direct_graph(n: int, edges: list[tuple[int, int]], **changes) -> Graph:
    """A Graph built directly from arrays (no builder, no validation)."""
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    fields = {
        "name": "direct", "names": np.array([f"v{i}" for i in range(n)]), "op": np.array(["relu"] * n),
        "dtype": np.array(["float32"] * n), "shape": np.full((n, MAX_RANK), -1, dtype=np.int64),
        "flops": np.ones(n), "bytes_read": np.ones(n), "bytes_written": np.ones(n), "out_bytes": np.ones(n),
        "persistent_bytes": np.zeros(n), "temp_bytes": np.zeros(n), "module": np.array([""] * n),
        "coloc": -np.ones(n, dtype=np.int64), "src": src, "dst": dst, "edge_bytes": np.ones(len(edges)),
    }
    fields.update(changes)
    return Graph(**fields)


def chain(names=("a", "b", "c")) -> Graph:
    b = GraphBuilder("chain")
    prev = None
    for nm in names:
        prev = b.add_node(nm, "relu", flops=1, bytes_written=8, inputs=[] if prev is None else [prev])
    return b.build()


# -- random graphs ------------------------------------------------------------------------
@given(graphs())
def test_random_graphs_satisfy_every_invariant(g):
    assert g.validate() is g
    n, e = g.num_nodes, g.num_edges
    assert (g.src < g.dst).all(), "nodes are stored in topological order"
    assert len(np.unique(g.src * n + g.dst)) == e, "no duplicate edges"
    assert len(set(g.names.tolist())) == n
    for k in ("names", "op", "dtype", "module", "coloc", *_FLOAT_FIELDS):
        assert getattr(g, k).shape == (n,)
        assert not getattr(g, k).flags.writeable
    assert g.shape.shape == (n, MAX_RANK)
    assert g.src.dtype == g.dst.dtype == np.int64
    assert np.array_equal(g.in_degree, np.bincount(g.dst, minlength=n))
    assert np.array_equal(g.out_degree, np.bincount(g.src, minlength=n))
    for i in range(n):
        assert set(g.successors(i).tolist()) == set(g.dst[g.src == i].tolist())
        assert set(g.predecessors(i).tolist()) == set(g.src[g.dst == i].tolist())
        preds = g.predecessors(i)
        assert g.depth[i] == (g.depth[preds].max() + 1 if len(preds) else 0)


@given(graphs())
def test_node_features_shapes_and_finiteness(g):
    ids, x = node_features(g)
    assert ids.shape == (g.num_nodes,) and ids.dtype == np.int64
    assert ((ids >= 0) & (ids < len(OP_VOCAB))).all()
    assert x.shape == (g.num_nodes, len(FEATURE_NAMES)) and x.dtype == np.float32
    assert np.isfinite(x).all()
    cls = x[:, -len([f for f in FEATURE_NAMES if f.startswith("class_")]):]
    assert np.array_equal(cls.sum(axis=1), np.ones(g.num_nodes)), "one-hot op class"
    pos = x[:, FEATURE_NAMES.index("topo_position")]
    assert ((pos >= 0) & (pos <= 1)).all()


def test_node_features_of_an_empty_graph():
    ids, x = node_features(GraphBuilder("empty").build())
    assert ids.shape == (0,) and x.shape == (0, len(FEATURE_NAMES))


@given(graphs(min_nodes=2))
def test_subgraph_keeps_induced_edges_and_order(g):
    keep = np.arange(0, g.num_nodes, 2)
    s = g.subgraph(keep).validate()
    assert s.names.tolist() == g.names[keep].tolist()
    inside = np.isin(g.src, keep) & np.isin(g.dst, keep)
    assert s.num_edges == int(inside.sum())
    assert np.array_equal(np.sort(s.edge_bytes), np.sort(g.edge_bytes[inside]))


# -- the builder ----------------------------------------------------------------------------
def test_builder_keeps_insertion_order_when_already_sorted():
    g = chain(("x", "y", "z"))
    assert g.names.tolist() == ["x", "y", "z"]
    assert g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 2]


def test_builder_sorts_nodes_added_out_of_order():
    b = GraphBuilder("g")
    b.add_node("late", "relu")
    b.add_node("early", "input", out_bytes=4)
    b.add_node("mid", "relu", out_bytes=8)
    b.add_edge("mid", "late")
    b.add_edge("early", "mid")
    g = b.build()
    assert g.names.tolist() == ["early", "mid", "late"]
    assert [(g.names[s], g.names[d]) for s, d in zip(g.src, g.dst)] == [("early", "mid"),
                                                                         ("mid", "late")]
    assert g.edge_bytes.tolist() == [4.0, 8.0], "edges default to the producer's out_bytes"


def test_builder_merges_duplicate_edges_keeping_the_largest():
    b = GraphBuilder("g")
    a = b.add_node("a", "input", out_bytes=10)
    b.add_node("b", "relu", inputs=[a, (a, 99.0), (a, 3.0)])
    g = b.build()
    assert g.num_edges == 1 and g.edge_bytes.tolist() == [99.0]


def test_builder_defaults():
    b = GraphBuilder("g")
    i = b.add_node("a", "relu", shape=(2, 3), bytes_written=24)
    g = b.build()
    assert i == 0
    assert g.out_bytes[0] == 24, "out_bytes defaults to bytes_written"
    assert g.coloc[0] == -1 and g.dtype[0] == "float32"
    assert g.shape_of(0) == (2, 3) and g.rank[0] == 2


def test_builder_colocation_groups_get_shared_ids():
    b = GraphBuilder("g")
    b.add_node("w", "parameter", coloc="layer0")
    b.add_node("u", "sgd_update", coloc="layer0", inputs=["w"])
    b.add_node("v", "relu", coloc="layer1", inputs=["u"])
    b.add_node("free", "relu", inputs=["v"])
    g = b.build()
    assert g.coloc[0] == g.coloc[1] != g.coloc[2]
    assert g.coloc[3] == -1
    assert g.summary()["colocation_groups"] == 2


def test_builder_numbers_colocation_groups_in_node_order():
    b = GraphBuilder("g")
    b.add_node("late", "relu", coloc="second")
    b.add_node("early", "input", coloc="first")
    b.add_node("other", "relu", coloc="second")
    b.add_edge("early", "late")
    g = b.build()
    assert g.names.tolist() == ["early", "late", "other"]
    assert g.coloc.tolist() == [0, 1, 1], "ids follow the sorted node order, not insertion"


def test_builder_rejects_a_duplicate_name():
    b = GraphBuilder("dup")
    b.add_node("same", "relu")
    with pytest.raises(GraphError, match="'same'"):
        b.add_node("same", "add")


@pytest.mark.parametrize("ref", ["nosuch", 7, -1])
def test_builder_rejects_an_unknown_node(ref):
    b = GraphBuilder("g")
    b.add_node("a", "relu")
    with pytest.raises(GraphError, match=str(ref)):
        b.add_edge(ref, "a")


def test_builder_rejects_a_cycle_naming_its_nodes():
    b = GraphBuilder("cyc")
    b.add_node("before", "input")
    b.add_node("alpha", "relu", inputs=["before"])
    b.add_node("beta", "relu", inputs=["alpha"])
    b.add_node("gamma", "relu", inputs=["beta"])
    b.add_edge("gamma", "alpha")
    with pytest.raises(GraphError, match="cycle") as err:
        b.build()
    msg = str(err.value)
    assert "'cyc'" in msg and all(x in msg for x in ("alpha", "beta", "gamma"))
    assert "before" not in msg


def test_builder_rejects_a_self_loop():
    b = GraphBuilder("loop")
    b.add_node("me", "relu")
    b.add_edge("me", "me")
    with pytest.raises(GraphError, match="me"):
        b.build()


def test_empty_graph():
    g = GraphBuilder("empty").build()
    assert g.num_nodes == g.num_edges == 0 and len(g) == 0
    assert g.summary()["max_depth"] == 0


def test_pad_shape_folds_high_ranks_keeping_the_element_count():
    dims = list(range(2, 2 + MAX_RANK + 3))
    p = pad_shape(dims)
    assert len(p) == MAX_RANK and all(d > 0 for d in p)
    assert int(np.prod(p)) == int(np.prod(dims))
    assert pad_shape((3, 4)) == [3, 4] + [-1] * (MAX_RANK - 2)


# -- validation of graphs built directly ---------------------------------------------------
def test_direct_graph_with_a_back_edge_cycle_is_rejected_by_name():
    g = direct_graph(3, [(0, 1), (1, 2), (2, 0)])
    with pytest.raises(GraphError, match="cycle") as err:
        g.validate()
    assert all(f"v{i}" in str(err.value) for i in range(3))


def test_direct_graph_with_a_back_edge_but_no_cycle_is_rejected():
    g = direct_graph(3, [(1, 0), (2, 1)])
    with pytest.raises(GraphError, match="topological order") as err:
        g.validate()
    assert "v1" in str(err.value) and "v0" in str(err.value)


def test_direct_graph_self_loop_is_rejected():
    with pytest.raises(GraphError, match="v1"):
        direct_graph(2, [(1, 1)]).validate()


@pytest.mark.parametrize("edge, key", [((0, 5), "dst=5"), ((-1, 1), "src=-1"), ((3, 1), "src=3")])
def test_direct_graph_edge_out_of_range_is_rejected(edge, key):
    with pytest.raises(GraphError, match=key):
        direct_graph(3, [(0, 1), edge]).validate()


def test_direct_graph_duplicate_edge_is_rejected():
    with pytest.raises(GraphError, match="duplicate edge .*'v0'.* -> .*'v1'"):
        direct_graph(2, [(0, 1), (0, 1)], edge_bytes=np.ones(2)).validate()


@pytest.mark.parametrize("graph", [
    lambda: direct_graph(2, [(0, 1), (0, 1)], edge_bytes=np.ones(2)),
    lambda: direct_graph(2, [(1, 0)]),
    lambda: direct_graph(2, [(0, 1)], flops=np.array([1.0, np.nan])),
    lambda: direct_graph(2, [(0, 1)], edge_bytes=np.array([-1.0])),
    lambda: direct_graph(2, [], coloc=np.array([-1, -3])),
    lambda: direct_graph(2, [], names=np.array(["v0", "v0"])),
], ids=["duplicate-edge", "back-edge", "nan-flops", "negative-edge", "coloc", "duplicate-name"])
def test_validation_messages_show_plain_names_and_numbers(graph):
    with pytest.raises(GraphError) as err:
        graph().validate()
    assert "np." not in str(err.value) and "'v" in str(err.value), str(err.value)


def test_direct_graph_duplicate_names_are_rejected():
    with pytest.raises(GraphError, match="duplicate node name .*'v0'"):
        direct_graph(2, [], names=np.array(["v0", "v0"])).validate()


@pytest.mark.parametrize("field", _FLOAT_FIELDS)
@pytest.mark.parametrize("value", [-1.0, np.nan, np.inf])
def test_negative_or_non_finite_sizes_are_rejected_naming_the_node(field, value):
    arr = np.ones(3)
    arr[1] = value
    g = direct_graph(3, [(0, 1), (1, 2)], **{field: arr})
    with pytest.raises(GraphError) as err:
        g.validate()
    assert "'v1'" in str(err.value) and field in str(err.value)


def test_nan_flops_from_the_builder_is_rejected():
    b = GraphBuilder("nan")
    b.add_node("ok", "input")
    b.add_node("bad", "mm", flops=float("nan"), inputs=["ok"])
    with pytest.raises(GraphError, match="node .*'bad'.* has flops=.*nan"):
        b.build()


def test_negative_size_from_the_builder_is_rejected():
    b = GraphBuilder("neg")
    b.add_node("bad", "relu", temp_bytes=-5)
    with pytest.raises(GraphError, match="'bad'.*temp_bytes"):
        b.build()


def test_negative_edge_bytes_are_rejected_naming_the_edge():
    b = GraphBuilder("neg")
    b.add_node("p", "input")
    b.add_node("q", "relu", inputs=[("p", -3.0)])
    with pytest.raises(GraphError, match="edge .*'p'.* -> .*'q'"):
        b.build()


@pytest.mark.parametrize("row", [[0, 4] + [-1] * (MAX_RANK - 2), [4, -1, 4] + [-1] * (MAX_RANK - 3)])
def test_bad_shapes_are_rejected(row):
    shape = np.full((2, MAX_RANK), -1, dtype=np.int64)
    shape[1] = row
    with pytest.raises(GraphError, match="'v1'.*shape"):
        direct_graph(2, [], shape=shape).validate()


def test_bad_colocation_id_is_rejected():
    with pytest.raises(GraphError, match="'v0'.*coloc"):
        direct_graph(2, [], coloc=np.array([-2, -1])).validate()


def test_mismatched_array_lengths_fail_at_construction():
    with pytest.raises(GraphError, match="flops"):
        direct_graph(3, [], flops=np.ones(2))
    with pytest.raises(GraphError, match="edge_bytes"):
        direct_graph(3, [(0, 1)], edge_bytes=np.ones(3))
    with pytest.raises(GraphError, match="shape"):
        direct_graph(3, [], shape=np.zeros((3, 2)))


def test_non_numeric_field_fails_at_construction():
    with pytest.raises(GraphError, match="flops"):
        direct_graph(2, [], flops=np.array(["a", "b"]))


def test_errors_share_one_base_class():
    assert issubclass(GraphError, GraphoptError)


# -- immutability and derived graphs --------------------------------------------------------
def test_arrays_are_read_only():
    g = chain()
    with pytest.raises(ValueError):
        g.flops[0] = 5.0
    with pytest.raises(ValueError):
        g.src[0] = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.name = "other"


def test_replace_copies_with_changes():
    g = chain()
    h = g.replace(flops=np.full(3, 7.0))
    assert h.flops.tolist() == [7.0] * 3 and g.flops.tolist() == [1.0] * 3
    assert h.names is g.names


def test_summary_totals():
    g = mlp_training_graph(layers=2, hidden=8, batch=4)
    s = g.summary()
    assert s["nodes"] == g.num_nodes and s["edges"] == g.num_edges
    assert s["flops"] == pytest.approx(g.flops.sum())
    assert s["persistent_bytes"] == 2 * (8 * 8 + 8) * 4
    assert s["colocation_groups"] == 2
    assert sum(s["op_classes"].values()) == g.num_nodes


# -- generators ------------------------------------------------------------------------------
def test_layered_graph_is_deterministic_per_seed():
    a, b, c = layered_graph(6, 5, seed=4), layered_graph(6, 5, seed=4), layered_graph(6, 5, seed=5)
    for k in ("names", "op", "flops", "src", "dst", "edge_bytes", "persistent_bytes"):
        assert np.array_equal(getattr(a, k), getattr(b, k))
    assert not (np.array_equal(a.flops, c.flops) and np.array_equal(a.src, c.src))
    assert a.num_nodes == 30 and a.validate() is a


def test_mlp_training_graph_is_valid_with_colocated_updates():
    g = mlp_training_graph(layers=3, hidden=16, batch=2).validate()
    for i in range(3):
        members = {str(g.names[j]) for j in np.flatnonzero(g.coloc == g.coloc[g.index[f"layers.{i}.weight"]])}
        assert {f"layers.{i}.weight", f"layers.{i}.bias", f"layers.{i}.weight.sgd"} <= members


def test_layer_order_reads_an_unrolled_rnn_layer_by_layer():
    from graphopt.zoo import build, get_entry

    g = build(get_entry("rnnlm-2-quick"))
    order = layer_order(g)
    assert sorted(order.tolist()) == list(range(g.num_nodes))
    layer = np.array([(lay[1] if (lay := layer_of(str(m))) else -1) for m in g.module])
    # every op of layer 0 (forward, backward and update) before every op of layer 1
    assert order[layer == 0].max() < order[layer == 1].min()
    # the shared dropout module's ops read among the layers, not all in one run
    drop = np.flatnonzero(np.char.startswith(g.module.astype(str), "drop"))
    assert len(drop) and order[drop].min() < order[layer == 1].min() < order[drop].max()


@given(graphs())
def test_layer_order_without_layers_is_node_order(g):
    g = dataclasses.replace(g, module=np.full(g.num_nodes, "", dtype=object))
    assert layer_order(g).tolist() == list(range(g.num_nodes))
