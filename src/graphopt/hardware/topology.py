"""Topology builders: the bandwidth and latency of every ordered device pair.

Each builder returns ``(bandwidth, latency)``, two ``(D, D)`` float arrays in bytes/s
and seconds. Paths of several hops are modelled as one link with the slowest hop's
bandwidth (transfers are pipelined) and the hops' latencies added.
"""

from __future__ import annotations

import numpy as np

__all__ = ["all_to_all", "host_star", "link_matrix", "pcie_tree", "ring", "torus"]

Matrices = tuple[np.ndarray, np.ndarray]


def all_to_all(n: int, bandwidth: float, latency: float) -> Matrices:
    """Every pair directly connected (NVSwitch, or a full NVLink mesh).

    >>> bw, lat = all_to_all(2, 300e9, 2e-6)
    >>> float(bw[0, 1]), float(lat[1, 0])
    (300000000000.0, 2e-06)
    """
    return np.full((n, n), float(bandwidth)), np.full((n, n), float(latency))


def pcie_tree(n: int, bandwidth: float, latency: float, per_switch: int = 2,
              root_bandwidth: float | None = None) -> Matrices:
    """Devices in groups of ``per_switch`` under PCIe switches joined at the host.

    Within a switch: ``bandwidth`` and ``latency``. Across switches the path climbs to
    the root complex: ``root_bandwidth`` (default ``bandwidth``) and twice the latency.
    """
    grp = np.arange(n) // max(per_switch, 1)
    same = grp[:, None] == grp[None, :]
    rb = bandwidth if root_bandwidth is None else root_bandwidth
    # np.minimum, not min(): a NaN root bandwidth must reach the cluster's check
    return (np.where(same, bandwidth, np.minimum(bandwidth, rb)).astype(float),
            np.where(same, latency, 2 * latency).astype(float))


def ring(n: int, bandwidth: float, latency: float) -> Matrices:
    """A bidirectional ring: neighbours one hop apart, others the shorter way round."""
    i = np.arange(n)
    d = np.abs(i[:, None] - i[None, :])
    hops = np.minimum(d, n - d)
    return np.full((n, n), float(bandwidth)), hops * float(latency)


def torus(dims: tuple[int, ...], bandwidth: float, latency: float) -> Matrices:
    """A wrap-around torus of the given dimensions (row-major device order)."""
    coords = np.stack(np.unravel_index(np.arange(int(np.prod(dims))), dims), axis=1)
    hops = np.zeros((len(coords), len(coords)), dtype=np.int64)
    for k, size in enumerate(dims):
        d = np.abs(coords[:, None, k] - coords[None, :, k])
        hops += np.minimum(d, size - d)
    return np.full(hops.shape, float(bandwidth)), hops * float(latency)


def link_matrix(links: np.ndarray, link_bandwidth: float, latency: float,
                fallback_bandwidth: float, fallback_latency: float) -> Matrices:
    """Direct links counted per pair (e.g. DGX-1's NVLink hybrid cube-mesh).

    ``links[i, j]`` is the number of parallel links from i to j; their bandwidths add.
    Pairs with no link use the fallback path (PCIe through the host).
    """
    links = np.asarray(links, dtype=float)
    bw = np.where(links > 0, links * link_bandwidth, fallback_bandwidth)
    lat = np.where(links > 0, latency, fallback_latency)
    return bw.astype(float), lat.astype(float)


def host_star(n: int, bandwidth: float, latency: float) -> Matrices:
    """Device 0 is the host CPU; the others hang off it on PCIe. GPU to GPU goes through
    the host: same bandwidth, twice the latency."""
    bw = np.full((n, n), float(bandwidth))
    lat = np.full((n, n), 2 * float(latency))
    lat[0, :] = lat[:, 0] = latency
    return bw, lat
