"""Hardware: devices, clusters, topologies and named presets."""

from graphopt.hardware.cluster import Cluster, Device
from graphopt.hardware.presets import cluster_from_toml, list_presets, load_cluster

__all__ = ["Cluster", "Device", "cluster_from_toml", "list_presets", "load_cluster"]
