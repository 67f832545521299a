"""Devices, clusters, topologies and presets (``NAME[:COUNT]``)."""

from __future__ import annotations

import numpy as np
import pytest

from graphopt.errors import ClusterError, GraphoptError
from graphopt.hardware import (
    Cluster,
    Device,
    cluster_from_toml,
    list_presets,
    load_cluster,
    topology,
)

PRESETS = list_presets()


def dev(name: str, **kw) -> Device:
    base = {"kind": "toy", "peak_flops": {"float32": 1e12}, "vector_flops": 1e11, "mem_bw": 1e11,
                "memory": 1e9}
    base.update(kw)
    return Device(name, **base)


def toy_cluster(d: int = 2, **kw) -> Cluster:
    bw, lat = topology.all_to_all(d, 1e10, 1e-6)
    return Cluster("toy", tuple(dev(f"d:{i}") for i in range(d)), kw.get("bw", bw), kw.get("lat", lat))


# -- presets --------------------------------------------------------------------------------
def test_presets_are_listed():
    assert {"dgx1-v100", "h100", "k80", "cpu", "tpu-v4"} <= set(PRESETS)
    assert PRESETS == sorted(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads(name):
    c = load_cluster(name)
    d = c.num_devices
    assert d >= 1 and len(c) == d
    assert c.name == name
    assert c.bandwidth.shape == c.latency.shape == (d, d)
    off = ~np.eye(d, dtype=bool)
    assert (c.bandwidth[off] > 0).all() and np.isfinite(c.bandwidth[off]).all()
    assert (c.latency[off] >= 0).all() and np.isfinite(c.latency[off]).all()
    assert np.isinf(np.diag(c.bandwidth)).all() and (np.diag(c.latency) == 0).all()
    assert not c.bandwidth.flags.writeable and not c.latency.flags.writeable
    assert len({x.name for x in c.devices}) == d
    for x in c.devices:
        assert x.memory > 0 and x.mem_bw > 0 and x.vector_flops > 0 and x.launch_overhead >= 0
        assert x.matrix_flops("float32") > 0
    assert (c.memory == [x.memory for x in c.devices]).all()
    assert c.meta["sources"], "a preset names its public sources"
    json_ready = c.to_dict()
    assert len(json_ready["devices"]) == d and np.isfinite(json_ready["bandwidth"]).all()


@pytest.mark.parametrize("name", PRESETS)
def test_count_takes_the_first_devices_and_their_links(name):
    full = load_cluster(name)
    for k in sorted({1, max(1, full.num_devices // 2), full.num_devices}):
        c = load_cluster(f"{name}:{k}")
        assert c.num_devices == k and c.name == f"{name}:{k}"
        assert [x.name for x in c.devices] == [x.name for x in full.devices[:k]]
        assert c.devices == full.devices[:k]
        assert np.array_equal(c.bandwidth, full.bandwidth[:k, :k])
        assert np.array_equal(c.latency, full.latency[:k, :k])


def test_dgx1_links_follow_the_cube_mesh():
    c = load_cluster("dgx1-v100")
    assert c.num_devices == 8 and c.devices[0].kind == "V100-SXM2-16GB"
    assert c.bandwidth[0, 3] == 2 * c.bandwidth[0, 1] == 50e9, "NV2 pair: two 25 GB/s links"
    assert c.bandwidth[0, 5] == 10e9 and c.latency[0, 5] > c.latency[0, 1], "no link: PCIe/QPI"
    assert c.devices[0].memory == 16 * 2**30


def test_heterogeneous_preset_has_a_host():
    c = load_cluster("cpu-v100")
    kinds = [x.kind for x in c.devices]
    assert kinds[0] != kinds[1] and len(set(kinds[1:])) == 1
    assert c.devices[0].name.startswith("cpu:") and c.devices[1].name == "gpu:0"


def test_with_memory_changes_only_capacity():
    c = load_cluster("dgx1-v100:4")
    m = c.with_memory(1234.0)
    assert (m.memory == 1234.0).all() and (c.memory == 16 * 2**30).all()
    assert np.array_equal(m.bandwidth, c.bandwidth) and np.array_equal(m.latency, c.latency)
    assert [x.kind for x in m.devices] == [x.kind for x in c.devices]
    assert m.name == c.name


# -- bad presets ----------------------------------------------------------------------------
def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ClusterError, match="no-such-machine") as err:
        load_cluster("no-such-machine:2")
    for name in PRESETS:
        assert name in str(err.value)


@pytest.mark.parametrize("count", ["x", "", "2.5", "four"])
def test_non_integer_count(count):
    with pytest.raises(ClusterError, match="count") as err:
        load_cluster(f"dgx1-v100:{count}")
    assert f"{count!r}" in str(err.value)


@pytest.mark.parametrize("count", [0, -1, 9, 1000])
def test_count_out_of_range(count):
    with pytest.raises(ClusterError, match=f"take {count}") as err:
        load_cluster(f"dgx1-v100:{count}")
    assert "8 devices" in str(err.value)


def test_cluster_errors_are_graphopt_errors():
    assert issubclass(ClusterError, GraphoptError)


def test_an_oversized_cluster_file_is_refused_before_it_is_read(tmp_path):
    from graphopt.hardware.presets import MAX_FILE_BYTES

    p = tmp_path / "huge.toml"
    with p.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing written
    with pytest.raises(ClusterError, match=r"huge.toml.*more than 1,048,576"):
        load_cluster(str(p))


def test_toml_file_path(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text("""
name = "mine"
[[devices]]
kind = "toy"
count = 3
peak_tflops = { float32 = 10.0 }
vector_tflops = 5.0
mem_gbps = 100
memory_gib = 1
[topology]
type = "ring"
link_gbps = 10
latency_us = 2
""")
    c = load_cluster(f"{p}:2")
    assert c.num_devices == 2 and c.devices[0].memory == 2**30
    assert c.bandwidth[0, 1] == 10e9 and c.latency[0, 1] == pytest.approx(2e-6)
    assert load_cluster(str(p)).latency[0, 2] == pytest.approx(2e-6), "ring: one hop either way"


def test_missing_toml_file(tmp_path):
    with pytest.raises(ClusterError, match="nope.toml"):
        load_cluster(str(tmp_path / "nope.toml"))


def test_malformed_toml_file(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("name = \n[[devices")
    with pytest.raises(ClusterError, match="broken.toml.*TOML"):
        load_cluster(str(p))


@pytest.mark.parametrize("data, match", [
    ({}, "devices"),
    ({"devices": [{"kind": "x", "count": 1, "vector_tflops": 1, "mem_gbps": 1,
                   "memory_gib": 1}], "topology": {"type": "ring", "link_gbps": 1,
                                                    "latency_us": 1}}, "peak_tflops"),
    ({"devices": [{"kind": "x", "count": 1, "peak_tflops": {"float32": 1}, "mem_gbps": 1,
                   "memory_gib": 1}], "topology": {"type": "ring", "link_gbps": 1,
                                                    "latency_us": 1}}, "vector_tflops"),
    ({"devices": [{"kind": "x", "count": 2, "peak_tflops": {"float32": 1}, "vector_tflops": 1,
                   "mem_gbps": 1, "memory_gib": 1}],
      "topology": {"type": "mesh-of-doom", "link_gbps": 1, "latency_us": 1}}, "mesh-of-doom"),
    ({"devices": [{"kind": "x", "count": 3, "peak_tflops": {"float32": 1}, "vector_tflops": 1,
                   "mem_gbps": 1, "memory_gib": 1}],
      "topology": {"type": "torus", "dims": [2, 2], "link_gbps": 1, "latency_us": 1}}, "torus"),
    ({"devices": [{"kind": "x", "count": 2, "peak_tflops": {"float32": 1}, "vector_tflops": 1,
                   "mem_gbps": 1, "memory_gib": "lots"}],
      "topology": {"type": "ring", "link_gbps": 1, "latency_us": 1}}, "memory_gib"),
])
def test_malformed_preset_data(data, match):
    with pytest.raises(ClusterError, match=match):
        cluster_from_toml(data, "test-source")


# -- the Cluster invariants -----------------------------------------------------------------
def test_cluster_needs_devices():
    with pytest.raises(ClusterError, match="no devices"):
        Cluster("empty", (), np.zeros((0, 0)), np.zeros((0, 0)))


def test_cluster_rejects_repeated_device_names():
    bw, lat = topology.all_to_all(2, 1e9, 0.0)
    with pytest.raises(ClusterError, match="repeat"):
        Cluster("dup", (dev("a"), dev("a")), bw, lat)


def test_cluster_rejects_bad_link_matrices():
    with pytest.raises(ClusterError, match="bandwidth has shape"):
        toy_cluster(2, bw=np.ones((3, 3)))
    bad = np.full((2, 2), 1e9)
    bad[0, 1] = 0.0
    with pytest.raises(ClusterError, match="bandwidth"):
        toy_cluster(2, bw=bad)
    lat = np.zeros((2, 2))
    lat[1, 0] = np.nan
    with pytest.raises(ClusterError, match="latency"):
        toy_cluster(2, lat=lat)


@pytest.mark.parametrize("attr", ["memory", "mem_bw", "vector_flops"])
def test_cluster_rejects_non_positive_device_figures(attr):
    bw, lat = topology.all_to_all(1, 1e9, 0.0)
    with pytest.raises(ClusterError, match=f"'bad'.*{attr}"):
        Cluster("c", (dev("bad", **{attr: 0.0}),), bw, lat)


@pytest.mark.parametrize("kw, field", [({"peak_flops": {"float32": 0.0}}, "peak_flops"),
                                       ({"peak_flops": {"float16": -1e12}}, "peak_flops"),
                                       ({"launch_overhead": -5e-6}, "launch_overhead")])
def test_cluster_rejects_bad_peaks_and_launch_overheads(kw, field):
    bw, lat = topology.all_to_all(1, 1e9, 0.0)
    with pytest.raises(ClusterError, match=f"'bad'.*{field}"):
        Cluster("c", (dev("bad", **kw),), bw, lat)


def test_take_rejects_bad_counts():
    c = toy_cluster(3)
    for k in (0, 4):
        with pytest.raises(ClusterError):
            c.take(k)
    assert c.take(2).name == "toy:2"


def test_matrix_flops_falls_back():
    d = dev("x", peak_flops={"float32": 2e12, "bfloat16": 8e12})
    assert d.matrix_flops("bfloat16") == d.matrix_flops("bf16") == 8e12
    assert d.matrix_flops("float64") == 2e12
    assert dev("y", peak_flops={"float16": 1e12}).matrix_flops("int8") == 1e11


# -- topologies ----------------------------------------------------------------------------
def test_topologies_are_symmetric_with_sane_figures():
    for bw, lat in (topology.all_to_all(4, 1e9, 1e-6), topology.pcie_tree(6, 1e9, 1e-6, 2, 5e8),
                    topology.ring(5, 1e9, 1e-6), topology.torus((2, 3), 1e9, 1e-6),
                    topology.host_star(4, 1e9, 1e-6)):
        assert np.array_equal(bw, bw.T) and np.array_equal(lat, lat.T)
        assert (bw > 0).all() and (lat >= 0).all()


def test_pcie_tree_crosses_the_root_slower():
    bw, lat = topology.pcie_tree(4, 16e9, 1e-6, per_switch=2, root_bandwidth=8e9)
    assert bw[0, 1] == 16e9 and bw[0, 2] == 8e9 and lat[0, 2] == 2 * lat[0, 1]


def test_ring_and_torus_count_hops():
    _, lat = topology.ring(6, 1e9, 1.0)
    assert lat[0, 1] == 1 and lat[0, 3] == 3 and lat[0, 5] == 1
    _, lat = topology.torus((4, 4), 1e9, 1.0)
    assert lat[0, 15] == 2 and lat[0, 10] == 4


@pytest.mark.parametrize("spec", ["h100:٢", "h100:+2", "h100: 2", "h100:2.0"])
def test_a_device_count_is_ascii_digits(spec):
    with pytest.raises(ClusterError, match="is not an integer"):
        load_cluster(spec)
