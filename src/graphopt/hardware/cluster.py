"""Devices, clusters and the links between them.

A :class:`Cluster` is a list of :class:`Device` plus, for every ordered pair of
devices, the bandwidth and latency of the path between them (DESIGN.md: one directed
link per pair, carrying one transfer at a time). Topology builders in
:mod:`graphopt.hardware.topology` fill those matrices; presets in TOML files name
whole machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from graphopt.errors import ClusterError

__all__ = ["Cluster", "Device"]


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
        False (DESIGN.md, every preset): a link carries one transfer at a time for
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

    def __post_init__(self) -> None:
        d = len(self.devices)
        if d == 0:
            raise ClusterError(f"cluster {self.name!r} has no devices")
        names = [x.name for x in self.devices]
        if len(set(names)) != d:
            raise ClusterError(f"cluster {self.name!r}: device names repeat: {names}")
        for k in ("bandwidth", "latency"):
            a = np.array(getattr(self, k), dtype=np.float64)
            if a.shape != (d, d):
                raise ClusterError(f"cluster {self.name!r}: {k} has shape {a.shape}, expected ({d}, {d})")
            off = ~np.eye(d, dtype=bool)
            if not np.isfinite(a[off]).all() or (a[off] < 0).any() or (
                    k == "bandwidth" and (a[off] <= 0).any()):
                raise ClusterError(f"cluster {self.name!r}: {k} must be finite and positive "
                                   "between distinct devices")
            np.fill_diagonal(a, np.inf if k == "bandwidth" else 0.0)
            a.setflags(write=False)
            object.__setattr__(self, k, a)
        for x in self.devices:
            for attr in ("vector_flops", "mem_bw", "memory"):
                if not 0 < getattr(x, attr) < np.inf:
                    raise ClusterError(f"cluster {self.name!r}: device {x.name!r} has "
                                       f"{attr}={getattr(x, attr)!r}; expected a finite number > 0")
            for dt, v in x.peak_flops.items():
                if not 0 < v < np.inf:
                    raise ClusterError(f"cluster {self.name!r}: device {x.name!r} has "
                                       f"peak_flops[{dt!r}]={v!r}; expected a finite number > 0")
            if not 0 <= x.dispatch_overhead < np.inf:
                raise ClusterError(f"device {x.name!r}: dispatch_overhead={x.dispatch_overhead!r}; "
                                   "expected a finite number >= 0")
            if not 0 <= x.launch_overhead < np.inf:
                raise ClusterError(f"cluster {self.name!r}: device {x.name!r} has "
                                   f"launch_overhead={x.launch_overhead!r}; expected a finite "
                                   "number >= 0")
            if not 0 <= x.transfer_cpu_overhead < np.inf:
                raise ClusterError(f"device {x.name!r}: transfer_cpu_overhead="
                                   f"{x.transfer_cpu_overhead!r}; expected seconds >= 0")
            if not x.transfer_cpu_bw > 0:
                raise ClusterError(f"device {x.name!r}: transfer_cpu_bw={x.transfer_cpu_bw!r}; "
                                   "expected a positive number of bytes/s (inf: free)")
            if not wake_pairs_ok(x.wake_cost):
                raise ClusterError(f"device {x.name!r}: wake_cost={x.wake_cost!r}; expected "
                                   "(idle, extra) pairs of finite seconds, idle > 0 and "
                                   "increasing, extra >= 0")
            if not 1.0 <= x.shared_slowdown < np.inf:
                raise ClusterError(f"cluster {self.name!r}: device {x.name!r} has "
                                   f"shared_slowdown={x.shared_slowdown!r}; expected a finite "
                                   "number >= 1")
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
                       self.latency[:count, :count], dict(self.meta), self.overlap_latency)

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

    def _with_devices(self, devices) -> Cluster:
        return Cluster(self.name, tuple(devices), self.bandwidth, self.latency, dict(self.meta),
                       self.overlap_latency)

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
