"""graphopt: optimize ML computation graphs — placement, scheduling and fusion.

>>> import graphopt as go
>>> from graphopt.ir.generate import mlp_training_graph
>>> prob = go.Problem(mlp_training_graph(), go.load_cluster("dgx1-v100:2"))
>>> go.simulate(prob).valid
True
"""

from graphopt import ir
from graphopt._lazy import lazy_exports
from graphopt.errors import GraphoptError
from graphopt.hardware import Cluster, Device, list_presets, load_cluster
from graphopt.ir import Graph, GraphBuilder, load_graph, save_graph

# The simulator's names load on first use: its numba engine costs a second at import,
# which ``graphopt --help`` and the light commands should not pay.
__getattr__ = lazy_exports(__name__, {
    "graphopt.sim": ("Plan", "Problem", "SimResult", "simulate", "simulate_batch")})

__version__ = "0.1.0"
__all__ = [
           "Cluster",
           "Device",
           "Graph",
           "GraphBuilder",
           "GraphoptError",
           "Plan",
           "Problem",
           "SimResult",
           "ir",
           "list_presets",
           "load_cluster",
           "load_graph",
           "save_graph",
           "simulate",
           "simulate_batch",
]
