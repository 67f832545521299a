"""Devices, clusters and the links between them.

A :class:`Cluster` is a list of :class:`Device` plus, for every ordered pair of
devices, the bandwidth and latency of the path between them (docs/design.md: one directed
link per pair, carrying one transfer at a time). Topology builders in
:mod:`graphopt.hardware.topology` fill those matrices; presets in TOML files name
whole machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from graphopt.errors import ClusterError
from graphopt.hardware import topology

__all__ = ["CALIBRATED_KIND", "Calibration", "Cluster", "DEVICE_FIELDS", "Device", "Field",
           "LINK_FIELDS"]


@dataclass(frozen=True)
class Field:
    """A number of a cluster: its attribute, its key and unit in a cluster file, and the
    range a real machine can have (in SI units: FLOP/s, bytes/s, bytes, seconds)."""

    attr: str
    key: str
    unit: str
    scale: float  # the file's value times ``scale`` is the attribute's
    lo: float
    hi: float
    help: str

    def ok(self, v: float) -> bool:
        return self.lo <= v <= self.hi  # False for NaN

    def refusal(self, v: float) -> str:
        """What is wrong with ``v``, naming the attribute and the file's key and unit."""
        def f(x: float) -> str:
            return f"{x / self.scale:g}"
        return (f"{self.attr}={v!r} (a cluster file's key {self.key!r} = {f(v)} {self.unit}); "
                f"expected {f(self.lo)}..{f(self.hi)} {self.unit} ({self.help})")


_T, _G, _GIB, _US = 1e12, 1e9, float(2**30), 1e-6

#: The numeric fields of a :class:`Device`, checked once, by :class:`Cluster`; the cluster
#: file's keys, units and the ranges a real device can have (docs/execution.md, "The cluster file").
#: ``peak_flops`` applies to every dtype of the ``peak_tflops`` table.
DEVICE_FIELDS: tuple[Field, ...] = (
    Field("peak_flops", "peak_tflops", "TFLOP/s", _T, 1e6, 1e18,
          "matrix-unit peak per dtype: 1 MFLOP/s to 1 EFLOP/s"),
    Field("vector_flops", "vector_tflops", "TFLOP/s", _T, 1e6, 1e18,
          "vector-unit peak: 1 MFLOP/s to 1 EFLOP/s"),
    Field("mem_bw", "mem_gbps", "GB/s", _G, 1e6, 1e15, "memory bandwidth: 1 MB/s to 1 PB/s"),
    Field("memory", "memory_gib", "GiB", _GIB, 1.0, float(2**60),
          "memory capacity: 1 byte (the simulator's --memory-fraction may shrink it that far) "
          "to 1 EiB"),
    Field("launch_overhead", "launch_overhead_us", "us", _US, 0.0, 0.1,
          "a kernel launch: 0 to 100 ms"),
    Field("dispatch_overhead", "dispatch_overhead_us", "us", _US, 0.0, 0.1,
          "the host's cost to issue an op: 0 to 100 ms"),
    Field("shared_slowdown", "shared_slowdown", "x", 1.0, 1.0, 1000.0,
          "slowdown while every device of a host computes: 1 (none) to 1000"),
    Field("transfer_cpu_bw", "transfer_cpu_gbps", "GB/s", _G, 1e6, float("inf"),
          "bytes/s a device's core copies a transfer at: 1 MB/s to inf (free)"),
    Field("transfer_cpu_overhead", "transfer_cpu_us", "us", _US, 0.0, 0.1,
          "a device's core time per transfer: 0 to 100 ms"),
    Field("wake_cost", "wake_cost_us", "us", _US, 0.0, 60.0,
          "(idle, extra) pairs: idle > 0 and increasing, up to 60 s; extra 0 to 1 s"),
)
#: The links' fields (the ``[topology]`` keys), checked on every pair of distinct devices.
LINK_FIELDS: tuple[Field, ...] = (
    Field("bandwidth", "link_gbps", "GB/s", _G, 1e6, 1e15, "a link: 1 MB/s to 1 PB/s"),
    Field("latency", "latency_us", "us", _US, 0.0, 1.0, "a link's latency: 0 to 1 s"),
)
_WAKE_EXTRA_MAX = 1.0

