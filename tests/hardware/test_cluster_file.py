"""The cluster file: one schema, written by ``cluster_to_toml`` and read by
``cluster_from_toml``; the ranges of its numbers come from one table and are checked
once, by ``Cluster``."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from graphopt.errors import ClusterError
from graphopt.hardware import (CALIBRATED_KIND, DEVICE_FIELDS, Calibration, Cluster, Device,
                               cluster_from_toml, cluster_to_toml, list_presets, load_cluster,
                               save_cluster)
from graphopt.hardware import topology
from graphopt.hardware.cluster import LINK_FIELDS


def same(a: Cluster, b: Cluster) -> None:
    assert (a.name, a.meta, a.overlap_latency) == (b.name, b.meta, b.overlap_latency)
    assert [d.name for d in a.devices] == [d.name for d in b.devices]
    for x, y in zip(a.devices, b.devices):
        for f in Device.__dataclass_fields__:
            u, v = getattr(x, f), getattr(y, f)
            if f == "peak_flops":
                assert u.keys() == v.keys() and np.allclose(list(u.values()), list(v.values()),
                                                            rtol=1e-12)
            elif isinstance(u, float):
                assert u == pytest.approx(v, rel=1e-12), f
            elif f == "wake_cost":
                assert np.allclose(u, v, rtol=1e-12, atol=0) and len(u) == len(v)
            else:
                assert u == v, f
    assert np.allclose(a.bandwidth, b.bandwidth, rtol=1e-12)
    assert np.allclose(a.latency, b.latency, rtol=1e-12, atol=0)


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_round_trips(preset):
    c = load_cluster(preset)
    back = cluster_from_toml(tomllib.loads(cluster_to_toml(c)), "x.toml")
    same(c, back)
    assert back.calibration is None and c.calibration is None


def _calibration(devices: int = 2) -> Calibration:
    return Calibration(devices, 1, 5.7e-4, 1.3e9, 6.5e-6, 5.1e10, 9.9e9,
                       {4: 1.2e-4, 4 << 20: 3.3e-3}, 1.0034, 2.1e-10, 2.25e-4,
                       ((1.05e-4, 0.0), (3.9e-4, 0.0), (1.01e-2, 4.08e-4)), "2026-11-29")


@pytest.mark.parametrize("devices", [1, 2, 3])
def test_a_calibrated_cluster_round_trips_with_what_was_measured(tmp_path, devices):
    cal = _calibration(devices)
    c = cal.cluster(2.0**33, {"description": "this machine", "sources": ["graphopt calibrate"]})
    assert c.calibration is cal and c.devices[0].kind == CALIBRATED_KIND and c.overlap_latency
    back = load_cluster(str(save_cluster(c, tmp_path / "cluster.toml")))
    same(c, back)
    got = back.calibration
    assert got is not None
    for f in Calibration.__dataclass_fields__:
        want, have = getattr(cal, f), getattr(got, f)
        if f == "pingpong":
            assert have.keys() == (want.keys() if devices > 1 else want.keys())
            assert np.allclose(list(have.values()), list(want.values()), rtol=1e-12)
        elif f in ("latency", "bandwidth") and devices == 1:
            continue  # one device has no link
        elif isinstance(want, float):
            assert have == pytest.approx(want, rel=1e-12), f
        elif f == "wake_cost":
            assert np.allclose(have, want, rtol=1e-12)
        else:
            assert have == want, f
    # written twice, the same text
    assert cluster_to_toml(back) == cluster_to_toml(load_cluster(str(tmp_path / "cluster.toml")))


def test_an_older_calibrated_file_still_loads_as_calibrated():
    """Files 'graphopt calibrate' wrote before the [calibration] table: the device kind
    says what they are."""
    text = f'''name = "calibrated-cpu"
[[devices]]
kind = "{CALIBRATED_KIND}"
count = 2
prefix = "cpu"
peak_tflops = {{ float32 = 0.05 }}
vector_tflops = 0.05
mem_gbps = 9.9
memory_gib = 8
launch_overhead_us = 0
dispatch_overhead_us = 6.5
shared_slowdown = 1.0034
transfer_cpu_us = 225
wake_cost_us = [[104.656, 0], [10132.7, 408.36]]
[topology]
type = "all_to_all"
link_gbps = 1.3
latency_us = 576
overlap_latency = true
'''
    c = cluster_from_toml(tomllib.loads(text), "old.toml")
    cal = c.calibration
    assert cal is not None and cal.devices == 2 and cal.cores_per_device == 0 and cal.pingpong == {}
    assert cal.latency == pytest.approx(576e-6) and cal.bandwidth == pytest.approx(1.3e9)
    assert cal.dispatch == pytest.approx(6.5e-6) and cal.transfer_cpu == 0.0
    assert cal.wake_cost == c.devices[0].wake_cost
    # a preset is no calibration
    assert load_cluster("cpu:2").calibration is None


def test_the_calibration_table_is_checked():
    base = cluster_to_toml(_calibration().cluster(2.0**33))
    lines = base.splitlines()
    for bad, key in (('pingpong_us = "abc"', "pingpong_us"), ("pingpong_us = [[4, -1]]", "pingpong_us"),
                     ("cores_per_device = -1", "cores_per_device"), ("speed = 3", "speed")):
        text = "\n".join(bad if x.startswith(key) else x for x in lines) + (
            f"\n{bad}\n" if key == "speed" else "\n")
        with pytest.raises(ClusterError, match=f"c.toml.*{key}"):
            cluster_from_toml(tomllib.loads(text), "c.toml")


PRESET = """name = "x"
[[devices]]
kind = "k"
count = 2
prefix = "cpu"
peak_tflops = { float32 = 1 }
vector_tflops = 1
mem_gbps = 100
memory_gib = 16
%s
[topology]
type = "all_to_all"
link_gbps = %s
latency_us = %s
"""


def _load(tmp_path, device: str = "", gbps: str = "10", us: str = "1"):
    path = tmp_path / "c.toml"
    path.write_text(PRESET % (device, gbps, us))
    return load_cluster(str(path))


@pytest.mark.parametrize("device, gbps, us, key", [
    ("", "1e-12", "1", "link_gbps"),          # a link of a thousandth of a byte a second
    ("", "10", "3.6e9", "latency_us"),        # a latency of an hour
    ("", "10", "nan", "latency_us"),
    ("shared_slowdown = 1e300", "10", "1", "shared_slowdown"),
    ("shared_slowdown = 0.5", "10", "1", "shared_slowdown"),
    ("launch_overhead_us = 1e12", "10", "1", "launch_overhead_us"),
    ("dispatch_overhead_us = -1", "10", "1", "dispatch_overhead_us"),
    ("transfer_cpu_gbps = 1e-9", "10", "1", "transfer_cpu_gbps"),
    ("transfer_cpu_us = inf", "10", "1", "transfer_cpu_us"),
    ("wake_cost_us = [[1e12, 5]]", "10", "1", "wake_cost_us"),
    ("wake_cost_us = [[100, 1e9]]", "10", "1", "wake_cost_us"),
])
def test_a_file_out_of_range_is_refused_naming_file_and_key(tmp_path, device, gbps, us, key):
    with pytest.raises(ClusterError, match=f"c.toml.*{key}"):
        _load(tmp_path, device, gbps, us)


@pytest.mark.parametrize("key, value", [("peak_tflops", "{ float32 = 1e9 }"),
                                        ("vector_tflops", "1e-9"), ("mem_gbps", "1e-12"),
                                        ("memory_gib", "1e12")])
def test_the_required_figures_are_refused_out_of_range(tmp_path, key, value):
    text = PRESET % ("", "10", "1")
    line = next(x for x in text.splitlines() if x.startswith(key + " "))
    (tmp_path / "c.toml").write_text(text.replace(line, f"{key} = {value}"))
    with pytest.raises(ClusterError, match=f"c.toml.*{key}"):
        load_cluster(str(tmp_path / "c.toml"))


def test_the_range_table_bounds_every_device_field_and_its_ends_are_accepted(tmp_path):
    """One row per numeric field of Device; each row's ends load, and the presets lie
    inside the table."""
    numeric = {f for f, v in Device.__dataclass_fields__.items() if f not in ("name", "kind", "host")}
    assert {f.attr for f in DEVICE_FIELDS} == numeric
    assert {f.attr for f in LINK_FIELDS} == {"bandwidth", "latency"}
    for f in DEVICE_FIELDS + LINK_FIELDS:
        assert f.ok(f.lo) and f.ok(f.hi) and not f.ok(float("nan")) and f.help
    assert _load(tmp_path, "shared_slowdown = 1000\ntransfer_cpu_gbps = inf", "1e6", "1e6")
    for name in list_presets():
        load_cluster(name)


def test_a_cluster_built_in_code_is_checked_the_same_way():
    dev = Device("d:0", "k", {"float32": 1e12}, 1e12, 1e11, 1e9, shared_slowdown=1e300)
    with pytest.raises(ClusterError, match="shared_slowdown.*1e\\+300"):
        Cluster("c", (dev,), *topology.all_to_all(1, 1e9, 1e-6))
    ok = Device("d:0", "k", {"float32": 1e12}, 1e12, 1e11, 1e9)
    with pytest.raises(ClusterError, match="'d:0' -> 'd:1'.*latency"):
        Cluster("c", (ok, Device("d:1", "k", {"float32": 1e12}, 1e12, 1e11, 1e9)),
                *topology.all_to_all(2, 1e9, 7200.0))


def test_a_cluster_the_schema_cannot_hold_is_refused_before_writing():
    devs = (Device("a", "k", {"float32": 1e12}, 1e12, 1e11, 1e9),)
    with pytest.raises(ClusterError, match="PREFIX:N"):
        cluster_to_toml(Cluster("c", devs, *topology.all_to_all(1, 1e9, 1e-6)))


@pytest.mark.parametrize("host", ["", "h"])
def test_a_programs_figures_in_one_pass_equal_the_three_steps(host):
    """engine_problem sets dispatch, shared slowdown and wake costs in one new cluster;
    the same devices, bit for bit, as the three with_* steps it replaced."""
    from dataclasses import replace

    c = _calibration().cluster(2.0**33)
    c = c._with_devices(replace(d, host=host) for d in c.devices)
    wake = ((1e-4, 2e-5), (3e-3, 1e-4))
    steps = c.with_shared_slowdown(1.2).with_wake_cost(wake).with_dispatch(3.3e-6)
    once = c.with_program_figures(3.3e-6, 1.2, wake)
    assert once.devices == steps.devices and once.calibration is c.calibration
    assert c.with_program_figures(3.3e-6).devices == c.with_dispatch(3.3e-6).devices
