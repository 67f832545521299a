"""The ``graphopt`` command's entry point.

It imports nothing heavy itself, so that a Ctrl-C while the command line is still
loading (about 0.4 s of imports) ends like one during a command: one line and exit
status 130, never a traceback.
"""

import sys


def main() -> None:
    """Load the command line and run it."""
    try:
        from graphopt.cli import app

        app()
    except KeyboardInterrupt:
        print("graphopt: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