#: The device kind of CPU workers measured by ``graphopt calibrate``; profiles of programs
#: use it too. A file of this kind without a ``[calibration]`` table (written before it
#: had one) is read as calibrated.
CALIBRATED_KIND = "cpu-worker"


@dataclass(frozen=True)
class Calibration:
    """What ``graphopt calibrate`` measured on this machine's CPU workers, in seconds,
    bytes and FLOP/s (:func:`graphopt.exec.calibrate.calibrate`), held by the cluster it
    made as :attr:`Cluster.calibration`; a cluster with one is simulated on the program's
    own op times (:func:`graphopt.exec.api.program_problem`).

    ``cores_per_device`` is 0 and ``pingpong`` empty for a file written before the
    cluster file kept them.
    """

    devices: int
    cores_per_device: int
    latency: float
    bandwidth: float
    dispatch: float
    matmul_flops: float
    copy_bandwidth: float
    pingpong: dict[int, float]
    shared_slowdown: float = 1.0
    transfer_cpu: float = 0.0  # seconds of a worker's core per byte it sends or receives
    transfer_overhead: float = 0.0  # ... and per message
    wake_cost: tuple[tuple[float, float], ...] = ()  # (idle, extra op seconds) pairs
    date: str = ""

    def cluster(self, memory: float, meta: dict | None = None) -> Cluster:
        """The cluster of ``devices`` CPU workers these figures describe, each with
        ``memory`` bytes: one host, links all to all whose latencies overlap (gloo queues
        many messages on one socket)."""
        devices = tuple(Device(
            f"cpu:{i}", CALIBRATED_KIND, {"float32": self.matmul_flops}, self.matmul_flops,
            self.copy_bandwidth, memory, launch_overhead=0.0, dispatch_overhead=self.dispatch,
            host="devices[0]", shared_slowdown=self.shared_slowdown,
            transfer_cpu_bw=1 / self.transfer_cpu if self.transfer_cpu > 0 else float("inf"),
            transfer_cpu_overhead=self.transfer_overhead, wake_cost=self.wake_cost)
            for i in range(self.devices))
        bw, lat = topology.all_to_all(self.devices, self.bandwidth, self.latency)
        return Cluster("calibrated-cpu", devices, bw, lat, dict(meta or {}), True, self)

    @classmethod
    def of(cls, cluster: Cluster, cores_per_device: int = 0,
           pingpong: dict[int, float] | None = None, date: str = "") -> Calibration:
        """The figures a calibrated ``cluster`` holds (its device 0 and link 0 -> 1), with
        what only the calibration keeps: the inverse of :meth:`cluster`."""
        d, n = cluster.devices[0], cluster.num_devices
        return cls(n, cores_per_device, float(cluster.latency[0, 1]) if n > 1 else 0.0,
                   float(cluster.bandwidth[0, 1]) if n > 1 else float("inf"),
                   d.dispatch_overhead, d.peak_flops.get("float32", d.vector_flops), d.mem_bw,
                   dict(pingpong or {}), d.shared_slowdown,
                   0.0 if np.isinf(d.transfer_cpu_bw) else 1 / d.transfer_cpu_bw,
                   d.transfer_cpu_overhead, d.wake_cost, date)


