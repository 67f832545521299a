"""Shared fixtures and hypothesis strategies for the IR, hardware and simulator tests.

Strategies are plain functions (importable as ``from tests.conftest import ...``) because
``@given`` needs them when the module is imported, before any fixture exists.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from graphopt.data import tpugraphs_dir
from graphopt.errors import GraphoptError
from graphopt.hardware import Cluster, load_cluster
from graphopt.ir import Graph, GraphBuilder

# The first call of each numba entry point compiles (or loads its cache): no deadline.
# CI draws the same examples every run, so that its verdict depends on the code alone;
# a developer's run explores new ones.
settings.register_profile(
    "graphopt", max_examples=30, deadline=None, derandomize=bool(os.environ.get("CI")), print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# A longer soak for local bug hunting: pytest --hypothesis-profile=thorough
settings.register_profile("thorough", parent=settings.get_profile("graphopt"), max_examples=400)
settings.load_profile("graphopt")

#: Op types that fuse (elementwise, data movement, norms, reductions: XLA's loop fusion).
FUSIBLE_OPS = ("add", "mul", "relu", "gelu", "sub", "exp", "tanh", "transpose", "sum", "softmax",
               "layer_norm", "view")
#: Op types of other classes: matrix products, convolutions, gathers, pools, unknown ops.
OTHER_OPS = ("mm", "addmm", "conv", "embedding", "max_pool", "all_reduce", "my_custom_op")

#: Small clusters the simulator tests run on: homogeneous NVLink, PCIe tree, CPU + GPUs
#: (heterogeneous, host star), a single device.
CLUSTER_SPECS = ("dgx1-v100:4", "k80:3", "cpu-v100:3", "dgx-a100:1", "tpu-v4:4")


@functools.cache
def cluster(spec: str) -> Cluster:
    """A cluster preset, loaded once per session."""
    return load_cluster(spec)


def real_tpugraphs(name: str) -> Path | None:
    """The real TpuGraphs record file ``name`` (:func:`graphopt.data.tpugraphs_dir`), or
    None where this machine has none: the tests that need it skip, before any fixture
    exists."""
    try:
        path = tpugraphs_dir() / name
    except GraphoptError:
        return None
    return path if path.is_file() else None


@st.composite
def graphs(draw, min_nodes: int = 1, max_nodes: int = 24, max_fanin: int = 3,
           colocation: bool = True) -> Graph:
    """Random small DAGs built with :class:`GraphBuilder`.

    Nodes are inserted in a random order and edges added afterwards by name, so the
    builder's topological sort is exercised. The op mix favours fusible elementwise
    chains; sources are inputs or parameters (persistent bytes, whole value sent);
    some ops hold scratch bytes; some share colocation groups; some edges carry a byte
    count other than the producer's output and some are given twice (the builder
    keeps the larger).
    """
    # half the time at least half the maximum size: hypothesis favours tiny integers
    n = draw(st.integers(min_nodes, max_nodes)
             | st.integers(max(min_nodes, max_nodes // 2), max_nodes))
    seed = draw(st.integers(0, 2**32 - 1))
    p_fusible = draw(st.sampled_from([0.2, 0.6, 0.9]))
    n_groups = draw(st.integers(0, 3)) if colocation else 0
    rng = np.random.default_rng(seed)
    specs = []
    edges: list[tuple[int, int, float | None]] = []
    for i in range(n):
        kw: dict = {}
        if i == 0 or rng.random() < 0.15:
            if rng.random() < 0.5:
                op = "parameter"
                w = float(rng.integers(1, 1 << 20))
                kw.update(out_bytes=w if rng.random() < 0.7 else 0.0, persistent_bytes=w)
            else:
                op = "input"
                kw.update(out_bytes=float(rng.integers(0, 1 << 20)))
            preds: list[int] = []
        else:
            op = str(rng.choice(FUSIBLE_OPS if rng.random() < p_fusible else OTHER_OPS))
            k = int(rng.integers(1, min(max_fanin, i) + 1))
            lo = max(0, i - 6) if rng.random() < 0.8 else 0  # mostly local: chains that fuse
            preds = sorted({int(x) for x in rng.integers(lo, i, size=k)})
            rd, wr = float(rng.integers(0, 1 << 22)), float(rng.integers(0, 1 << 22))
            flops = float(rng.uniform(0, 2e9)) if op in OTHER_OPS else wr / 4
            kw.update(flops=flops, bytes_read=rd, bytes_written=wr,
                      out_bytes=0.0 if op == "view" else wr,
                      temp_bytes=float(rng.integers(1, 1 << 20)) if rng.random() < 0.3 else 0.0,
                      persistent_bytes=float(rng.integers(1, 1 << 20)) if op in ("mm", "conv")
                      and rng.random() < 0.5 else 0.0)
        if n_groups and rng.random() < 0.3:
            kw["coloc"] = f"grp{int(rng.integers(n_groups))}"
        kw["module"] = f"block{i // 4}"
        kw["shape"] = tuple(int(d) for d in rng.integers(1, 64, size=int(rng.integers(0, 4))))
        specs.append((f"n{i}", op, kw))
        for p in preds:
            nbytes = None if rng.random() < 0.8 else float(rng.integers(0, 1 << 20))
            edges.append((p, i, nbytes))
            if rng.random() < 0.05:  # a duplicate edge with fewer bytes: merged away
                edges.append((p, i, 0.0))
    b = GraphBuilder(f"rand-{seed}-{n}", meta={"seed": seed})
    for j in rng.permutation(n):
        name, op, kw = specs[j]
        b.add_node(name, op, **kw)
    for j in rng.permutation(len(edges)):
        s, d, nbytes = edges[j]
        b.add_edge(f"n{s}", f"n{d}", nbytes)
    return b.build()


def coloc_respecting(graph: Graph, place: np.ndarray) -> np.ndarray:
    """``place`` with every colocation group moved to the device of its first member."""
    place = np.array(place, dtype=np.int64)
    first: dict[int, int] = {}
    for i, g in enumerate(graph.coloc):
        if g >= 0:
            place[i] = first.setdefault(int(g), int(place[i]))
    return place


@st.composite
def placements(draw, graph: Graph, num_devices: int, respect_coloc: bool = True) -> np.ndarray:
    """A random placement: all on one device, round robin, blocks, or uniform."""
    n = graph.num_nodes
    kind = draw(st.sampled_from(["one", "blocks", "random"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "one":
        place = np.full(n, int(rng.integers(num_devices)), dtype=np.int64)
    elif kind == "blocks":
        place = (np.arange(n) * num_devices // max(n, 1)).astype(np.int64)
    else:
        place = rng.integers(0, num_devices, size=n)
    return coloc_respecting(graph, place) if respect_coloc else place


@pytest.fixture(scope="session")
def small_cluster() -> Cluster:
    """Four V100s joined by DGX-1's NVLink cube-mesh (some pairs through PCIe)."""
    return cluster("dgx1-v100:4")


@pytest.fixture(scope="session", params=CLUSTER_SPECS)
def any_cluster(request) -> Cluster:
    """Each of the small test clusters in turn."""
    return cluster(request.param)


@pytest.fixture(scope="session")
def one_device() -> Cluster:
    return cluster("dgx1-v100:1")


# -- GO's small problems: the environment's and the method's tests share them ----------------
@pytest.fixture(scope="module")
def prob():
    from graphopt.ir.generate import layered_graph
    from graphopt.sim import Problem

    return Problem(layered_graph(12, 6, seed=3), load_cluster("p100:4"))


@pytest.fixture(scope="module")
def training_prob():
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.sim import Problem

    return Problem(mlp_training_graph(), load_cluster("p100:2"))
