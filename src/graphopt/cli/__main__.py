"""``python -m graphopt.cli``: the ``graphopt`` command."""

from graphopt.cli import app

app()