@dataclass(frozen=True)
class Device:
    """One accelerator or CPU.

    Parameters
    ----------
    name : str
        Unique within its cluster, e.g. ``"gpu:3"``.
    kind : str
        Hardware model, e.g. ``"V100-SXM2-16GB"``; devices of one kind share op costs.
    peak_flops : dict[str, float]
        Peak FLOP/s of dense matrix units per dtype (``"float32"``, ``"float16"``, ...).
    vector_flops : float
        Peak FLOP/s of the vector units, used for every op that is not a matrix product.
    mem_bw : float
        Memory bandwidth in bytes/s.
    memory : float
        Memory capacity in bytes.
    launch_overhead : float
        Seconds a kernel launch costs on top of its work.
    dispatch_overhead : float
        Seconds the host pays to issue any op, a view included, before its kernel: the
        Python and dispatcher cost of an eager framework (0 for a compiled program).
    host : str
        Devices with the same non-empty ``host`` share one machine's cores and memory
        bandwidth, and slow each other down while they compute (``shared_slowdown``);
        ``""``: the device shares nothing.
    shared_slowdown : float
        How much slower each kernel runs while every device of its host computes at
        once than while it computes alone (>= 1; 1: no slowdown). With k of a host's
        c devices busy, each runs at speed ``1 / (1 + (shared_slowdown - 1) * (k - 1)
        / (c - 1))``.
    transfer_cpu_bw : float
        Bytes/s at which the device's own core sends or receives a transfer's bytes:
        worker processes that move tensors through sockets copy them on their cores
        while the bytes are in flight, taking that time from what the device runs then
        (nothing where it is idle; the link's own time already includes the copies).
        ``inf`` (every preset): transfers cost the device nothing.
    transfer_cpu_overhead : float
        Seconds of the device's own core per transfer it sends or receives, whatever
        its size (posting, packing, waking the receiving thread); 0 in every preset.
    wake_cost : tuple of (float, float)
        ``(idle, extra)`` pairs, idle increasing: a kernel takes ``extra`` seconds beyond
        its own time when the device sat idle for ``idle`` seconds before it; linear in
        the idle time between pairs (and from 0 at no idle), the last ``extra`` beyond
        the last pair. A core that waits for a value loses what it had in its caches to
        whatever runs in the meantime (measured by
        :func:`graphopt.exec.calibrate.wake_cost`). ``()`` (every preset): waiting costs
        nothing.
    """

    name: str
    kind: str
    peak_flops: dict[str, float]
    vector_flops: float
    mem_bw: float
    memory: float
    launch_overhead: float = 5e-6
    dispatch_overhead: float = 0.0
    host: str = ""
    shared_slowdown: float = 1.0
    transfer_cpu_bw: float = float("inf")
    transfer_cpu_overhead: float = 0.0
    wake_cost: tuple[tuple[float, float], ...] = ()

    def matrix_flops(self, dtype: str) -> float:
        """Peak matrix FLOP/s for ``dtype``; falls back to float32, then to the vector peak."""
        p = self.peak_flops
        if dtype in p:
            return p[dtype]
        alias = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "tfloat32": "float32"}
        return p.get(alias.get(dtype, ""), p.get("float32", self.vector_flops))


