"""Graph sources named by one string, as the command line and corpora write them.

A source is a graph file or model file (see :data:`graphopt.frontends.IMPORTERS`), a
zoo model ``zoo:NAME[:key=value,...]``, a Hugging Face ``transformers`` model
``hf:MODEL_TYPE[:key=value,...]`` built from its default configuration with random
weights (:mod:`graphopt.zoo.hf`), or a built-in example: ``example:mlp`` (a 4-layer MLP
training step) or ``example:layered-N`` (a random layered graph of about N ops;
``example:layered-N-sSEED`` draws it from another seed). A corpus item
adds the cluster to place it on: ``GRAPH@CLUSTER``, e.g. ``zoo:gnmt-2@p100:2``.
"""

from __future__ import annotations

import importlib

from graphopt.errors import GraphError, GraphoptError
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.ir.graph import Graph

__all__ = ["MAX_EXAMPLE_OPS", "SCHEMES", "is_program", "load_source", "split_source"]

#: The largest ``example:layered-N``: a bound on what a typo can make us build.
MAX_EXAMPLE_OPS = 1_000_000

#: Source prefix → ``"module:function"`` building the graph from the rest of the string.
#: The zoo is named rather than imported because it builds its graphs with the torch
#: frontend (it sits above this package) and importing it costs torch's start-up.
SCHEMES: dict[str, str] = {
    "zoo:": "graphopt.zoo:build",
    "hf:": "graphopt.zoo.hf:build",
}


def is_program(spec: str) -> bool:
    """Whether the graph source ``spec`` names a PyTorch program :func:`graphopt.exec.api.trace_source` can
    trace (``zoo:NAME`` or a ``.pt2`` file), that is, one that runs for real.

    >>> is_program("zoo:rnnlm-2-quick"), is_program("model.onnx")
    (True, False)
    """
    return spec.startswith("zoo:") or spec.endswith(".pt2")


def split_source(item: str, cluster: str | None = None) -> tuple[str, str | None]:
    """``"GRAPH@CLUSTER"`` → ``(GRAPH, CLUSTER)``; ``"GRAPH"`` → ``(GRAPH, cluster)``.

    Raises
    ------
    GraphoptError
        An empty graph, or no cluster in the item and none given.

    Examples
    --------
    >>> split_source("zoo:gnmt-2@p100:2")
    ('zoo:gnmt-2', 'p100:2')
    >>> split_source("example:mlp", cluster="dgx1-v100:4")
    ('example:mlp', 'dgx1-v100:4')
    """
    graph, at, where = item.rpartition("@")
    if not at:
        graph, where = item, cluster
    if not graph or not where:
        raise GraphoptError(f"graph source {item!r}: expected GRAPH@CLUSTER, e.g. "
                            "zoo:rnnlm-2@p100:2, or GRAPH with a cluster given apart")
    return graph, where


def load_source(spec: str) -> Graph:
    """The graph a source string names (see the module docstring).

    Raises
    ------
    GraphoptError
        An unknown example or zoo model, a malformed ``example:layered-N`` or N outside
        1..:data:`MAX_EXAMPLE_OPS`, a file that does not exist or cannot be read, or a
        file whose graph has no ops.

    Examples
    --------
    >>> load_source("example:mlp").num_nodes
    42
    >>> load_source("example:layered-100").num_nodes
    100
    >>> load_source("example:layered-100-s3").meta["seed"]
    3
    """
    if spec == "example:mlp":
        return mlp_training_graph()
    if spec.startswith("example:layered-"):
        try:
            digits, dash_s, seed_text = spec.split("-", 1)[1].partition("-s")
            size = int(digits if digits.isascii() else "x")  # int() reads any script's digits
            seed = int(seed_text if seed_text.isascii() else "x") if dash_s else 0
            if seed < 0:
                raise ValueError(seed)
        except ValueError:
            raise GraphoptError(f"graph {spec!r}: expected example:layered-N with an integer N, "
                                "or example:layered-N-sSEED with a SEED >= 0") from None
        if not 1 <= size <= MAX_EXAMPLE_OPS:
            raise GraphoptError(f"graph {spec!r}: N must be 1..{MAX_EXAMPLE_OPS:,} (a larger "
                                "random graph: graphopt.ir.generate.layered_graph)")
        width = max(1, min(20, size // 10))
        return layered_graph(max(1, size // width), width, seed=seed)
    if spec.startswith("example:"):
        raise GraphoptError(f"unknown example graph {spec!r}; known: example:mlp, "
                            "example:layered-N, example:layered-N-sSEED")
    for prefix, target in SCHEMES.items():
        if spec.startswith(prefix):
            module, func = target.split(":")
            return getattr(importlib.import_module(module), func)(spec[len(prefix):])
    from graphopt.frontends import import_graph

    graph = import_graph(spec)
    if graph.num_nodes == 0:
        raise GraphError(f"graph {spec}: has no ops; nothing to simulate or optimize")
    return graph
