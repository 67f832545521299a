"""The options several commands share, each defined once: ``--cluster``, ``--out``,
``--seed``, ``--backend``, ``--address``, ``--budget``, ``--trials`` and ``--methods``,
and the one rule for a command's default cluster (:func:`default_cluster`).

Each function returns the ``typer.Option`` a command puts as a parameter's default, with
its help text (ending in an example), its bounds and a check that prints one line and
exits 2 on a bad value (``-c h100:٢``, ``--seed -1``, ``--methods sa,sa``). A command may
pass its own default and help where its meaning differs (``run``'s cluster is this
machine's devices), but the option's names, bounds and checks stay these.

Imports nothing heavy (see :mod:`graphopt.cli._common`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from graphopt.errors import UsageError, MAX_SEED
from graphopt.frontends.source import DEFAULT_CLUSTER, Source

__all__ = ["ADDRESS_HELP", "BACKEND_HELP", "DEFAULT_CLUSTER", "MAX_BUDGET", "MAX_TRIALS",
           "address_option", "backend_option", "budget_option", "check_cluster_spec",
           "check_methods", "cluster_option", "default_cluster", "methods_option",
           "out_option", "seed_option", "split_item", "split_methods", "trials_option"]

MAX_BUDGET = 10**9
MAX_TRIALS = 10_000

DEFAULT_CLUSTER_HELP = ("default for a zoo model: dgx1-v100 with the device count of GO's "
                        f"Table 2 (zoo:gnmt-2 gets dgx1-v100:2), else {DEFAULT_CLUSTER}")

BACKEND_HELP = ("Where the simulations run: 'local' (this process) or 'ray' (a pool of Ray "
                "actors, one per CPU, on a local Ray started for the run or the cluster of "
                "--address; see docs/distributed.md). Example: --backend ray")

ADDRESS_HELP = ("With --backend ray, the Ray cluster to join: 'auto' (the one this node "
                "belongs to), HOST:6379 or ray://HOST:10001; default a local Ray started for "
                "the run. Example: --address auto")


def default_cluster(graph: str) -> str:
    """The cluster a command uses for ``graph`` when no ``--cluster`` is given: a zoo
    model (``zoo:NAME``) gets dgx1-v100 with its device count in GO's Table 2, anything
    else :data:`DEFAULT_CLUSTER`.

    Examples
    --------
    >>> default_cluster("zoo:gnmt-2"), default_cluster("example:mlp")
    ('dgx1-v100:2', 'dgx1-v100:4')
    """
    return Source.parse(graph).default_cluster()


def split_item(item: str, cluster: str | None) -> tuple[str, str]:
    """``GRAPH@CLUSTER`` or ``GRAPH`` (then on ``cluster``, or when that is None on
    :func:`default_cluster`) as ``(GRAPH, CLUSTER)``, as ``tune`` and ``train`` read
    their items (:func:`graphopt.frontends.split_source`).

    Examples
    --------
    >>> split_item("zoo:gnmt-2", None), split_item("example:mlp@p100:2", "h100:8")
    (('zoo:gnmt-2', 'dgx1-v100:2'), ('example:mlp', 'p100:2'))
    """
    from graphopt.frontends import split_source

    graph, at, _ = item.rpartition("@")
    graph = graph if at else item
    return split_source(item, cluster or (default_cluster(graph) if graph and not at else None))


def check_cluster_spec(spec: str, option: str = "--cluster") -> str:
    """``spec`` when it can name a cluster (``NAME[:COUNT]`` or a .toml file) and its
    device count, if any, is ASCII digits (Python's ``int`` also reads ``٢``).

    Raises
    ------
    GraphoptError
        A count that is not ASCII digits, naming the option.

    Examples
    --------
    >>> check_cluster_spec("h100:2")
    'h100:2'
    >>> check_cluster_spec("h100:٢")
    Traceback (most recent call last):
    graphopt.errors.UsageError: --cluster 'h100:٢': device count '٢' is not ASCII digits (NAME[:COUNT])
    """
    if ":" in spec and not spec.endswith(".toml"):
        count = spec.rpartition(":")[2]
        if not (count.isascii() and count.isdigit()):
            raise UsageError(f"{option} {spec!r}: device count {count!r} is not ASCII "
                             "digits (NAME[:COUNT])")
    return spec


def split_methods(text: str, option: str = "--methods") -> list[str]:
    """The comma-separated names of ``text``, stripped, blanks dropped.

    Raises
    ------
    GraphoptError
        A name given twice.

    Examples
    --------
    >>> split_methods("metis, sa")
    ['metis', 'sa']
    >>> split_methods("sa,sa")
    Traceback (most recent call last):
    graphopt.errors.UsageError: --methods 'sa,sa': sa is named twice
    """
    names = [m.strip() for m in text.split(",") if m.strip()]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise UsageError(f"{option} {text!r}: {name} is named twice")
    return names


def check_methods(text: str, option: str = "--methods") -> str:
    """``text`` after :func:`split_methods` found no name twice."""
    split_methods(text, option)
    return text


def _checked(check, option: str):
    """A typer callback: ``check(value, option)``, a :class:`GraphoptError` printed as one
    line and exit 2."""
    def callback(value):
        if value is None:
            return value
        return check(value, option)  # a GraphoptError: the command group's one-line handler
    return callback


def _bounded(lo: float, hi: float, option: str, what: str = "a whole number"):
    def check(value, option):
        if not lo <= value <= hi:
            raise UsageError(f"{option} {value}: expected {what} in {lo:,}..{hi:,}")
        return value
    return _checked(check, option)


def cluster_option(default: str | None = None, *, default_help: str = DEFAULT_CLUSTER_HELP,
                   what: str = "", example: str = "p100:4") -> Any:
    """``--cluster``/``-c``: a preset ``NAME[:COUNT]`` or a .toml file. ``default`` None
    stands for :func:`default_cluster` unless ``default_help`` says otherwise; ``what``
    is a sentence on what the cluster is for in this command."""
    text = ("Preset NAME[:COUNT] ('graphopt clusters' lists them) or a .toml file (from "
            f"'graphopt calibrate'){'. ' + what if what else ''}; {default_help}. "
            f"Example: {example}")
    return typer.Option(default, "--cluster", "-c", help=text,
                        show_default=default is not None,
                        callback=_checked(check_cluster_spec, "--cluster"))


def out_option(default: Path | None, help: str, *, short: bool = True) -> Any:
    """``--out``/``-o``: where a command writes; ``help`` says what and ends with an
    example. ``...`` as ``default`` makes it required."""
    names = ("--out", "-o") if short else ("--out",)
    return typer.Option(default, *names, help=help)


def seed_option(help: str = "Seed of every random choice.", default: int = 0) -> Any:
    """``--seed``: a whole number in 0..2**32-1."""
    return typer.Option(default, "--seed", help=f"{help} 0..{MAX_SEED:,}. Example: 7",
                        callback=_bounded(0, MAX_SEED, "--seed"))


def backend_option(extra: str = "", *, help: str | None = None) -> Any:
    """``--backend``: local or ray (:data:`BACKEND_HELP` and ``extra``, or ``help``)."""
    return typer.Option("local", "--backend", help=help or BACKEND_HELP + extra)


def address_option() -> Any:
    """``--address``: the Ray cluster of ``--backend ray``."""
    return typer.Option(None, "--address", help=ADDRESS_HELP)


def budget_option(default: int, help: str = "Simulator evaluations allowed to each search "
                                            "method.", *, short: bool = True) -> Any:
    """``--budget``/``-b``: evaluations, 1..10**9."""
    names = ("--budget", "-b") if short else ("--budget",)
    return typer.Option(default, *names, help=f"{help} 1..{MAX_BUDGET:,}. Example: 5000",
                        callback=_bounded(1, MAX_BUDGET, "--budget"))


def trials_option(default: int = 16, help: str = "Settings tried, the method's defaults "
                                                 "first.") -> Any:
    """``--trials``: 1..10,000."""
    return typer.Option(default, "--trials", help=f"{help} 1..{MAX_TRIALS:,}. Example: 64",
                        callback=_bounded(1, MAX_TRIALS, "--trials"))


def methods_option(default: str, help: str = "Methods to compare, comma-separated "
                                             "('graphopt methods' lists them).", *,
                   short: bool = True, example: str = "metis,sa,brkga") -> Any:
    """``--methods``/``-m``: comma-separated names, none twice."""
    names = ("--methods", "-m") if short else ("--methods",)
    return typer.Option(default, *names, help=f"{help} Example: {example}",
                        callback=_checked(check_methods, "--methods"))
