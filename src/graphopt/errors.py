"""One error hierarchy for everything graphopt rejects, the one range check of the
numbers in a dataclass of options (:func:`check_fields`), and of a network size read from
a file (:func:`check_size`).

The CLI catches :class:`GraphoptError`, prints its message on one line and exits 2,
so every message must say what is wrong and where (file, node, option), the value
received and what was expected.
"""

import dataclasses
import math
from collections.abc import Callable

__all__ = [
    "MAX_SEED",
    "MAX_THREADS",
    "ClusterError",
    "FrontendError",
    "GraphError",
    "GraphFormatError",
    "GraphoptError",
    "PlanError",
    "ProfileError",
    "CostModelError",
    "ExecutionError",
    "WriteError",
    "check_fields",
    "check_size",
]


#: The largest seed an option takes: numpy's legacy generator takes 32 bits, and a seed
#: derived from one (``seed * 1_000_003 + step``) must still fit torch's 64.
MAX_SEED = 2**32 - 1

#: The most threads an option may ask for (torch's, CP-SAT's): 10^8 made libgomp try to
#: allocate 21 GB and abort the process.
MAX_THREADS = 1024


class GraphoptError(Exception):
    """Base class of every error graphopt raises for bad input."""


class GraphError(GraphoptError):
    """A graph breaks the IR's invariants (a cycle, a bad index, a negative size)."""


class FrontendError(GraphoptError):
    """A model cannot be turned into a graph: it fails to export or trace."""


class GraphFormatError(GraphoptError):
    """A graph file cannot be read: truncated, wrong format, pickled, missing keys."""


class ClusterError(GraphoptError):
    """An unknown preset, a malformed TOML file or an impossible device count."""


class PlanError(GraphoptError):
    """A plan does not fit its problem: wrong length, device index out of range."""


class ProfileError(GraphoptError):
    """A measured-profile file is malformed."""


class CostModelError(GraphoptError):
    """A cost-model option, dataset or run directory is unusable (bad value, empty split,
    mismatched feature widths, missing checkpoint)."""


class WriteError(GraphoptError, OSError):
    """A file cannot be written: the disk is full, a quota or ``ulimit -f`` is reached, the
    file system is read-only. An ``OSError`` too (``errno`` kept), so that code that
    tolerates a failed write (a cache) still catches it; its message is one line,
    ``FILE: cannot write (REASON)``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ExecutionError(GraphoptError):
    """A plan cannot be run for real: a worker died, hung, or an op failed on its device."""


def check_fields(obj: object, label: Callable[[str], str],
                 error: type[GraphoptError] = GraphoptError) -> None:
    """Reject the out-of-range fields of dataclass ``obj``: every number must be finite,
    and a field whose metadata sets ``"min"`` or ``"max"`` (inclusive), ``"gt"``
    (exclusive) or ``"choices"`` must respect it. ``"limit"`` is an inclusive upper bound
    on what a value may make graphopt allocate (a population size): unlike ``"max"``,
    it is not a range that tuning (:mod:`graphopt.optim.tune`) searches.
    ``label(field_name)`` says in the message where the value came from (an option,
    ``METHOD.KEY``).

    Raises
    ------
    GraphoptError
        (``error``) One line: the label, the value and the range.

    Examples
    --------
    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Options:
    ...     steps: int = field(default=1, metadata={"min": 1})
    >>> check_fields(Options(steps=0), lambda name: f"--{name}")
    Traceback (most recent call last):
    graphopt.errors.GraphoptError: --steps=0: expected >= 1
    """
    if not dataclasses.is_dataclass(obj):
        return
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        where = f"{label(f.name)}={v!r}"
        if "choices" in f.metadata and v not in f.metadata["choices"]:
            raise error(f"{where}: expected one of {', '.join(map(str, f.metadata['choices']))}")
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if not math.isfinite(v):
            raise error(f"{where}: expected a finite number")
        if "min" in f.metadata and v < f.metadata["min"]:
            raise error(f"{where}: expected >= {f.metadata['min']}")
        if "gt" in f.metadata and v <= f.metadata["gt"]:
            raise error(f"{where}: expected > {f.metadata['gt']}")
        for bound in ("max", "limit"):
            if bound in f.metadata and v > f.metadata[bound]:
                raise error(f"{where}: expected <= {f.metadata[bound]}")


def check_size(name: str, value: object, low: int, high: int,
               error: type[Exception] = ValueError) -> None:
    """Reject a network size (a width, a layer count) read from a file that is not an
    integer in ``low..high``: a config must not make building a network hang or
    allocate more than its weights could fill.

    >>> check_size("attn_layers", 10**6, 0, 64)
    Traceback (most recent call last):
    ValueError: attn_layers=1000000: expected an integer in 0..64
    """
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise error(f"{name}={value!r}: expected an integer in {low}..{high}")
