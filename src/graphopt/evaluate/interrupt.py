"""Ctrl-C (or SIGTERM, SIGHUP) as a request to stop long work at its next safe point with
the best so far: :func:`stop_on_interrupt` turns the signal into the request, every
:class:`~graphopt.evaluate.local.LocalEvaluator` and trainer polls :func:`stop_requested`."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["STOP_SIGNALS", "stop_on_interrupt", "stop_requested"]

_stop = threading.Event()
_active = threading.Lock()


#: The signals :func:`stop_on_interrupt` turns into a request to stop with the best so far.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_requested() -> bool:
    """Whether Ctrl-C (or another of :data:`STOP_SIGNALS`) asked the work under
    :func:`stop_on_interrupt` to stop."""
    return _stop.is_set()


@contextlib.contextmanager
def stop_on_interrupt(notice: str = "stopping at the next safe point with the best so far "
                                    "(Ctrl-C again to abort) ...") -> Iterator[None]:
    """Within this block the first Ctrl-C (SIGINT), or SIGTERM (``kill``, a batch system's
    time limit) or SIGHUP (the terminal closed), only asks the work to stop: every
    :class:`~graphopt.evaluate.local.LocalEvaluator` then refuses further batches as if
    its budget were spent, so a search ends with its best plan so far (an evaluator still
    admits its first batch), and a trainer polls :func:`stop_requested` between whole
    updates. A second one raises ``KeyboardInterrupt`` as Ctrl-C does.

    A raised ``KeyboardInterrupt`` would land wherever the main thread happens to be:
    inside numba's batch simulator (where it surfaces as a ``SystemError``) or halfway
    through an optimizer step. Nested blocks share the outer one; outside the main
    thread (where signals cannot be handled) the block changes nothing. The request is
    cleared when the outermost block ends.

    Examples
    --------
    >>> with stop_on_interrupt():
    ...     stop_requested()
    False
    """
    if threading.current_thread() is not threading.main_thread() or \
            not _active.acquire(blocking=False):
        yield
        return

    def request(signum, frame) -> None:
        if _stop.is_set():
            raise KeyboardInterrupt
        _stop.set()
        try:
            name = "" if signum == signal.SIGINT else f"{signal.Signals(signum).name}: "
            print(f"\n{name}{notice}", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # SIGHUP: the terminal may be gone
            pass

    previous = {sig: signal.signal(sig, request) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stop.clear()
        _active.release()
