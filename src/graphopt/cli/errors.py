"""How a command ends on bad input: one line, never a traceback. :func:`fail` prints a
:class:`~graphopt.errors.GraphoptException` as ``error: MESSAGE`` and exits with its
``exit_code``; :class:`OneLineUsageErrors`, the top command group, does so for every
command (the one handler: a command raises, it never catches to print), and prints click's
usage errors as one line too.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
import typer.core
from rich.markup import escape

from graphopt.cli._common import console
from graphopt.errors import GraphoptException

__all__ = ["fail", "usage_line", "OneLineUsageErrors"]


def fail(err: Exception) -> NoReturn:
    """Print ``err`` as one line and exit with its ``exit_code`` (2, a user's mistake, for a
    :class:`~graphopt.errors.GraphoptError` and anything without one): no traceback."""
    console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
    raise typer.Exit(getattr(err, "exit_code", 2))


def _usage_error_types() -> tuple[type, type]:
    """Click's ``UsageError`` and ``NoArgsIsHelpError`` as the running Typer raises them:
    from 0.22 or so Typer parses with its own copy of click (``typer._click``), whose
    exceptions are not the ``click`` package's."""
    try:
        from typer._click.exceptions import NoArgsIsHelpError, UsageError
    except ImportError:  # a Typer on the click package
        from click.exceptions import NoArgsIsHelpError, UsageError
    return UsageError, NoArgsIsHelpError


def usage_line(err: Exception, command: str | None = None) -> str:
    """``err`` (a click usage error: a value of the wrong type, under an option's
    ``min``, an unknown option or command, a missing argument) as one line naming the
    option, and the command whose ``--help`` says more: the error's own, else ``command``
    (click raises "Option '-b' requires an argument." without one).

    Examples
    --------
    >>> import typer
    >>> usage_line(typer.BadParameter("not a number", param_hint="'--seed'"))
    "Invalid value for '--seed': not a number"
    """
    text = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    if ctx is not None and ctx.parent is not None:  # the top level's help is the one it shows
        command = ctx.command_path
    return f"{text} (see '{command} --help')" if command else text


def _one_line(err: Exception, ctx=None) -> NoReturn:
    # stderr as a plain line: Typer's own display is a box of 4 to 6 lines (rich) or
    # three (usage, hint, error)
    sub = getattr(ctx, "invoked_subcommand", None)
    command = f"{ctx.command_path} {sub}" if sub else None
    print(f"error: {usage_line(err, command)}", file=sys.stderr, flush=True)
    raise typer.Exit(2) from None


class OneLineUsageErrors(typer.core.TyperGroup):
    """The top command group, which prints every usage error of any sub-command as one
    line, ``error: MESSAGE (see 'graphopt CMD --help')``, and exits 2, like every other
    bad input, where Typer draws a box. Help asked for by giving no arguments is still
    shown. It is also the one handler of :class:`~graphopt.errors.GraphoptException`: one
    raised by any command (or its options' callbacks) is printed by :func:`fail` as
    ``error: MESSAGE`` and ends the command with its exit code, so a command raises and
    never catches to print. A sub-command's arguments are parsed and its body run inside
    this group's :meth:`invoke`, so one override here covers every command below."""

    def make_context(self, info_name, args, parent=None, **extra):
        usage, no_args = _usage_error_types()
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except usage as err:
            if isinstance(err, no_args):
                raise
            _one_line(err)

    def invoke(self, ctx):
        usage, no_args = _usage_error_types()
        try:
            return super().invoke(ctx)
        except usage as err:
            if isinstance(err, no_args):
                raise
            _one_line(err, ctx)
        except GraphoptException as err:
            fail(err)
