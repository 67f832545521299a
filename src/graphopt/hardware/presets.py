"""Cluster presets: TOML files beside this module, loaded by name as ``NAME[:COUNT]``.

A preset file names its sources (datasheets, system whitepapers). Units in the files
are the ones datasheets use: TFLOP/s, GB/s (10^9 bytes/s), GiB, microseconds.
"""

from __future__ import annotations

import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from graphopt.errors import ClusterError
from graphopt._files import atomic_write, regular_file
from graphopt.hardware import topology
from graphopt.hardware.cluster import (CALIBRATED_KIND, DEVICE_FIELDS, LINK_FIELDS, Calibration,
                                       Cluster, Device)

__all__ = ["MAX_DEVICES", "cluster_from_toml", "cluster_to_toml", "list_presets", "load_cluster",
           "save_cluster"]

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
        digits = c.removeprefix("-")  # a negative count gets the range's message below
        if not (digits.isascii() and digits.isdigit()):  # int() also reads '٢', ' 2' and '+2'
            raise ClusterError(f"cluster {spec!r}: device count {c!r} is not an integer "
                               "(expected NAME[:COUNT], e.g. dgx1-v100:4)")
        count = int(c)
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
    "": {"name", "description", "sources", "devices", "topology", "calibration"},
    "[[devices]]": {"kind", "count", "prefix", "peak_tflops", "vector_tflops", "mem_gbps", "memory_gib",
                    "launch_overhead_us", "dispatch_overhead_us", "shared_slowdown", "transfer_cpu_gbps",
                    "transfer_cpu_us", "wake_cost_us"},
    "[topology]": {"type", "link_gbps", "latency_us", "per_switch", "root_gbps", "dims", "links",
                   "fallback_gbps", "fallback_latency_us", "overlap_latency"},
    "[calibration]": {"cores_per_device", "pingpong_us", "date"},
}


#: The device figures a ``[[devices]]`` table must give (the others have defaults).
_REQUIRED = ("vector_flops", "mem_bw", "memory")


def _known_keys(table: Any, where: str, source: str) -> None:
    if not isinstance(table, dict):
        raise ClusterError(f"{source}: {where or 'the file'} is not a table")
    unknown = sorted(set(table) - _KEYS[where])
    if unknown:
        raise ClusterError(f"{source}: {where or 'top level'}: unknown key {unknown[0]!r}; expected "
                           f"one of {', '.join(sorted(_KEYS[where]))}")


def cluster_from_toml(data: dict, source: str = "<toml>") -> Cluster:
    """Build a :class:`Cluster` from a parsed cluster file (see the files in ``presets/``;
    :func:`cluster_to_toml` writes one). Types and the schema are checked here, the
    ranges of the numbers once, by :class:`Cluster` (:data:`~graphopt.hardware.cluster.DEVICE_FIELDS`);
    every error names ``source``."""
    try:
        return _from_toml(data, source)
    except ClusterError as err:  # the cluster's own checks name the device, not the file
        if str(err).startswith(source):
            raise
        raise ClusterError(f"{source}: {err}") from None


def _scaled_pairs(pairs: Any, scale: float) -> Any:
    """``[[idle, extra], ...]`` in the file's unit, scaled; anything else as it is, for
    the cluster's check to refuse."""
    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    if isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 and number(p[0])
                                       and number(p[1]) for p in pairs):
        return tuple((i * scale, c * scale) for i, c in pairs)
    return pairs


