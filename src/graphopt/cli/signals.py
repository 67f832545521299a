"""SIGTERM and SIGHUP ending a command as Ctrl-C does (:func:`interrupt_on_signals`)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

import typer
import typer.core


__all__ = ["interrupt_on_signals"]


@contextlib.contextmanager
def interrupt_on_signals():
    """Within this block SIGTERM (``kill``, a batch system's time limit) and SIGHUP (the
    terminal closed) end the command as Ctrl-C does: ``KeyboardInterrupt``, which closes
    the worker processes on its way out; the block then prints one line, ``graphopt:
    interrupted``, and exits with status 130 (Typer would exit 130 without a word).
    Without it SIGTERM killed the parent at once and its orphaned workers printed
    tracebacks of the broken pipe. For commands that hold no search: a search's
    :func:`graphopt.evaluate.interrupt.stop_on_interrupt` saves its best plan instead. Outside
    the main thread the signals are left as they are."""
    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                previous[sig] = signal.signal(sig, interrupt)
    try:
        yield
    except KeyboardInterrupt:
        print("graphopt: interrupted", file=sys.stderr, flush=True)
        raise typer.Exit(130) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
