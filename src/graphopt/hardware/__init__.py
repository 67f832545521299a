"""Hardware: devices, clusters, topologies, named presets and the cluster file."""

from graphopt.hardware.cluster import (CALIBRATED_KIND, DEVICE_FIELDS, Calibration, Cluster,
                                       Device)
from graphopt.hardware.presets import (cluster_from_toml, cluster_to_toml, list_presets,
                                       load_cluster, save_cluster)

__all__ = ["CALIBRATED_KIND", "DEVICE_FIELDS", "Calibration", "Cluster", "Device",
           "cluster_from_toml", "cluster_to_toml", "list_presets", "load_cluster", "save_cluster"]
