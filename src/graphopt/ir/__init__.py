"""The graph IR: :class:`Graph`, its builder, op vocabulary, files and node features."""

from graphopt.ir.features import node_features
from graphopt.ir.graph import MAX_RANK, Graph, GraphBuilder
from graphopt.ir.io import from_networkx, load_graph, save_graph, to_networkx
from graphopt.ir.ops import OP_CLASSES, OP_VOCAB, op_class, op_id

__all__ = [
           "MAX_RANK",
           "OP_CLASSES",
           "OP_VOCAB",
           "Graph",
           "GraphBuilder",
           "from_networkx",
           "load_graph",
           "node_features",
           "op_class",
           "op_id",
           "save_graph",
           "to_networkx",
]
