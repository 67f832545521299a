"""Lazy re-exports for package ``__init__`` files (PEP 562): a name loads its module on
first use. Imports nothing else of the package.

A package whose public names pull in torch or numba re-exports them this way, so that
``import graphopt`` and the command line's start-up do not pay for what they do not use.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` serving ``{module: names}`` on first use.

    The value found is stored in the package's namespace, so each name is looked up
    once.

    Examples
    --------
    >>> import types, sys
    >>> pkg = sys.modules["demo_pkg"] = types.ModuleType("demo_pkg")
    >>> pkg.__getattr__ = lazy_exports("demo_pkg", {"json": ("dumps",)})
    >>> pkg.dumps([1])
    '[1]'
    >>> pkg.nope
    Traceback (most recent call last):
    ...
    AttributeError: module 'demo_pkg' has no attribute 'nope'
    """
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