@dataclass(frozen=True, eq=False)
class Cluster:
    """Devices and the directed links between them.

    Parameters
    ----------
    name : str
        e.g. ``"dgx1-v100:4"``.
    devices : tuple of Device
    bandwidth : float array, shape (D, D)
        Bytes/s from device i to device j (the diagonal is ignored).
    latency : float array, shape (D, D)
        Seconds of latency from device i to device j.
    overlap_latency : bool
        False (docs/design.md, every preset): a link carries one transfer at a time for
        ``latency + bytes / bandwidth``. True: it is busy for ``bytes / bandwidth`` only,
        and the tensor arrives ``latency`` later, so the latencies of transfers in
        flight overlap, as messages queued on one socket do (worker processes).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> c = load_cluster("dgx1-v100:4")
    >>> c.num_devices, c.devices[0].kind
    (4, 'V100-SXM2-16GB')
    """

    name: str
    devices: tuple[Device, ...]
    bandwidth: np.ndarray
    latency: np.ndarray
    meta: dict = field(default_factory=dict)
    overlap_latency: bool = False
    calibration: Calibration | None = None

    def __post_init__(self) -> None:
        d = len(self.devices)
        if d == 0:
            raise ClusterError(f"cluster {self.name!r} has no devices")
        names = [x.name for x in self.devices]
        if len(set(names)) != d:
            raise ClusterError(f"cluster {self.name!r}: device names repeat: {names}")
        off = ~np.eye(d, dtype=bool)
        for f in LINK_FIELDS:
            a = np.array(getattr(self, f.attr), dtype=np.float64)
            if a.shape != (d, d):
                raise ClusterError(f"cluster {self.name!r}: {f.attr} has shape {a.shape}, "
                                   f"expected ({d}, {d})")
            bad = off & ~((a >= f.lo) & (a <= f.hi))
            if bad.any():
                i, j = map(int, np.argwhere(bad)[0])
                raise ClusterError(f"cluster {self.name!r}: link {self.devices[i].name!r} -> "
                                   f"{self.devices[j].name!r}: {f.refusal(float(a[i, j]))}")
            np.fill_diagonal(a, np.inf if f.attr == "bandwidth" else 0.0)
            a.setflags(write=False)
            object.__setattr__(self, f.attr, a)
        for x in self.devices:
            for f in DEVICE_FIELDS:
                v = getattr(x, f.attr)
                if f.attr == "peak_flops":
                    bad = [(dt, p) for dt, p in v.items() if not f.ok(p)]
                    if bad:
                        raise ClusterError(f"cluster {self.name!r}: device {x.name!r}: "
                                           f"peak_flops[{bad[0][0]!r}]: {f.refusal(bad[0][1])}")
                elif f.attr == "wake_cost":
                    if not (wake_pairs_ok(v) and all(i <= f.hi and c <= _WAKE_EXTRA_MAX
                                                     for i, c in v)):
                        raise ClusterError(f"cluster {self.name!r}: device {x.name!r}: "
                                           f"wake_cost={v!r} ({f.key} in us); expected {f.help}")
                elif not f.ok(v):
                    raise ClusterError(f"cluster {self.name!r}: device {x.name!r}: {f.refusal(v)}")
        slowdowns: dict[str, float] = {}
        for x in self.devices:
            if x.host and slowdowns.setdefault(x.host, x.shared_slowdown) != x.shared_slowdown:
                raise ClusterError(f"cluster {self.name!r}: devices of host {x.host!r} have "
                                   f"shared_slowdown {slowdowns[x.host]!r} and "
                                   f"{x.shared_slowdown!r}; expected one value per host")

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def __len__(self) -> int:
        return len(self.devices)

    def __repr__(self) -> str:
        kinds = sorted({d.kind for d in self.devices})
        return f"Cluster({self.name!r}, devices={self.num_devices}, kinds={kinds})"

    @property
    def memory(self) -> np.ndarray:
        """Memory capacity of each device in bytes (float64, shape (D,))."""
        return np.array([d.memory for d in self.devices], dtype=np.float64)

    def take(self, count: int) -> Cluster:
        """The first ``count`` devices and the links among them."""
        if not 1 <= count <= self.num_devices:
            raise ClusterError(f"cluster {self.name!r} has {self.num_devices} devices; "
                               f"cannot take {count}")
        base = self.name.split(":")[0]
        return Cluster(f"{base}:{count}", self.devices[:count], self.bandwidth[:count, :count],
                       self.latency[:count, :count], dict(self.meta), self.overlap_latency,
                       self.calibration)

    def with_memory(self, memory: float) -> Cluster:
        """The same cluster with every device's memory capacity set to ``memory`` bytes."""
        return self._with_devices(replace(d, memory=float(memory)) for d in self.devices)

    def with_shared_slowdown(self, slowdown: float) -> Cluster:
        """The same cluster with ``shared_slowdown`` set to ``slowdown`` on every device
        that shares a host (a program's own figure, measured by
        :func:`graphopt.exec.calibrate.shared_slowdown`)."""
        return self._with_devices(replace(d, shared_slowdown=float(slowdown)) if d.host else d
                                  for d in self.devices)

    def with_dispatch(self, dispatch: float) -> Cluster:
        """The same cluster with every device's ``dispatch_overhead`` set to ``dispatch``
        seconds (a program's own figure, measured by
        :func:`graphopt.exec.calibrate.engine_problem`)."""
        return self._with_devices(replace(d, dispatch_overhead=float(dispatch)) for d in self.devices)

    def with_wake_cost(self, cost: tuple[tuple[float, float], ...]) -> Cluster:
        """The same cluster with every device's ``wake_cost`` set to ``cost`` (a program's
        own ``(idle, extra)`` pairs, measured by :func:`graphopt.exec.calibrate.wake_cost`)."""
        cost = tuple((float(i), float(c)) for i, c in cost)
        return self._with_devices(replace(d, wake_cost=cost) for d in self.devices)

    def with_program_figures(self, dispatch: float, shared_slowdown: float | None = None,
                             wake_cost: tuple[tuple[float, float], ...] | None = None) -> Cluster:
        """The same cluster with a program's own figures, in one pass: every device's
        ``dispatch_overhead`` (:meth:`with_dispatch`), and where given the
        ``shared_slowdown`` of every device that shares a host (:meth:`with_shared_slowdown`)
        and every device's ``wake_cost`` (:meth:`with_wake_cost`); measured by
        :func:`graphopt.exec.calibrate.engine_problem`."""
        fields: dict = {"dispatch_overhead": float(dispatch)}
        if wake_cost is not None:
            fields["wake_cost"] = tuple((float(i), float(c)) for i, c in wake_cost)
        slow = {} if shared_slowdown is None else {"shared_slowdown": float(shared_slowdown)}
        return self._with_devices(replace(d, **fields, **(slow if d.host else {}))
                                  for d in self.devices)

    def _with_devices(self, devices) -> Cluster:
        return Cluster(self.name, tuple(devices), self.bandwidth, self.latency, dict(self.meta),
                       self.overlap_latency, self.calibration)

    def to_dict(self) -> dict:
        """JSON-ready description (for reports)."""
        return {
            "name": self.name,
            "devices": [{"name": d.name, "kind": d.kind, "peak_flops": d.peak_flops,
                         "vector_flops": d.vector_flops, "mem_bw": d.mem_bw, "memory": d.memory,
                         "launch_overhead": d.launch_overhead,
                         "dispatch_overhead": d.dispatch_overhead, "host": d.host,
                         "shared_slowdown": d.shared_slowdown,
                         "transfer_cpu_bw": None if np.isinf(d.transfer_cpu_bw) else d.transfer_cpu_bw,
                         "transfer_cpu_overhead": d.transfer_cpu_overhead,
                         "wake_cost": [list(p) for p in d.wake_cost]}
                        for d in self.devices],
            "bandwidth": np.where(np.isinf(self.bandwidth), 0, self.bandwidth).tolist(),
            "latency": self.latency.tolist(),
            "overlap_latency": self.overlap_latency,
        }


def wake_pairs_ok(pairs: object) -> bool:
    """Whether ``pairs`` is a valid ``Device.wake_cost``: ``(idle, extra)`` pairs of
    finite numbers, idle > 0 and strictly increasing, extra >= 0 (or none)."""
    def number(v: object) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < np.inf

    try:
        if not all(len(p) == 2 and number(p[0]) and number(p[1]) for p in pairs):
            return False
    except (TypeError, KeyError):  # not a sequence of pairs
        return False
    idle = [p[0] for p in pairs]
    return all(0 < a < b for a, b in zip(idle, idle[1:] + [np.inf]))
