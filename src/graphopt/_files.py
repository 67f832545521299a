"""Reading files from outside: the one check every reader makes before it opens a path.

The lowest layer beside :mod:`graphopt.errors`, so that every package that reads files
(``ir``, ``hardware``) uses the same check.
"""

from __future__ import annotations

import os
import stat

from graphopt.errors import GraphFormatError

__all__ = ["regular_file"]


def regular_file(path: str | os.PathLike, error: type[Exception] = GraphFormatError) -> int:
    """The size of the regular file ``path`` (links followed), or ``error`` with one line
    naming it: missing, a folder, or a device, pipe or socket, whose size says nothing of
    what reading it gives (``/dev/zero`` never ends, a pipe may never answer).

    >>> regular_file("/dev/zero")
    Traceback (most recent call last):
    graphopt.errors.GraphFormatError: /dev/zero: not a regular file (a device, pipe or socket)
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as err:  # a loop of links, a name too long, no permission
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{path}: is a folder, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: not a regular file (a device, pipe or socket)")
    return st.st_size
