"""``python -m graphopt.cli``: the ``graphopt`` command."""

from graphopt._main import main

main()