def _from_toml(data: dict, source: str) -> Cluster:
    devices: list[Device] = []
    _known_keys(data, "", source)
    _known_keys(data.get("topology", {}), "[topology]", source)
    groups = data.get("devices")
    if not isinstance(groups, list) or not groups:
        raise ClusterError(f"{source}: needs at least one [[devices]] table")
    scale = {f.attr: f.scale for f in DEVICE_FIELDS}
    for table, g in enumerate(groups):
        _known_keys(g, "[[devices]]", source)
        count = _get(g, "count", source, int)
        if not 1 <= count <= MAX_DEVICES - len(devices):
            raise ClusterError(f"{source}: [[devices]] count = {count}; expected 1..{MAX_DEVICES} "
                               "devices in all (graphopt.hardware.presets.MAX_DEVICES)")
        prefix = _opt(g, "prefix", source, "gpu", str)
        peaks = g.get("peak_tflops", {})
        if not isinstance(peaks, dict) or not peaks:
            raise ClusterError(f"{source}: [[devices]] {g.get('kind')!r} needs a peak_tflops table")
        peak_flops = {k: _get(peaks, k, source) * scale["peak_flops"] for k in peaks}
        figures = {f.attr: _get(g, f.key, source) * f.scale for f in DEVICE_FIELDS
                   if (f.key in g or f.attr in _REQUIRED) and f.attr not in ("peak_flops", "wake_cost")}
        figures.setdefault("launch_overhead", 5.0 * scale["launch_overhead"])
        start = sum(1 for d in devices if d.name.startswith(prefix + ":"))
        for i in range(count):
            devices.append(Device(
                name=f"{prefix}:{start + i}", kind=str(_get(g, "kind", source, str)),
                peak_flops=dict(peak_flops), **figures,
                # one table, one host: its shared_slowdown applies among its devices
                host=f"devices[{table}]",
                wake_cost=_scaled_pairs(g.get("wake_cost_us", []), scale["wake_cost"])))
    n = len(devices)
    t = data.get("topology", {})
    kind = t.get("type")
    if kind != "matrix":  # one link's figures, spread by the topology
        # one device has no link: cluster_to_toml writes it link_gbps = inf
        alone = n == 1 and _get(t, "link_gbps", source) == np.inf
        bw = np.inf if alone else _link_figure(t, "link_gbps", source)
        lat = _link_figure(t, "latency_us", source)
    if kind == "matrix":  # every ordered pair's own (what cluster_to_toml writes)
        mats = tuple(_matrix(t, key, n, source) * unit for key, unit in (("link_gbps", _GB),
                                                                        ("latency_us", _US)))
    elif kind == "all_to_all":
        mats = topology.all_to_all(n, bw, lat)
    elif kind == "pcie_tree":
        per_switch = _opt(t, "per_switch", source, 2, int)
        if not 1 <= per_switch <= MAX_DEVICES:
            raise ClusterError(f"{source}: [topology] per_switch = {per_switch}; expected "
                               f"1..{MAX_DEVICES}")
        root = _link_figure(t, "root_gbps", source) if "root_gbps" in t else bw
        mats = topology.pcie_tree(n, bw, lat, per_switch, root)
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
        mats = topology.link_matrix(links, bw, lat, _link_figure(t, "fallback_gbps", source),
                                    _link_figure(t, "fallback_latency_us", source))
    elif kind == "host":
        mats = topology.host_star(n, bw, lat)
    else:
        raise ClusterError(f"{source}: topology type {kind!r} is not one of "
                           "all_to_all, pcie_tree, ring, torus, links, host, matrix")
    overlap = t.get("overlap_latency", False)
    if not isinstance(overlap, bool):
        raise ClusterError(f"{source}: [topology] overlap_latency = {overlap!r}; expected true "
                           "or false")
    sources = data.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(x, str) for x in sources):
        raise ClusterError(f"{source}: sources = {sources!r}; expected a list of strings")
    cluster = Cluster(_opt(data, "name", source, "cluster", str), tuple(devices), mats[0], mats[1],
                      {"description": _opt(data, "description", source, "", str),
                       "sources": list(sources)}, overlap)
    cal = data.get("calibration")
    if cal is None and any(d.kind == CALIBRATED_KIND for d in devices):
        cal = {}  # a file from 'graphopt calibrate' written before it had the table
    if cal is not None:
        _known_keys(cal, "[calibration]", source)
        pingpong = cal.get("pingpong_us", [])
        if not isinstance(pingpong, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], int)
                and isinstance(p[1], int | float) and not isinstance(p[1], bool)
                and 0 < p[0] <= MAX_PINGPONG_BYTES and 0 <= p[1] <= MAX_PINGPONG_US
                for p in pingpong):
            raise ClusterError(f"{source}: [calibration] pingpong_us = {pingpong!r}; expected "
                               f"[[bytes, microseconds], ...], bytes 1..2^50, microseconds "
                               f"0..{MAX_PINGPONG_US:g} (an hour)")
        cores = _opt(cal, "cores_per_device", source, 0, int)
        if not 0 <= cores <= 1 << 16:
            raise ClusterError(f"{source}: [calibration] cores_per_device = {cores}; expected "
                               f"0..{1 << 16}")
        calibration = Calibration.of(cluster, cores, {b: us * _US for b, us in pingpong},
                                     _opt(cal, "date", source, "", str))
        cluster = Cluster(cluster.name, cluster.devices, cluster.bandwidth, cluster.latency,
                          cluster.meta, cluster.overlap_latency, calibration)
    return cluster


