"""Groupings (colocation, module, size-bounded), quotient graphs and expanded placements."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from graphopt.errors import GraphError, PlanError
from graphopt.hardware import load_cluster
from graphopt.ir import Graph, GraphBuilder
from graphopt.ir.coarsen import (bounded_groups, coarsen, colocation_groups, expand_placement,
                                 module_groups)
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.sim import Plan, Problem, simulate
from tests.conftest import coloc_respecting, graphs

_SUMMED = ("flops", "bytes_read", "bytes_written", "persistent_bytes", "temp_bytes")


def build(edges: list[tuple[str, str]], nodes: dict[str, dict] | None = None) -> Graph:
    """A graph from named edges; ``nodes`` gives per-node keyword arguments."""
    b = GraphBuilder("hand")
    names = list(dict.fromkeys([n for e in edges for n in e] + list(nodes or {})))
    for n in names:
        kw = {"flops": 10.0, "bytes_written": 4.0, **(nodes or {}).get(n, {})}
        b.add_node(n, kw.pop("op", "relu"), **kw)
    for s, d in edges:
        b.add_edge(s, d)
    return b.build()


def group_sets(g: Graph, groups: np.ndarray) -> set[frozenset[str]]:
    return {frozenset(str(g.names[i]) for i in np.flatnonzero(groups == k))
            for k in np.unique(groups)}


def assert_canonical(groups: np.ndarray) -> None:
    """Ids 0..G-1 numbered by first appearance in topological order."""
    _, first = np.unique(groups, return_index=True)
    assert np.array_equal(groups[np.sort(first)], np.arange(len(first)))


# -- colocation groups ----------------------------------------------------------------------
def test_chain_collapses_into_one_group():
    g = build([("a", "b"), ("b", "c"), ("c", "d")])
    assert colocation_groups(g).tolist() == [0, 0, 0, 0]


def test_only_consumer_merges_to_a_fixed_point():
    # a, b feed only c; then x feeds only the group {a, b, c}; c has two consumers
    g = build([("x", "a"), ("x", "b"), ("a", "c"), ("b", "c"), ("c", "d"), ("c", "e")])
    groups = colocation_groups(g)
    assert group_sets(g, groups) == {frozenset("xabc"), frozenset("d"), frozenset("e")}
    assert_canonical(groups)


def test_colocation_groups_start_from_colocation():
    # d and e are colocated: they stay together although each has no consumer
    g = build([("x", "d"), ("x", "e"), ("x", "f")],
              {"d": {"coloc": "g"}, "e": {"coloc": "g"}})
    assert group_sets(g, colocation_groups(g)) == {frozenset("x"), frozenset("de"), frozenset("f")}


@given(graphs(max_nodes=30))
def test_groupings_keep_colocation_whole(g):
    for groups in (colocation_groups(g), module_groups(g, 1), bounded_groups(g, 4)):
        assert groups.shape == (g.num_nodes,)
        assert_canonical(groups)
        for c in np.unique(g.coloc[g.coloc >= 0]):
            assert len(np.unique(groups[g.coloc == c])) == 1


def test_empty_graph():
    g = GraphBuilder("empty").build()
    for groups in (colocation_groups(g), module_groups(g, 2), bounded_groups(g, 3)):
        assert groups.shape == (0,)
    q, node_group = coarsen(g, np.zeros(0, dtype=int))
    assert q.num_nodes == 0 and node_group.shape == (0,)


# -- module groups -----------------------------------------------------------------------------
def test_module_groups_by_depth():
    mods = {"a": "enc.l0.attn", "b": "enc.l0.ffn", "c": "enc.l1.attn", "d": "dec", "e": ""}
    g = build([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")],
              {k: {"module": m} for k, m in mods.items()})
    assert [int(module_groups(g, d).max()) + 1 for d in range(4)] == [1, 3, 4, 5]
    assert group_sets(g, module_groups(g, 2)) == {frozenset("ab"), frozenset("c"), frozenset("d"),
                                                  frozenset("e")}
    with pytest.raises(GraphError, match="depth must be >= 0, got -1"):
        module_groups(g, -1)


def test_module_groups_merge_across_colocation():
    g = build([("a", "b")], {"a": {"module": "x", "coloc": "c"}, "b": {"module": "y", "coloc": "c"}})
    assert module_groups(g, 1).tolist() == [0, 0]
    assert module_groups(g, 1, keep_colocation=False).tolist() == [0, 1]


# -- size-bounded groups ---------------------------------------------------------------------
def test_bounded_groups_are_balanced_contiguous_chunks():
    g = layered_graph(40, 6, seed=3)
    groups = bounded_groups(g, 10)
    assert int(groups.max()) + 1 == 10
    assert (np.diff(groups) >= 0).all()  # contiguous in topological order
    w = np.maximum(g.flops, 16 * (g.bytes_read + g.bytes_written))
    per = np.bincount(groups, weights=w)
    assert per.max() <= per.sum() / 10 + w.max()  # a chunk overshoots by at most one op
    assert bounded_groups(g, 1).max() == 0
    assert bounded_groups(g, 10_000).max() + 1 <= g.num_nodes
    uniform = bounded_groups(g, 4, weights=np.ones(g.num_nodes))
    assert np.bincount(uniform).tolist() == [g.num_nodes // 4] * 4


def test_bounded_groups_bad_arguments():
    g = layered_graph(4, 2, seed=0)
    with pytest.raises(GraphError, match="target must be >= 1"):
        bounded_groups(g, 0)
    with pytest.raises(GraphError, match="weights must be 8 finite numbers"):
        bounded_groups(g, 2, weights=[1.0, 2.0])


def test_bounded_groups_on_a_training_step():
    g = mlp_training_graph(layers=4, hidden=64, batch=8)
    # A parameter, its gradient and its update share a group; paths run from the
    # parameter through the forward and backward to them, so keeping colocation groups
    # whole in an acyclic grouping merges nearly everything...
    whole = bounded_groups(g, 6)
    coarsen(g, whole)
    assert whole.max() + 1 < 6
    # ...while chunks that split them stay acyclic and the quotient carries colocation.
    split = bounded_groups(g, 6, keep_colocation=False)
    assert split.max() + 1 == 6
    q, node_group = coarsen(g, split)
    assert (q.coloc >= 0).any()
    for c in np.unique(g.coloc[g.coloc >= 0]):
        assert len(np.unique(q.coloc[node_group[g.coloc == c]])) == 1


# -- the quotient graph ----------------------------------------------------------------------
@given(graphs(max_nodes=30))
def test_quotient_preserves_totals_and_is_acyclic(g):
    for groups in (bounded_groups(g, 5), bounded_groups(g, 3, keep_colocation=False),
                   colocation_groups(g)):
        q, node_group = coarsen(g, groups, merge_cycles=True)
        assert q.validate() is q and (q.src < q.dst).all()
        for k in _SUMMED:
            assert np.isclose(getattr(q, k).sum(), getattr(g, k).sum()), k
        # same partition as the grouping, or coarser where cycles merged
        assert len(np.unique(node_group)) == q.num_nodes
        for k in np.unique(groups):
            assert len(np.unique(node_group[groups == k])) == 1
        # every op edge between groups is a quotient edge
        cross = node_group[g.src] != node_group[g.dst]
        pairs = set(zip(node_group[g.src[cross]].tolist(), node_group[g.dst[cross]].tolist()))
        assert pairs == set(zip(q.src.tolist(), q.dst.tolist()))


def test_quotient_fields_by_hand():
    # x (input) feeds a and b; a and b form group 1 with c; the tensor of x crosses once
    g = build([("x", "a"), ("x", "b"), ("a", "c"), ("b", "c"), ("c", "d")], {
        "x": {"op": "input", "flops": 0, "out_bytes": 100, "module": ""},
        "a": {"op": "mm", "flops": 500, "module": "enc.l0.q", "persistent_bytes": 64},
        "b": {"op": "relu", "flops": 20, "module": "enc.l0.k", "temp_bytes": 8},
        "c": {"op": "add", "flops": 30, "module": "enc.l1", "bytes_written": 12},
        "d": {"op": "exp", "flops": 1, "module": "dec"},
    })
    q, node_group = coarsen(g, [0, 1, 1, 1, 2])
    assert q.names.tolist() == ["group0", "group1", "group2"]
    assert node_group.tolist() == [0, 1, 1, 1, 2]
    assert q.op.tolist() == ["input", "mm", "exp"]
    assert q.module.tolist() == ["", "enc", "dec"]
    assert q.flops.tolist() == [0, 550, 1]
    assert q.persistent_bytes[1] == 64 and q.temp_bytes[1] == 8
    assert q.out_bytes.tolist() == [100, 12, 0]  # only c's output leaves group 1
    assert list(zip(q.src.tolist(), q.dst.tolist(), q.edge_bytes.tolist())) == [(0, 1, 100), (1, 2, 12)]


def test_cycle_is_an_error_or_merged():
    g = build([("a", "b"), ("b", "c")])
    with pytest.raises(GraphError, match=r"cycle through 2 groups: 0 \(op 'a'\), 1 \(op 'b'\)"):
        coarsen(g, [0, 1, 0])
    q, node_group = coarsen(g, [0, 1, 0], merge_cycles=True)
    assert q.num_nodes == 1 and node_group.tolist() == [0, 0, 0]


def test_bad_groupings():
    g = build([("a", "b")])
    with pytest.raises(GraphError, match=r"one entry per node \(2\), got shape \(3,\)"):
        coarsen(g, [0, 1, 2])
    with pytest.raises(GraphError, match="must be integers"):
        coarsen(g, [0.0, 1.5])


# -- placements of groups ----------------------------------------------------------------------
def test_expand_placement_round_trip():
    groups = np.array([2, 0, 0, 1, 2])
    place = expand_placement(groups, [5, 6, 7])
    assert place.tolist() == [7, 5, 5, 6, 7]
    assert all(len(set(place[groups == k])) == 1 for k in range(3))
    with pytest.raises(PlanError, match="refer to group 2, but group_placement has 2 entries"):
        expand_placement(groups, [0, 1])
    with pytest.raises(PlanError, match="refer to group -1"):
        expand_placement([-1], [0])


@pytest.mark.parametrize("grouping", ["bounded", "module", "colocation"])
def test_expanded_plan_simulates(grouping):
    g = mlp_training_graph(layers=4, hidden=256, batch=32)
    groups = {"bounded": lambda: bounded_groups(g, 8, keep_colocation=False),
              "module": lambda: module_groups(g, 2),
              "colocation": lambda: colocation_groups(g)}[grouping]()
    q, node_group = coarsen(g, groups, merge_cycles=True)
    cluster = load_cluster("dgx1-v100:2")
    rng = np.random.default_rng(0)
    group_place = coloc_respecting(q, rng.integers(0, 2, q.num_nodes))
    place = expand_placement(node_group, group_place)
    r = simulate(Problem(g, cluster), Plan(placement=place))
    assert r.valid, r.reason
    rq = simulate(Problem(q, cluster), Plan(placement=group_place))
    assert rq.valid, rq.reason
    assert all(len(np.unique(place[node_group == k])) == 1 for k in range(q.num_nodes))


def test_colocation_group_joins_its_heaviest_member():
    names = "abcdefgh"
    g = build(list(zip(names, names[1:])),
              {"a": {"coloc": "p", "flops": 1.0}, "g": {"coloc": "p", "flops": 1000.0}})
    groups = bounded_groups(g, 4, weights=np.ones(8), acyclic=False)
    assert groups[0] == groups[6] and len(np.unique(groups)) == 4
    # a -> b -> ... -> g: the moved group makes a cycle, which acyclic merges away
    assert len(np.unique(bounded_groups(g, 4, weights=np.ones(8)))) < 4
