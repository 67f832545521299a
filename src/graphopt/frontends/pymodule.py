"""``py:FILE.py:FACTORY[:key=value,...]``: the user's own PyTorch model.

``FILE.py`` is imported (its code runs, as ``python FILE.py`` would run it) and
``FACTORY(**overrides)`` is called after ``torch.manual_seed(seed)``. It returns a tuple

- ``(module, inputs)``: an ``nn.Module`` and one batch of its positional inputs (a
  tensor or a tuple of tensors, the batch along every input's first dimension); the
  loss is the sum of the means of the output's floating-point tensors;
- ``(module, inputs, loss)``: with ``loss(output, target) -> scalar``, the mean over the
  batch (``target`` is None);
- ``(module, inputs, loss, target)``: with a target tensor the loss compares the output
  with, cut into microbatches as the inputs are.

Overrides are keyword arguments (integers, floats, true/false, none or text), e.g.
``py:models/net.py:make:layers=8,width=256``.

Example ``net.py``::

    import torch

    def make(layers=4, width=64):
        blocks = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                  for _ in range(layers)]
        return torch.nn.Sequential(*blocks), torch.randn(32, width)
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

from graphopt.errors import BadFileError, UsageError
from graphopt.frontends.model import Model
from graphopt.frontends.torch import first_line
from graphopt.ir.graph import Graph

__all__ = ["build", "model", "parse_spec"]


def parse_spec(spec: str) -> tuple[Path, str, str]:
    """``"net.py:make:layers=2"`` → ``(Path("net.py"), "make", "layers=2")``.

    >>> parse_spec("models/net.py:make:layers=2")
    (PosixPath('models/net.py'), 'make', 'layers=2')

    Raises
    ------
    GraphoptError
        No ``.py`` file or no factory named.
    """
    path, dot_py, rest = spec.partition(".py:")
    factory, _, overrides = rest.partition(":")
    if not dot_py or not path or not factory.isidentifier():
        raise UsageError(f"graph 'py:{spec}': expected py:FILE.py:FACTORY[:key=value,...], "
                         "e.g. py:net.py:make:layers=4")
    return Path(path + ".py"), factory, overrides


def _load(path: Path, source: str):
    if not path.is_file():
        raise UsageError(f"graph {source!r}: no file {path}")
    # one module name per file, so that a spawned worker importing it again gets the same
    name = "graphopt_user_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadFileError(f"graph {source!r}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException as err:  # the user's code raises anything, SystemExit included
        del sys.modules[name]
        raise BadFileError(f"graph {source!r}: importing {path} raised "
                           f"{first_line(err)}") from None
    return module


def model(spec: str, seed: int = 0) -> Model:
    """``py:spec`` as a :class:`~graphopt.frontends.model.Model` (module docstring).

    Raises
    ------
    GraphoptError
        A malformed spec, a file that does not exist or raises when imported, no such
        factory, a factory that raises or returns no module and tensors.
    """
    from graphopt.frontends.source import parse_overrides

    source = f"py:{spec}"
    path, name, text = parse_spec(spec)
    overrides = parse_overrides(source, text)
    factory = getattr(_load(path, source), name, None)
    if not callable(factory):
        raise UsageError(f"graph {source!r}: {path} has no function {name!r}")
    torch.manual_seed(seed)
    try:
        made = factory(**overrides)
    except Exception as err:  # noqa: BLE001 - the user's code raises anything
        raise BadFileError(f"graph {source!r}: {name}() raised {first_line(err)}") from None
    if not isinstance(made, tuple) or not 2 <= len(made) <= 4:
        raise BadFileError(f"graph {source!r}: {name}() must return (module, inputs[, loss"
                           f"[, target]]), got {type(made).__name__}")
    module, inputs, loss, target = (*made, None, None)[:4]
    inputs = (inputs,) if isinstance(inputs, Tensor) else inputs
    if not isinstance(module, nn.Module):
        raise BadFileError(f"graph {source!r}: {name}() returned no nn.Module first "
                           f"({type(module).__name__})")
    if not isinstance(inputs, tuple | list) or not inputs or not all(
            isinstance(x, Tensor) for x in inputs):
        raise BadFileError(f"graph {source!r}: {name}()'s inputs must be a tensor or a "
                           "tuple of tensors")
    if loss is not None and not callable(loss):
        raise BadFileError(f"graph {source!r}: {name}()'s loss must be callable")
    if target is not None and not isinstance(target, Tensor):
        raise BadFileError(f"graph {source!r}: {name}()'s target must be a tensor")
    return Model(source, module, tuple(inputs), target, loss)


def build(spec: str) -> Graph:
    """The training-step graph of ``py:spec`` (forward, loss, backward, SGD update)."""
    return model(spec).trace().graph
