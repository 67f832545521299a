"""The simulator's warm-up: its engine compiled (or loaded from numba's cache) before any
method is timed."""

from __future__ import annotations



from graphopt.cli._common import console

__all__ = ["compile_simulator"]


def compile_simulator() -> None:
    """Compile the simulator's engine now, before any method is timed (numba caches it
    on disk, so only a fresh install pays), and say so when it happens."""
    from graphopt.sim import ensure_compiled

    with console.status("loading the simulator ..."):
        if ensure_compiled():
            console.print("compiled the simulator once (cached for later runs)")
