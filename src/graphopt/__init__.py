"""graphopt: optimize ML computation graphs — placement, scheduling and fusion.

>>> import graphopt as go
>>> prob = go.Problem(go.ir.generate.mlp_training_graph(), go.load_cluster("dgx1-v100:2"))
>>> go.simulate(prob).valid
True
"""

from graphopt import ir
from graphopt.errors import GraphoptError
from graphopt.hardware import Cluster, Device, list_presets, load_cluster
from graphopt.ir import Graph, GraphBuilder, load_graph, save_graph
from graphopt.sim import Plan, Problem, SimResult, simulate, simulate_batch

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