#: The ``[topology]`` keys of one link's figures and the range each is checked against
#: (a link's, :data:`~graphopt.hardware.cluster.LINK_FIELDS`), where the file names them:
#: a fallback or root figure of a pair that no link of the cluster uses was never checked,
#: and one that was got the message of ``link_gbps``.
_LINK_KEYS = {"link_gbps": "bandwidth", "root_gbps": "bandwidth", "fallback_gbps": "bandwidth",
              "latency_us": "latency", "fallback_latency_us": "latency"}

#: The largest message (bytes) and time (microseconds, an hour) of a calibration's
#: ``pingpong_us`` row.
MAX_PINGPONG_BYTES = 2**50
MAX_PINGPONG_US = 3.6e9


def _link_figure(t: dict, key: str, source: str) -> float:
    """``[topology] key`` in SI units (bytes/s, seconds), in a link's range."""
    field = next(f for f in LINK_FIELDS if f.attr == _LINK_KEYS[key])
    v = _get(t, key, source)
    if not field.ok(v * field.scale):
        raise ClusterError(f"{source}: [topology] {key} = {v!r} {field.unit}; expected "
                           f"{field.lo / field.scale:g}..{field.hi / field.scale:g} {field.unit} "
                           f"({field.help})")
    return v * field.scale


def _matrix(t: dict, key: str, n: int, source: str) -> np.ndarray:
    """``[topology] key``, an n x n matrix of numbers (``type = "matrix"``)."""
    m = t.get(key)
    try:
        a = np.asarray(m, dtype=np.float64)
    except (TypeError, ValueError):
        a = np.zeros(0)
    if a.shape != (n, n) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                    for row in m for v in row):
        raise ClusterError(f"{source}: [topology] {key} must be a {n}x{n} matrix of numbers for "
                           "type = \"matrix\"")
    return a


def _number(v: float) -> str:
    """A TOML float that reads back as ``v``."""
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(v))


