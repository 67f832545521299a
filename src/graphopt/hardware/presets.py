"""Cluster presets: TOML files beside this module, loaded by name as ``NAME[:COUNT]``.

A preset file names its sources (datasheets, system whitepapers). Units in the files
are the ones datasheets use: TFLOP/s, GB/s (10^9 bytes/s), GiB, microseconds.
"""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from graphopt.errors import ClusterError
from graphopt._files import regular_file
from graphopt.hardware import topology
from graphopt.hardware.cluster import Cluster, Device, wake_pairs_ok

__all__ = ["MAX_DEVICES", "cluster_from_toml", "list_presets", "load_cluster"]

_GB, _GIB, _T, _US = 1e9, float(2**30), 1e12, 1e-6

#: The most devices a cluster file may declare: link matrices grow as its square.
MAX_DEVICES = 1024
#: The largest cluster file read: a preset is a few hundred bytes, and tomllib holds the
#: whole text and its parse in memory.
MAX_FILE_BYTES = 1 << 20


def _preset_dir():
    return resources.files("graphopt.hardware") / "presets"


def list_presets() -> list[str]:
    """Names of the built-in presets."""
    return sorted(p.name[:-5] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))


def load_cluster(spec: str) -> Cluster:
    """Load a cluster from ``NAME[:COUNT]``: a built-in preset or a path to a TOML file.

    ``COUNT`` takes the first COUNT devices and the links among them.

    Raises
    ------
    ClusterError
        Unknown preset (the message lists the known ones), a bad count, or a malformed file.

    Examples
    --------
    >>> load_cluster("h100:2").name
    'h100:2'
    """
    name, count = spec, None
    if ":" in spec and not spec.endswith(".toml"):  # a file's name may hold a colon
        name, _, c = spec.rpartition(":")
        try:
            count = int(c)
        except ValueError:
            raise ClusterError(f"cluster {spec!r}: device count {c!r} is not an integer "
                               "(expected NAME[:COUNT], e.g. dgx1-v100:4)") from None
    path = Path(name)
    if name.endswith(".toml"):
        size = regular_file(path, ClusterError)
        if size > MAX_FILE_BYTES:
            raise ClusterError(f"cluster file {name!r}: {size:,} bytes, more than "
                               f"{MAX_FILE_BYTES:,} (graphopt.hardware.presets.MAX_FILE_BYTES)")
        try:
            text, source = path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as err:
            raise ClusterError(f"cluster file {name!r}: cannot read it as UTF-8 TOML ({err})") \
                from None
    else:
        f = _preset_dir() / f"{name}.toml"
        if not f.is_file() or name != Path(name).name or name.startswith("."):
            raise ClusterError(f"unknown cluster preset {name!r}; known presets: "
                               f"{', '.join(list_presets())} (or give a path to a .toml file)")
        text, source = f.read_text(), f"preset {name}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ClusterError(f"{source}: invalid TOML ({err})") from err
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ClusterError(f"{source}: invalid TOML (nested too deeply)") from None
    try:
        cluster = cluster_from_toml(data, source)
    except (TypeError, ValueError, AttributeError) as err:  # a field of the wrong type
        raise ClusterError(f"{source}: malformed value ({err})") from None
    except ClusterError as err:  # the cluster's own checks name the device, not the file
        if str(err).startswith(source):
            raise
        raise ClusterError(f"{source}: {err}") from None
    if count is not None:
        cluster = cluster.take(count)
    return cluster


def _get(d: dict, key: str, source: str, kind: type = float) -> Any:
    if key not in d:
        raise ClusterError(f"{source}: missing key {key!r}")
    v = d[key]
    # TOML values are typed: take them as written (int(1.5) or str(7) would hide a typo)
    ok = isinstance(v, kind) and not isinstance(v, bool)
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        ok, v = True, float(v)
    if not ok:
        what = {float: "a number", int: "an integer", str: "a string"}[kind]
        raise ClusterError(f"{source}: key {key!r} = {v!r} is not {what}")
    return v


def _opt(d: dict, key: str, source: str, default: Any, kind: type = float) -> Any:
    """``d[key]`` checked as :func:`_get` checks it, or ``default`` when it is absent."""
    return _get(d, key, source, kind) if key in d else default


#: The keys a cluster file may hold, per table: any other is a typo, which would
#: otherwise leave its value at the default unseen.
_KEYS = {
    "": {"name", "description", "sources", "devices", "topology"},
    "[[devices]]": {"kind", "count", "prefix", "peak_tflops", "vector_tflops", "mem_gbps", "memory_gib",
                    "launch_overhead_us", "dispatch_overhead_us", "shared_slowdown", "transfer_cpu_gbps",
                    "transfer_cpu_us", "wake_cost_us"},
    "[topology]": {"type", "link_gbps", "latency_us", "per_switch", "root_gbps", "dims", "links",
                   "fallback_gbps", "fallback_latency_us", "overlap_latency"},
}


def _known_keys(table: Any, where: str, source: str) -> None:
    if not isinstance(table, dict):
        raise ClusterError(f"{source}: {where or 'the file'} is not a table")
    unknown = sorted(set(table) - _KEYS[where])
    if unknown:
        raise ClusterError(f"{source}: {where or 'top level'}: unknown key {unknown[0]!r}; expected "
                           f"one of {', '.join(sorted(_KEYS[where]))}")


