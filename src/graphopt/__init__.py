"""graphopt: optimize ML computation graphs — placement, scheduling and fusion.

>>> import graphopt as go
>>> from graphopt.ir.generate import mlp_training_graph
>>> prob = go.Problem(mlp_training_graph(), go.load_cluster("dgx1-v100:2"))
>>> go.simulate(prob).valid
True
"""

import importlib

from graphopt._lazy import lazy_exports
from graphopt.errors import GraphoptError

# Names load on first use: the simulator's numba engine costs a second at import, and
# the command line's entry point (graphopt._main) imports this package before it can
# catch a Ctrl-C, so the package itself imports nothing heavy.
_exports = lazy_exports(__name__, {
    "graphopt.hardware": ("Cluster", "Device", "list_presets", "load_cluster"),
    "graphopt.ir": ("Graph", "GraphBuilder", "load_graph", "save_graph"),
    "graphopt.sim": ("Plan", "Problem", "SimResult", "simulate", "simulate_batch")})


def __getattr__(name: str) -> object:
    if name == "ir":
        return importlib.import_module("graphopt.ir")
    return _exports(name)


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
