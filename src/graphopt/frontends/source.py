"""Graph sources named by one string, parsed once into a :class:`Source`.

A source is one of:

- a graph or model file (see :data:`graphopt.frontends.IMPORTERS`);
- ``zoo:NAME[:key=value,...]``: a model of the zoo (:mod:`graphopt.zoo`);
- ``hf:MODEL_TYPE[:key=value,...]``: a Hugging Face ``transformers`` model built from its
  default configuration with random weights (:mod:`graphopt.zoo.hf`);
- ``pipe:NAME[:key=value,...]``: a model written as a sequence of layers
  (:mod:`graphopt.zoo.pipeline`);
- ``py:FILE.py:FACTORY[:key=value,...]``: the user's own PyTorch code, ``FACTORY(**kw)``
  in ``FILE.py`` returning a module and its example inputs
  (:mod:`graphopt.frontends.pymodule`);
- ``example:mlp`` (a 4-layer MLP training step) or ``example:layered-N`` (a random
  layered graph of about N ops; ``example:layered-N-sSEED`` draws it from another seed).

A corpus item adds the cluster to place it on: ``GRAPH@CLUSTER``, e.g.
``zoo:gnmt-2@p100:2``.

Every command asks the :class:`Source` for what it needs, one facet each (the
training-step graph, the forward graph, the PyTorch model that runs for real, the
default cluster); :data:`SCHEMES` holds, per scheme, the function behind each facet, so
that adding a scheme is one row. The functions are named, not imported: the zoo and the
torch frontend sit above this module or cost torch's start-up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from graphopt.errors import GraphError, UsageError
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.ir.graph import Graph

__all__ = ["DEFAULT_CLUSTER", "MAX_EXAMPLE_OPS", "SCHEMES", "Scheme", "Source", "load_source",
           "parse_overrides", "split_source"]

#: The largest ``example:layered-N``: a bound on what a typo can make us build.
MAX_EXAMPLE_OPS = 1_000_000

#: The cluster of a source that names none (:meth:`Source.default_cluster`).
DEFAULT_CLUSTER = "dgx1-v100:4"


@dataclass(frozen=True)
class Scheme:
    """What one source scheme gives, as ``"module:function"`` names taking the text after
    the prefix (None where the scheme has no such facet).

    Attributes
    ----------
    graph : str
        ``f(rest) -> Graph``: the training-step graph (a file's graph as it is).
    model : str or None
        ``f(rest, seed) -> Model`` (:class:`graphopt.frontends.model.Model`): the PyTorch
        model that runs for real.
    forward : str or None
        ``f(rest) -> Graph``: the forward graph; None: derived from ``model``, or the
        graph itself where there is no model.
    cluster : str or None
        ``f(rest) -> str``: the cluster to use when none is given; None:
        :data:`DEFAULT_CLUSTER`.
    no_model : str
        Why the scheme has no model, for the one-line error.
    """

    graph: str
    model: str | None = None
    forward: str | None = None
    cluster: str | None = None
    no_model: str = ""


#: Source prefix → what it gives. Files (no prefix) are the last row's concern:
#: :meth:`Source.parse` sends any other string to :func:`graphopt.frontends.import_graph`.
SCHEMES: dict[str, Scheme] = {
    "zoo:": Scheme("graphopt.zoo:build", "graphopt.zoo.registry:model",
                   "graphopt.zoo:forward_graph", "graphopt.zoo.registry:default_cluster"),
    "hf:": Scheme("graphopt.zoo.hf:build", "graphopt.zoo.hf:model"),
    "pipe:": Scheme("graphopt.zoo.pipeline:build", "graphopt.zoo.pipeline:model"),
    "py:": Scheme("graphopt.frontends.pymodule:build", "graphopt.frontends.pymodule:model"),
    "example:": Scheme("graphopt.frontends.source:_example",
                       no_model="a generated graph, with no PyTorch code behind it"),
}


def _call(target: str, *args: Any) -> Any:
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)(*args)


@dataclass(frozen=True)
class Source:
    """A graph source, parsed: its scheme (``"zoo:"``, ..., ``""`` for a file) and the
    rest of the string.

    Examples
    --------
    >>> s = Source.parse("example:mlp")
    >>> s.scheme, s.rest, s.graph().num_nodes, s.default_cluster()
    ('example:', 'mlp', 42, 'dgx1-v100:4')
    >>> Source.parse("model.onnx").runs
    False
    >>> Source.parse("zoo:rnnlm-2-quick").runs, Source.parse("x.pt2").runs
    (True, True)
    """

    text: str
    scheme: str
    rest: str

    @classmethod
    def parse(cls, text: str) -> Source:
        """The source ``text`` names (nothing is read or built yet)."""
        for prefix in SCHEMES:
            if text.startswith(prefix):
                return cls(text, prefix, text[len(prefix):])
        return cls(text, "", text)

    def __str__(self) -> str:
        return self.text

    @property
    def _row(self) -> Scheme | None:
        return SCHEMES.get(self.scheme)

    @property
    def has_model(self) -> bool:
        """Whether :meth:`model` gives PyTorch code (``zoo:``, ``hf:``, ``pipe:``, ``py:``)."""
        return self._row is not None and self._row.model is not None

    @property
    def runs(self) -> bool:
        """Whether :meth:`program` can trace a PyTorch program that runs for real: a
        source with a model, or a ``torch.export`` file (``.pt2``, a forward program)."""
        return self.has_model or (not self.scheme and self.text.endswith(".pt2"))

    def graph(self) -> Graph:
        """The graph: a model's training step (forward, loss, backward, SGD update), or a
        file's graph as it is.

        Raises
        ------
        GraphoptError
            An unknown model or example, bad settings, a file that does not exist or
            cannot be read, or a file whose graph has no ops.
        """
        if self._row is not None:
            return _call(self._row.graph, self.rest)
        from graphopt.frontends import import_graph

        graph = import_graph(self.text)
        if graph.num_nodes == 0:
            raise GraphError(f"graph {self.text}: has no ops; nothing to simulate or optimize")
        return graph

    def model(self, seed: int = 0):
        """The PyTorch model (:class:`graphopt.frontends.model.Model`), weights and batch
        drawn from ``seed``.

        Raises
        ------
        GraphoptError
            The source has no PyTorch model (the message says why and what has one), or
            the model cannot be built.
        """
        if not self.has_model:
            why = self._row.no_model if self._row is not None else (
                "a torch.export program, not a module" if self.text.endswith(".pt2")
                else "a graph file, with no PyTorch code behind it")
            raise UsageError(f"graph {self.text!r}: {why}; a model that runs is zoo:NAME, "
                             "hf:MODEL_TYPE, pipe:NAME or py:FILE.py:FACTORY")
        return _call(self._row.model, self.rest, seed)

    def program(self):
        """The traced PyTorch program (:class:`graphopt.frontends.torch.TracedProgram`):
        the model's training step with SGD, or a ``.pt2`` file's forward program. Its
        graph is :meth:`graph`'s, node for node, for every scheme with a model.

        Raises
        ------
        GraphoptError
            The source has no program (see :attr:`runs`).
        """
        if not self.has_model and not self.scheme and self.text.endswith(".pt2"):
            from graphopt.frontends.torch import load_program

            return load_program(self.text)
        return self.model().trace()

    def forward_graph(self) -> Graph:
        """The forward (inference) graph: the scheme's own, else traced from the model,
        else the graph itself."""
        row = self._row
        if row is not None and row.forward is not None:
            return _call(row.forward, self.rest)
        if not self.has_model:
            return self.graph()
        from graphopt.frontends.torch import from_torch

        m = self.model()
        return from_torch(m.module, m.inputs, training=False, name=m.name)

    def default_cluster(self) -> str:
        """The cluster a command uses when none is given: a zoo model gets dgx1-v100 with
        its device count in GO's Table 2, anything else :data:`DEFAULT_CLUSTER`."""
        row = self._row
        return _call(row.cluster, self.rest) if row is not None and row.cluster else DEFAULT_CLUSTER


def _parse_value(text: str) -> Any:
    """``"2"`` → 2, ``"0.1"`` → 0.1, ``"true"`` → True, ``"none"`` → None, else the text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text) if text.isascii() else text
        except ValueError:
            pass
    return text


def parse_overrides(source: str, text: str) -> dict[str, Any]:
    """``"layers=2,batch=4"`` → ``{"layers": 2, "batch": 4}``; ``source`` names the graph in errors.

    >>> parse_overrides("zoo:gnmt-2", "layers=3,hidden=0.5,x=none")
    {'layers': 3, 'hidden': 0.5, 'x': None}

    Raises
    ------
    GraphoptError
        A part not written ``key=value``, an empty value, or a key given twice.
    """
    overrides: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        key, eq, value = (t.strip() for t in part.partition("="))
        if not eq or not key.isidentifier() or not value:
            raise UsageError(f"graph {source!r}: override {part!r} is not key=value, "
                             "e.g. layers=2")
        if key.startswith("_"):  # private fields and dunders are not settings
            raise UsageError(f"graph {source!r}: override {key!r}: a setting's name does "
                             "not begin with '_'")
        if key in overrides:
            raise UsageError(f"graph {source!r}: override {key!r} given twice")
        overrides[key] = _parse_value(value)
    return overrides


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
        raise UsageError(f"graph source {item!r}: expected GRAPH@CLUSTER, e.g. "
                         "zoo:rnnlm-2@p100:2, or GRAPH with a cluster given apart")
    return graph, where


def load_source(spec: str) -> Graph:
    """The graph a source string names: ``Source.parse(spec).graph()``.

    Examples
    --------
    >>> load_source("example:mlp").num_nodes
    42
    >>> load_source("example:layered-100").num_nodes
    100
    >>> load_source("example:layered-100-s3").meta["seed"]
    3
    """
    return Source.parse(spec).graph()


def _example(rest: str) -> Graph:
    """``example:REST``'s graph (the module docstring)."""
    spec = f"example:{rest}"
    if rest == "mlp":
        return mlp_training_graph()
    if rest.startswith("layered-"):
        try:
            digits, dash_s, seed_text = rest.split("-", 1)[1].partition("-s")
            size = int(digits if digits.isascii() else "x")  # int() reads any script's digits
            seed = int(seed_text if seed_text.isascii() else "x") if dash_s else 0
            if seed < 0:
                raise ValueError(seed)
        except ValueError:
            raise UsageError(f"graph {spec!r}: expected example:layered-N with an integer N, "
                             "or example:layered-N-sSEED with a SEED >= 0") from None
        if not 1 <= size <= MAX_EXAMPLE_OPS:
            raise UsageError(f"graph {spec!r}: N must be 1..{MAX_EXAMPLE_OPS:,} (a larger "
                             "random graph: graphopt.ir.generate.layered_graph)")
        width = max(1, min(20, size // 10))
        return layered_graph(max(1, size // width), width, seed=seed)
    raise UsageError(f"unknown example graph {spec!r}; known: example:mlp, "
                     "example:layered-N, example:layered-N-sSEED")