def cluster_from_toml(data: dict, source: str = "<toml>") -> Cluster:
    """Build a :class:`Cluster` from a parsed preset (see the files in ``presets/``)."""
    devices: list[Device] = []
    _known_keys(data, "", source)
    _known_keys(data.get("topology", {}), "[topology]", source)
    groups = data.get("devices")
    if not isinstance(groups, list) or not groups:
        raise ClusterError(f"{source}: needs at least one [[devices]] table")
    for table, g in enumerate(groups):
        _known_keys(g, "[[devices]]", source)
        count = _get(g, "count", source, int)
        if not 1 <= count <= MAX_DEVICES - len(devices):
            raise ClusterError(f"{source}: [[devices]] count = {count}; expected 1..{MAX_DEVICES} "
                               "devices in all (graphopt.hardware.presets.MAX_DEVICES)")
        slowdown = _get(g, "shared_slowdown", source) if "shared_slowdown" in g else 1.0
        if not 1.0 <= slowdown < np.inf:
            raise ClusterError(f"{source}: [[devices]] {g.get('kind')!r}: key 'shared_slowdown' "
                               f"= {slowdown!r}; expected a finite number >= 1")
        xcpu = _get(g, "transfer_cpu_gbps", source) * _GB if "transfer_cpu_gbps" in g else np.inf
        if not xcpu > 0:
            raise ClusterError(f"{source}: [[devices]] {g.get('kind')!r}: key 'transfer_cpu_gbps' "
                               f"= {xcpu / _GB!r}; expected a positive number")
        xmsg = _get(g, "transfer_cpu_us", source) * _US if "transfer_cpu_us" in g else 0.0
        if not 0 <= xmsg < np.inf:
            raise ClusterError(f"{source}: [[devices]] {g.get('kind')!r}: key 'transfer_cpu_us' "
                               f"= {xmsg / _US!r}; expected a number >= 0")
        wake = g.get("wake_cost_us", [])
        if not wake_pairs_ok(wake):
            raise ClusterError(f"{source}: [[devices]] {g.get('kind')!r}: key 'wake_cost_us' = "
                               f"{wake!r}; expected [[idle, extra], ...] in microseconds, idle > 0 "
                               "and increasing, extra >= 0")
        prefix = _opt(g, "prefix", source, "gpu", str)
        peaks = g.get("peak_tflops", {})
        if not isinstance(peaks, dict) or not peaks:
            raise ClusterError(f"{source}: [[devices]] {g.get('kind')!r} needs a peak_tflops table")
        peak_flops = {k: _get(peaks, k, source) * _T for k in peaks}
        start = sum(1 for d in devices if d.name.startswith(prefix + ":"))
        for i in range(count):
            devices.append(Device(
                name=f"{prefix}:{start + i}", kind=str(_get(g, "kind", source, str)),
                peak_flops=dict(peak_flops),
                vector_flops=_get(g, "vector_tflops", source) * _T,
                mem_bw=_get(g, "mem_gbps", source) * _GB,
                memory=_get(g, "memory_gib", source) * _GIB,
                launch_overhead=_opt(g, "launch_overhead_us", source, 5.0) * _US,
                dispatch_overhead=_opt(g, "dispatch_overhead_us", source, 0.0) * _US,
                # one table, one host: its shared_slowdown applies among its devices
                host=f"devices[{table}]", shared_slowdown=slowdown, transfer_cpu_bw=xcpu,
                transfer_cpu_overhead=xmsg,
                wake_cost=tuple((i * _US, c * _US) for i, c in wake)))
    n = len(devices)
    t = data.get("topology", {})
    kind = t.get("type")
    bw = _get(t, "link_gbps", source) * _GB
    lat = _get(t, "latency_us", source) * _US
    if kind == "all_to_all":
        mats = topology.all_to_all(n, bw, lat)
    elif kind == "pcie_tree":
        per_switch = _opt(t, "per_switch", source, 2, int)
        if per_switch < 1:
            raise ClusterError(f"{source}: [topology] per_switch = {per_switch}; expected >= 1")
        mats = topology.pcie_tree(n, bw, lat, per_switch, _opt(t, "root_gbps", source, bw / _GB) * _GB)
    elif kind == "ring":
        mats = topology.ring(n, bw, lat)
    elif kind == "torus":
        dims = t.get("dims", [n])
        if not isinstance(dims, list) or not dims or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in dims):
            raise ClusterError(f"{source}: [topology] dims = {dims!r}; expected a list of whole "
                               "numbers >= 1")
        dims = tuple(dims)
        if math.prod(dims) != n:
            raise ClusterError(f"{source}: torus dims {dims} do not hold {n} devices")
        mats = topology.torus(dims, bw, lat)
    elif kind == "links":
        links = np.asarray(t.get("links", []), dtype=float)
        if links.shape != (n, n):
            raise ClusterError(f"{source}: links must be a {n}x{n} matrix, got shape {links.shape}")
        if not (np.isfinite(links).all() and (links >= 0).all() and (links == links.round()).all()):
            raise ClusterError(f"{source}: links must count links between devices (whole "
                               "numbers >= 0)")
        if not ((links == links.T).all() and (np.diag(links) == 0).all()):
            raise ClusterError(f"{source}: links must be symmetric (a link joins two devices) with "
                               "zeros on the diagonal")
        mats = topology.link_matrix(links, bw, lat, _get(t, "fallback_gbps", source) * _GB,
                                    _get(t, "fallback_latency_us", source) * _US)
    elif kind == "host":
        mats = topology.host_star(n, bw, lat)
    else:
        raise ClusterError(f"{source}: topology type {kind!r} is not one of "
                           "all_to_all, pcie_tree, ring, torus, links, host")
    overlap = t.get("overlap_latency", False)
    if not isinstance(overlap, bool):
        raise ClusterError(f"{source}: [topology] overlap_latency = {overlap!r}; expected true "
                           "or false")
    return Cluster(_opt(data, "name", source, "cluster", str), tuple(devices), mats[0], mats[1],
                   {"description": data.get("description", ""),
                    "sources": list(data.get("sources", []))}, overlap)
