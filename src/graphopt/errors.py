"""One error hierarchy for everything graphopt raises on purpose, by meaning a caller can
catch (NetworkX's habit), the one range check of the numbers in a dataclass of options
(:func:`check_fields`), and of a network size read from a file (:func:`check_size`).

::

    GraphoptException                 everything below; exit_code 1
    ├── BudgetExhausted               a search's budget ran out: its normal end, not bad input
    └── GraphoptError                 bad input; exit_code 2
        ├── UsageError                a bad option or value on the command line (or argument)
        ├── BadFileError              a file that is not what it claims: format, fields
        │   ├── GraphFormatError, ProfileError, CheckpointError
        ├── InfeasibleError           a problem no plan can solve (nothing fits)
        ├── MissingDependencyError    an optional package that is not installed
        └── GraphError, FrontendError, ClusterError, PlanError, CostModelError,
            ExecutionError, RewriteError, WriteError

The command line turns any of them into one line, ``error: MESSAGE``, and its
:attr:`~GraphoptException.exit_code`, so every message must say what is wrong and where
(file, node, option), the value received and what was expected.
"""

import dataclasses
import math
from collections.abc import Callable

__all__ = [
    "MAX_SEED",
    "MAX_THREADS",
    "BadFileError",
    "BudgetExhausted",
    "CheckpointError",
    "ClusterError",
    "FrontendError",
    "GraphError",
    "GraphFormatError",
    "GraphoptError",
    "GraphoptException",
    "InfeasibleError",
    "MissingDependencyError",
    "PlanError",
    "ProfileError",
    "CostModelError",
    "ExecutionError",
    "RewriteError",
    "UsageError",
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


class GraphoptException(Exception):
    """Base class of everything graphopt raises on purpose. The command line prints its
    message on one line and exits with :attr:`exit_code`."""

    #: The command's exit status when one reaches the command line.
    exit_code = 1


class GraphoptError(GraphoptException):
    """Base class of every error graphopt raises for bad input (exit status 2)."""

    exit_code = 2


class BudgetExhausted(GraphoptException):
    """A search's evaluation or time budget is spent, or a stop was requested: raised by
    :meth:`graphopt.evaluate.local.LocalEvaluator.evaluate` and ``.simulate``. Methods
    catch it to end their search: it is the normal end of one, not bad input, so it is no
    :class:`GraphoptError`. :func:`graphopt.optim.optimize` turns one that escapes a
    method before it had any plan (a budget too small to simulate once) into a
    :class:`UsageError`."""


class UsageError(GraphoptError):
    """A bad option or value on the command line (or the same argument to a function):
    out of range, of the wrong form, unknown, or given with an option it excludes."""


class BadFileError(GraphoptError):
    """A file (or folder) that is not what it claims: the wrong format or version, a field
    missing or of the wrong type, a policy or index that does not match this graphopt."""


class InfeasibleError(GraphoptError):
    """A problem no plan can solve: nothing fits the devices' memory, no candidate is
    valid."""


class MissingDependencyError(GraphoptError):
    """An optional package (an extra) a method or source needs is not installed; the
    message says what to install."""


class GraphError(GraphoptError):
    """A graph breaks the IR's invariants (a cycle, a bad index, a negative size)."""


class FrontendError(GraphoptError):
    """A model cannot be turned into a graph: it fails to export or trace."""


class GraphFormatError(BadFileError):
    """A graph file cannot be read: truncated, wrong format, pickled, missing keys."""


class ClusterError(GraphoptError):
    """An unknown preset, a malformed TOML file or an impossible device count."""


class PlanError(GraphoptError):
    """A plan does not fit its problem: wrong length, device index out of range."""


class ProfileError(BadFileError):
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


class CheckpointError(BadFileError):
    """A checkpoint folder that cannot be resumed: corrupt, or from another run."""


class RewriteError(GraphoptError):
    """A program cannot be rewritten: it fails to export, or its rewritten form differs."""


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
