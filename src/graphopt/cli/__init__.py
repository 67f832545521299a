"""The ``graphopt`` command.

Every sub-command prints a table a person can read and writes files a program can;
a mistake in the input prints one line naming what is wrong and exits 2.

One module per command group; each imports the heavy parts of graphopt (torch, the
numba simulator, the cost models) inside the commands that need them, so that
``graphopt --help`` and the light commands start at once.
"""

from __future__ import annotations

import typer

from graphopt.cli import (bench, corpus, costmodel, export, graphs, optimize, rewrite, run,
                          simulate, train, tune)
from graphopt.cli.errors import OneLineUsageErrors
from graphopt.cli.params import method_params

__all__ = ["app", "method_params"]

app = typer.Typer(cls=OneLineUsageErrors, add_completion=False, no_args_is_help=True,
                  help="Optimize ML computation graphs: placement, scheduling and fusion.\n\n"
                       "Example: graphopt simulate graph.npz --cluster dgx1-v100:4 --gantt g.png")
for _group in (graphs, simulate, optimize, run, export, tune, rewrite):
    app.add_typer(_group.app)
app.add_typer(train.app, name="train")
app.add_typer(bench.app, name="bench")
app.add_typer(graphs.zoo_app, name="zoo")
app.add_typer(costmodel.app, name="costmodel")
app.add_typer(corpus.app, name="corpus")
