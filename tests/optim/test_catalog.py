"""``graphopt methods`` reads the registry from the sources (optim/catalog.py): it must
name exactly the registered methods, with their docstrings' first sentences."""

from __future__ import annotations

import subprocess
import sys

from graphopt.optim import get_optimizer, list_optimizers
from graphopt.optim.catalog import catalog, first_sentence


def test_catalog_is_the_registry():
    cat = catalog()
    assert list(cat) == list_optimizers()
    for name, what in cat.items():
        assert what == first_sentence(type(get_optimizer(name)).__doc__), name
        assert what.endswith(".") and "`" not in what and ":func:" not in what, (name, what)


def test_methods_list_imports_no_method():
    code = ("import sys; from graphopt.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['methods']); assert r.exit_code == 0, r.output; "
            "assert 'portfolio' in r.output and '--init best' in r.output; "
            "heavy = {'torch', 'numba', 'ortools', 'graphopt.optim.base'} & set(sys.modules); "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
