"""Issue 37: a usage error that Typer finds itself (a value of the wrong type, a value
under an option's ``min``, an unknown option or command, a missing or extra argument) is
one line, ``error: MESSAGE (see 'graphopt CMD --help')``, exit 2, as every other bad
input; Typer drew a box of four to six lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphopt.cli import app

runner = CliRunner()

CASES = [  # (argv, what the line names)
    ("optimize example:mlp --budget 1e18", "'--budget'"),
    ("optimize example:mlp --seed abc", "'--seed'"),
    ("optimize example:mlp --bogus", "--bogus"),
    ("optimize example:mlp -b", "-b"),
    ("optimize example:mlp extra words", "(extra words)"),
    ("optimize", "'graph'"),
    ("simulate example:mlp --cluster", "--cluster"),
    ("train --lr x", "'--lr'"),
    ("tune example:mlp --trials 1.5", "'--trials'"),
    ("bench mcm --bogus", "--bogus"),
    ("costmodel train --epochs x", "'--epochs'"),
    ("zoo build --nope", "--nope"),
    ("nosuch", "'nosuch'"),
    ("--bogus", "--bogus"),
]


@pytest.mark.parametrize("argv, named", CASES, ids=[a for a, _ in CASES])
def test_a_usage_error_is_one_line_naming_the_option(argv, named):
    r = runner.invoke(app, argv.split(), terminal_width=80)
    assert r.exit_code == 2, r.output + repr(r.exception)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], r.output
    assert not {"╭", "│", "Usage:", "Traceback"} & set(r.output.split()), r.output
    if " " in argv and not argv.startswith("-"):  # a sub-command's: its --help is named
        assert f"{argv.split()[0]}" in lines[0] and "--help')" in lines[0]


def test_help_for_no_arguments_is_still_shown():
    r = runner.invoke(app, ["bench"])
    assert r.exit_code == 2 and "Usage:" in r.output and "mcm" in r.output


def test_the_real_entry_point_prints_one_line_on_stderr():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    r = subprocess.run([sys.executable, "-m", "graphopt.cli", "optimize", "example:mlp",
                        "--budget", "1e18"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: Invalid value for '--budget'")


def _numeric_options():
    """``(command, option)`` for every int or float option of every command."""
    import typer

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])
        if not hasattr(cmd, "commands"):
            yield path, cmd

    for path, cmd in walk(typer.main.get_command(app), []):
        for p in cmd.params:
            kind = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if p.opts[0].startswith("--") and {int, float} & set(getattr(kind, "__args__", (kind,))):
                yield " ".join(path), p


def test_every_numeric_option_says_its_range_in_help():
    """Its bounds (Typer's ``[1<=x<=10000]``), or the range its check holds it to in the
    help text (``1..10,000``, ``Range: > 0``): issue 37, 'say so in --help'."""
    import re

    options = list(_numeric_options())
    silent = [f"{cmd} {p.opts[0]}" for cmd, p in options
              if getattr(p, "min", None) is None and getattr(p, "max", None) is None
              and not re.search(r"\d\.\.\d|Range: ", p.help or "")]
    assert len(options) > 80 and silent == []
