"""The ``graphopt`` command's entry point.

It imports nothing heavy itself, so that a Ctrl-C while the command line is still
loading (about 0.4 s of imports) ends like one during a command: one line and exit
status 130, never a traceback.
"""

import errno
import sys
import warnings
from pathlib import Path


def one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Print a warning as one line, ``warning: MESSAGE (Category, file.py:LINE)``, where
    Python's own format adds the source line and the message's further lines."""
    text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
    print(f"warning: {text} ({category.__name__}, {Path(filename).name}:{lineno})",
          file=file or sys.stderr)


def main() -> None:
    """Load the command line and run it."""
    warnings.showwarning = one_line_warning
    # torch.export's own use of a deprecated torch API: nothing a user can act on
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
    try:
        from graphopt.errors import GraphoptException
        from graphopt.cli import app

        app()
    except KeyboardInterrupt:
        print("graphopt: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except GraphoptException as err:  # one a command raised past its own one-line handler
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    except OSError as err:
        if err.errno not in WRITE_ERRNOS:
            raise
        where = f"{err.filename}: cannot write" if err.filename else "a write failed"
        print(f"error: {where} ({err.strerror})", file=sys.stderr)
        raise SystemExit(2) from None


#: What a file system answers a write it refuses: a full disk, a quota, ``ulimit -f``, a
#: read-only mount; printed as one line, exit 2, never a traceback.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