def _string(v: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    import json

    return json.dumps(v, ensure_ascii=False)


def cluster_to_toml(cluster: Cluster) -> str:
    """The cluster file of ``cluster``, the schema :func:`cluster_from_toml` reads:
    devices that differ only in their number share a ``[[devices]]`` table (one table,
    one host), links are ``all_to_all`` where every pair has the same bandwidth and
    latency and else ``type = "matrix"``, and a calibrated cluster's ``[calibration]``
    table keeps what its devices do not (cores per device, ping-pong times, date).

    Raises
    ------
    ClusterError
        A cluster the schema cannot hold: device names that are not ``PREFIX:N``
        numbered in order per prefix.
    """
    fields = {f.attr: f for f in DEVICE_FIELDS}
    groups: list[list[Device]] = []
    seen: dict[str, int] = {}
    for d in cluster.devices:
        prefix, _, num = d.name.rpartition(":")
        if not prefix or num != str(seen.get(prefix, 0)):
            raise ClusterError(f"cluster {cluster.name!r}: device {d.name!r}: a cluster file "
                               "names devices PREFIX:N, numbered from 0 per prefix")
        seen[prefix] = seen.get(prefix, 0) + 1
        last = groups[-1][-1] if groups else None
        if last is not None and last.name.rpartition(":")[0] == prefix and last.host == d.host \
                and _same(last, d):
            groups[-1].append(d)
        else:
            groups.append([d])
    lines = [f"name = {_string(cluster.name)}"]
    if cluster.meta.get("description"):
        lines.append(f"description = {_string(cluster.meta['description'])}")
    lines += ["sources = [", *(f"  {_string(s)}," for s in cluster.meta.get("sources", [])), "]"]
    for g in groups:
        d = g[0]

        def key(attr: str, v: float) -> str:
            f = fields[attr]
            return f"{f.key} = {_number(v / f.scale)}"

        peaks = ", ".join(f"{_string(k)} = {_number(v / fields['peak_flops'].scale)}"
                          for k, v in d.peak_flops.items())
        lines += ["", "[[devices]]", f"kind = {_string(d.kind)}", f"count = {len(g)}",
                  f"prefix = {_string(d.name.rpartition(':')[0])}", f"peak_tflops = {{ {peaks} }}",
                  *(key(a, getattr(d, a)) for a in ("vector_flops", "mem_bw", "memory",
                                                    "launch_overhead", "dispatch_overhead",
                                                    "shared_slowdown", "transfer_cpu_bw",
                                                    "transfer_cpu_overhead"))]
        if d.wake_cost:
            us = fields["wake_cost"].scale
            lines.append("wake_cost_us = [" + ", ".join(
                f"[{_number(i / us)}, {_number(c / us)}]" for i, c in d.wake_cost) + "]")
    n = cluster.num_devices
    off = ~np.eye(n, dtype=bool)
    bw, lat = cluster.bandwidth[off], cluster.latency[off]
    lines += ["", "[topology]"]
    if n == 1 or ((bw == bw[0]).all() and (lat == lat[0]).all()):
        lines += ['type = "all_to_all"', f"link_gbps = {_number(bw[0] / _GB if n > 1 else np.inf)}",
                  f"latency_us = {_number(lat[0] / _US if n > 1 else 0.0)}"]
    else:
        def rows(m: np.ndarray, unit: float) -> str:
            return "[" + ", ".join("[" + ", ".join(
                _number(m[i, j] / unit if i != j else 0.0) for j in range(n)) + "]"
                for i in range(n)) + "]"

        lines += ['type = "matrix"', f"link_gbps = {rows(cluster.bandwidth, _GB)}",
                  f"latency_us = {rows(cluster.latency, _US)}"]
    if cluster.overlap_latency:
        lines += ["# many messages queued on one link: their latencies overlap",
                  "overlap_latency = true"]
    cal = cluster.calibration
    if cal is not None:
        lines += ["", "[calibration]", f"cores_per_device = {cal.cores_per_device}",
                  "pingpong_us = [" + ", ".join(f"[{b}, {_number(t / _US)}]"
                                                for b, t in sorted(cal.pingpong.items())) + "]",
                  f"date = {_string(cal.date)}"]
    return "\n".join(lines) + "\n"


def _same(a: Device, b: Device) -> bool:
    """Whether two devices differ in their name only."""
    return all(getattr(a, f) == getattr(b, f) for f in Device.__dataclass_fields__ if f != "name")


def save_cluster(cluster: Cluster, path: str | os.PathLike) -> Path:
    """Write ``cluster`` as a cluster file (:func:`cluster_to_toml`) at ``path``, whole or
    not at all; :func:`load_cluster` reads it back."""
    text = cluster_to_toml(cluster)
    atomic_write(path, lambda f: f.write(text.encode()))
    return Path(path)
