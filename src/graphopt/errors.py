"""One error hierarchy for everything graphopt rejects.

The CLI catches :class:`GraphoptError`, prints its message on one line and exits 2,
so every message must say what is wrong and where (file, node, option), the value
received and what was expected.
"""

__all__ = [
    "ClusterError",
    "FrontendError",
    "GraphError",
    "GraphFormatError",
    "GraphoptError",
    "PlanError",
    "ProfileError",
    "CostModelError",
    "ExecutionError",
]


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


class ExecutionError(GraphoptError):
    """A plan cannot be run for real: a worker died, hung, or an op failed on its device."""
