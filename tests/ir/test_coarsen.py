"""Groupings: colocation groups and size-bounded chunks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from graphopt.errors import GraphError
from graphopt.hardware import load_cluster
from graphopt.ir import Graph, GraphBuilder
from graphopt.ir.coarsen import bounded_groups, colocation_groups
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.sim import Plan, Problem, simulate
from tests.conftest import graphs


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
    for groups in (colocation_groups(g), bounded_groups(g, 4),
                   bounded_groups(g, 3, acyclic=False, units=colocation_groups(g))):
        assert groups.shape == (g.num_nodes,)
        assert_canonical(groups)
        for c in np.unique(g.coloc[g.coloc >= 0]):
            assert len(np.unique(groups[g.coloc == c])) == 1


def test_empty_graph():
    g = GraphBuilder("empty").build()
    for groups in (colocation_groups(g), bounded_groups(g, 3),
                   bounded_groups(g, 3, units=np.zeros(0, dtype=int))):
        assert groups.shape == (0,)


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
    with pytest.raises(GraphError, match=r"one entry per node \(8\), got shape \(3,\)"):
        bounded_groups(g, 2, units=[0, 1, 2])
    with pytest.raises(GraphError, match="must be integers"):
        bounded_groups(g, 2, units=np.linspace(0, 1, 8))


def test_bounded_groups_on_a_training_step():
    g = mlp_training_graph(layers=4, hidden=64, batch=8)
    # A parameter, its gradient and its update share a group; paths run from the
    # parameter through the forward and backward to them, so keeping colocation groups
    # whole in an acyclic grouping merges nearly everything...
    whole = bounded_groups(g, 6)
    assert whole.max() + 1 < 6
    # ...while chunks that split them, or a cyclic grouping, keep the count.
    assert bounded_groups(g, 6, keep_colocation=False).max() + 1 == 6
    assert bounded_groups(g, 6, acyclic=False).max() + 1 == 6


def test_colocation_group_moves_whole():
    names = "abcdefgh"
    g = build(list(zip(names, names[1:])),
              {"a": {"coloc": "p", "flops": 1.0}, "g": {"coloc": "p", "flops": 1000.0}})
    groups = bounded_groups(g, 4, weights=np.ones(8), acyclic=False)
    assert groups[0] == groups[6] and len(np.unique(groups)) == 4
    # a -> b -> ... -> g: the moved group makes a cycle, which acyclic merges away
    assert len(np.unique(bounded_groups(g, 4, weights=np.ones(8)))) < 4


@pytest.mark.parametrize("cap", [1, 3, 10, 1000])
def test_units_stay_whole_and_few_units_are_kept(cap):
    """rl-lstm's grouping: colocation groups, merged into runs of equal weight beyond a cap."""
    g = mlp_training_graph(layers=6, hidden=64, batch=8)
    units = colocation_groups(g)
    groups = bounded_groups(g, cap, acyclic=False, units=units)
    assert groups.max() + 1 <= min(cap, units.max() + 1)
    for k in np.unique(units):
        assert len(np.unique(groups[units == k])) == 1
    if cap >= units.max() + 1:
        assert np.array_equal(groups, units)
    # a placement of the groups keeps colocation and simulates
    place = np.arange(groups.max() + 1)[groups] % 2
    assert simulate(Problem(g, load_cluster("dgx1-v100:2")), Plan(placement=place)).valid
