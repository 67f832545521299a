"""Gantt PNG: written atomically for valid, invalid and very large timelines."""

import numpy as np
import pytest
from matplotlib.image import imread

from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.sim import Plan, Problem, simulate
from graphopt.viz import gantt
from graphopt.viz.gantt import _merge

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _mlp_two_devices(memory=None):
    g = mlp_training_graph()
    cl = load_cluster("dgx1-v100:2")
    prob = Problem(g, cl if memory is None else cl.with_memory(memory))
    # layers.N on device N % 2 keeps each layer's colocation group whole
    place = np.array([int(m.split(".")[1]) % 2 if m.startswith("layers.") else 0
                      for m in g.module])
    return prob, simulate(prob, Plan(placement=place), timeline=True)


def _assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1024
    h, w, _ = imread(path).shape
    assert w > 1000 and h > 150


def test_two_device_plan_writes_a_png(tmp_path):
    prob, r = _mlp_two_devices()
    assert r.valid and len(r.timeline.transfer_start) > 0
    out = gantt(prob, r, tmp_path / "plots" / "mlp.png", title="mlp on two V100s")
    assert out == tmp_path / "plots" / "mlp.png"
    _assert_png(out)
    assert [p.name for p in out.parent.iterdir()] == ["mlp.png"]  # no temporary left behind


def test_invalid_plan_is_drawn_too(tmp_path):
    prob, r = _mlp_two_devices(memory=2**20)
    assert not r.valid
    _assert_png(gantt(prob, r, tmp_path / "oom.png"))


def test_large_timeline_merges_bars_and_still_draws(tmp_path):
    g = layered_graph(200, 20, seed=1)
    prob = Problem(g, load_cluster("dgx1-v100:4"))
    place = np.random.default_rng(1).integers(0, 4, g.num_nodes)
    r = simulate(prob, Plan(placement=place), timeline=True)
    _assert_png(gantt(prob, r, tmp_path / "big.png", max_kernels=100))


def test_merge_covers_every_interval_and_keeps_keys_apart():
    rng = np.random.default_rng(0)
    dur = rng.uniform(0, 1, 500)
    gap = rng.exponential(1, 500)
    key = rng.integers(0, 3, 500)
    start, end = np.zeros(500), np.zeros(500)
    for k in range(3):  # intervals of one key never overlap
        m = key == k
        start[m] = np.cumsum(gap[m] + dur[m]) - dur[m]
        end[m] = start[m] + dur[m]
    s, e, k = _merge(start, end, key, gap=0.5)
    assert len(s) < len(start)
    for a, b, c in zip(start, end, key):
        assert np.any((k == c) & (s <= a) & (e >= b))
    for c in range(3):  # runs of one key stay disjoint and more than the gap apart
        rs, re = s[k == c], e[k == c]
        assert np.all(rs[1:] - re[:-1] > 0.5)


def test_missing_timeline_is_an_error(tmp_path):
    prob, _ = _mlp_two_devices()
    with pytest.raises(GraphoptError, match=r"simulate\(\.\.\., timeline=True\) first"):
        gantt(prob, simulate(prob, Plan()), tmp_path / "none.png")
    assert not list(tmp_path.iterdir())
