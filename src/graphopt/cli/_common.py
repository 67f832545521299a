"""What every command group shares: the console, one-line errors, graph arguments,
``-p METHOD.KEY=VALUE`` parsing and options generated from dataclass fields.

Imports nothing heavy: ``graphopt --help`` builds every command from this module and
the command modules, so torch, numba and the cost models load only inside a command
that uses them.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import tempfile
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from graphopt.errors import GraphoptError, check_fields

__all__ = ["ADDRESS_HELP", "BACKEND_HELP", "GRAPH_HELP", "PARAM_HELP", "check_output", "check_run_folder",
           "compile_simulator", "console", "evaluation_backend", "fail", "field_help",
           "method_params", "mib", "options_from_fields", "parse_bench_args", "parse_field"]

# Tables are wide; when output goes to a file or a pipe, do not squeeze them to 80 columns.
console = Console(width=None if Console().is_terminal else 140)

GRAPH_HELP = ("Graph file (.npz or .json saved by graphopt), a zoo model 'zoo:NAME' (see "
              "'graphopt zoo list'), a Hugging Face model 'hf:MODEL_TYPE[:key=value,...]' "
              "(random weights, e.g. hf:bert:num_hidden_layers=2,seq=128), or a built-in "
              "example: 'example:mlp' (a 4-layer MLP training step) or 'example:layered-N' "
              "(a random layered graph of about N ops), "
              "or a model file to import: .pt2 (torch.export.save), .onnx, a TpuGraphs .npz or "
              "tuning .pb. Example: zoo:gnmt-4")

PARAM_HELP = ("Set a method's hyperparameter, METHOD.KEY=VALUE (repeatable; 'graphopt methods "
              "METHOD' lists the keys, their types, defaults and help), or every one in a "
              ".json file written by 'graphopt tune'. Example: "
              "-p rl-lstm.lr=0.01 -p hdp.checkpoint_dir=runs/ckpt -p runs/tune/best.json")

BACKEND_HELP = ("Where the simulations run: 'local' (this process) or 'ray' (a pool of Ray "
                "actors, one per CPU, on a local Ray started for the run or the cluster of "
                "--address; see docs/distributed.md). Example: --backend ray")

ADDRESS_HELP = ("With --backend ray, the Ray cluster to join: 'auto' (the one this node "
                "belongs to), HOST:6379 or ray://HOST:10001; default a local Ray started for "
                "the run. Example: --address auto")


def fail(err: Exception) -> NoReturn:
    """Print ``err`` as one line and exit 2 (a user's mistake: no traceback)."""
    console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def check_output(path: Path | None, option: str, *, folder: bool = False) -> None:
    """Check, before any work starts, that ``path`` (given to ``option``) can be written,
    so that a long run never fails at its end for want of a place to put its result.

    A file must not be a folder and a folder not a file; every part of the name must
    fit the file system's limits; the nearest existing folder above must be a folder
    (not a file) that this user may write in. Missing folders are fine: writing makes
    them. None (the option not given) passes. Does not check free space.

    Raises
    ------
    GraphoptError
        One line naming the option, the path and what is wrong.

    Examples
    --------
    >>> check_output(Path("/"), "--out")
    Traceback (most recent call last):
    graphopt.errors.GraphoptError: --out /: is a folder, expected a file
    """
    if path is None:
        return
    path = Path(path)
    where = f"{option} {path}"
    existing = path.absolute()
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    name_max = os.pathconf(existing if existing.is_dir() else existing.parent, "PC_NAME_MAX")
    long = [p for p in path.parts if len(os.fsencode(p)) > name_max]
    if long:
        raise GraphoptError(f"{where}: a name of {len(os.fsencode(long[0]))} bytes exceeds the "
                            f"file system's limit of {name_max}")
    if len(os.fsencode(str(path.absolute()))) >= os.pathconf("/", "PC_PATH_MAX"):
        raise GraphoptError(f"{where}: the path exceeds the file system's limit of "
                            f"{os.pathconf('/', 'PC_PATH_MAX')} bytes")
    if existing == path.absolute():
        if folder and not path.is_dir():
            raise GraphoptError(f"{where}: is a file, expected a folder")
        if not folder and path.is_dir():
            raise GraphoptError(f"{where}: is a folder, expected a file")
        if not folder and path.exists() and not path.is_file():  # links followed
            raise GraphoptError(f"{where}: not a regular file (a device, pipe or socket)")
        existing = path.absolute() if folder else path.absolute().parent
    if not existing.is_dir():
        raise GraphoptError(f"{where}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise GraphoptError(f"{where}: cannot write in {existing} (permission denied)")
    try:  # access() says yes to root everywhere, and to folders like /proc where nothing can be made
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise GraphoptError(f"{where}: cannot write in {existing} ({err.strerror})") from None


def check_run_folder(out: Path, option: str = "--out") -> None:
    """:func:`check_output` of a trainer's folder (given to ``option``) and of every file
    the trainer writes there (:data:`graphopt.rl.run.RUN_FILES`): a folder named
    ``policy.json`` there failed only when the run saved, after training."""
    from graphopt.rl.run import RUN_FILES

    check_output(out, option, folder=True)
    for name in RUN_FILES:
        check_output(out / name, option)


def parse_bench_args(parser: argparse.ArgumentParser,
                     outputs: tuple[str, ...] = ("out", "docs")) -> argparse.Namespace:
    """``parser.parse_args()`` for a script in ``bench/``, then every output option of
    ``outputs`` that was given (its dest) checked by :func:`check_output` before any work
    starts: a path that cannot be written exits 2 with one line naming the option."""
    args = parser.parse_args()
    for dest in outputs:
        value = getattr(args, dest, None)
        if value and not isinstance(value, bool):  # a flag (go_outside's --docs) names no path
            try:
                check_output(Path(value), "--" + dest.replace("_", "-"))
            except GraphoptError as err:
                parser.exit(2, f"{parser.prog}: error: {err}\n")
    return args


def compile_simulator() -> None:
    """Compile the simulator's engine now, before any method is timed (numba caches it
    on disk, so only a fresh install pays), and say so when it happens."""
    from graphopt.sim import ensure_compiled

    with console.status("loading the simulator ..."):
        if ensure_compiled():
            console.print("compiled the simulator once (cached for later runs)")


def check_plan(plan, problem, path: Path | None, *, same_graph: bool = False) -> None:
    """Check a plan loaded from ``path`` against ``problem`` (its length, its device
    indices; with ``same_graph``, that it was made for this graph:
    :func:`graphopt.sim.plan.check_made_for`), so that the error names the plan
    file; no path (no --plan) passes."""
    if path is None:
        return
    try:
        if same_graph:
            from graphopt.sim.plan import check_made_for

            check_made_for(plan, problem.graph)
        plan.check(problem.num_nodes, problem.num_devices)
    except GraphoptError as err:
        raise type(err)(f"{path}: {err}") from None


def evaluation_backend(backend: str, address: str | None, *, pool: bool = True):
    """The block a command runs its methods in: nothing for ``local``; for ``ray``, Ray
    started or joined at ``address`` and, with ``pool``, every method's evaluator on a
    pool of Ray actors (:func:`graphopt.dist.ray.ray_backend`). Ray is imported only here.

    Raises
    ------
    GraphoptError
        An unknown backend, ``--address`` without ``ray``, or Ray not installed.
    """
    import contextlib

    if backend not in ("local", "ray"):
        raise GraphoptError(f"--backend {backend!r}: expected local or ray")
    if backend == "local":
        if address:
            raise GraphoptError(f"--address {address}: only with --backend ray")
        return contextlib.nullcontext()
    try:
        from graphopt.dist import ray as dist_ray
    except ModuleNotFoundError as err:
        raise GraphoptError(f"--backend ray needs {err.name}: pip install 'graphopt[ray]'"
                            ) from None
    return dist_ray.ray_backend(address) if pool else dist_ray.ray_session(address)


def mib(x: float) -> str:
    """Bytes shown as MiB with one decimal."""
    return f"{x / 2**20:,.1f}"


def field_help(f: dataclasses.Field) -> str:
    """A hyperparameter's one-line help, from its field's ``metadata["help"]``."""
    return f.metadata.get("help", "")


def _field_kinds(cls: type, name: str) -> tuple[type, bool]:
    """The type a field's text parses to and whether it may be None."""
    hint = typing.get_type_hints(cls)[name]
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return next(k for k in kinds if k is not type(None)), type(None) in kinds


def parse_field(cls: type, name: str, text: str):
    """``text`` parsed by the type of dataclass field ``cls.name``: int, float, bool
    (true/false, yes/no, on/off, 1/0) or str; ``none`` for an optional field is None.

    Raises
    ------
    ValueError
        The text does not parse as the field's type (the message names the type).
    """
    kind, optional = _field_kinds(cls, name)
    if optional and text.lower() in ("none", "null"):
        return None
    try:
        if kind is bool:
            return {"true": True, "yes": True, "on": True, "1": True, "false": False,
                    "no": False, "off": False, "0": False}[text.lower()]
        return kind(text)
    except (KeyError, ValueError):
        raise ValueError(f"expects {getattr(kind, '__name__', kind)}, got {text!r}") from None


def method_params(specs: list[str], methods: list[str]) -> dict[str, dict]:
    """``METHOD.KEY=VALUE`` options as constructor arguments per method.

    Each value is parsed by the type of the method's dataclass field (see
    :func:`parse_field`).

    Raises
    ------
    GraphoptError
        A malformed option, a method not among ``methods`` or not known, a field the
        method does not have, a value that does not parse as the field's type, one the
        method rejects (out of its range, see ``graphopt.optim.base.check_params``), or
        a run folder the method writes (field metadata ``"output": "run"``) that cannot
        be written (:func:`check_run_folder`, before any work).

    Examples
    --------
    >>> method_params(["rl-lstm.lr=0.01", "rl-lstm.progress=false"], ["rl-lstm"])
    {'rl-lstm': {'lr': 0.01, 'progress': False}}
    """
    from graphopt.optim import get_optimizer

    out: dict[str, dict] = {}
    origins: dict[str, str] = {}  # where each method's values came from: "" or "FILE: "
    for origin, spec in [one for given in specs for one in _param_file(given)]:
        where = f"--param {origin}{spec!r}"
        target, eq, text = spec.partition("=")
        method, dot, key = target.rpartition(".")
        if not (eq and dot and method and key):
            raise GraphoptError(f"{where}: expected METHOD.KEY=VALUE, e.g. "
                                "rl-lstm.lr=0.01")
        if method not in methods:
            raise GraphoptError(f"{where}: method {method!r} is not among the methods "
                                f"run ({', '.join(methods)})")
        cls = type(get_optimizer(method))
        fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) \
            else {}
        if key not in fields:
            raise GraphoptError(f"{where}: {method} has no parameter {key!r}; it has "
                                f"{', '.join(sorted(fields)) or 'none'}")
        try:
            value = parse_field(cls, key, text)
        except ValueError as err:
            raise GraphoptError(f"{where}: {method}.{key} {err}") from None
        if value is not None and fields[key].metadata.get("output") == "run":
            check_run_folder(Path(value), f"--param {origin}{method}.{key}")
        out.setdefault(method, {})[key] = value
        origins[method] = origin
    for method, kwargs in out.items():  # a value out of range fails now, not after loading
        try:
            get_optimizer(method, **kwargs)
        except GraphoptError as err:
            raise GraphoptError(f"--param {origins[method]}{err}") from None
    return out


def _param_file(spec: str) -> list[tuple[str, str]]:
    """``spec`` itself, or when it names a .json file (``graphopt tune``'s output: its
    ``params``, ``{METHOD: {KEY: VALUE}}``) one METHOD.KEY=VALUE per value there; each
    after where it came from, for errors (``""``, or ``"FILE: "``)."""
    from graphopt._files import read_json

    if "=" in spec or not spec.endswith(".json"):
        return [("", spec)]
    try:
        params = read_json(spec, GraphoptError)["params"]
        pairs = [f"{method}.{key}={'none' if value is None else value}"
                 for method, values in params.items() for key, value in values.items()]
        return [(f"{spec}: ", one) for one in pairs]
    except GraphoptError as err:  # missing, not JSON, nested too deeply: read_json names it
        raise GraphoptError(f"--param {err}") from None
    except (KeyError, TypeError, AttributeError):
        raise GraphoptError(f"--param {spec}: not a parameter file (JSON with \"params\": "
                            "{METHOD: {KEY: VALUE}}, as 'graphopt tune' writes)") from None


def options_from_fields(cls: type, *, unset_default: str | None = None) -> Callable:
    """Decorator: give a command one option per field of dataclass ``cls`` (its type,
    default and ``metadata["help"]``), passed to the command as keyword arguments.

    The command keeps its own parameters first and takes the fields through
    ``**options``. With ``unset_default``, every option defaults to None (left unset)
    and its help ends with ``(default: <unset_default>)``: for a command that fills
    unset fields from its own base configuration.
    """
    hints = typing.get_type_hints(cls)

    def wrap(fn: Callable) -> Callable:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values()
               if p.kind is not inspect.Parameter.VAR_KEYWORD]
        generated = []
        for f in dataclasses.fields(cls):
            if unset_default is None:
                kind, option = hints[f.name], typer.Option(f.default, help=field_help(f))
            else:
                kind = hints[f.name] | None
                option = typer.Option(None, help=f"{field_help(f)} (default: {unset_default})")
            generated.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                                               annotation=kind, default=option))
        fn.__signature__ = inspect.Signature(own + generated)
        return fn

    return wrap


def ppo_options(defaults, options: dict) -> tuple[object, list[str]]:
    """The PPO settings of a training command: the options given replace ``defaults``
    (a :class:`graphopt.rl.config.PPOConfig`) and are checked against their ranges; with
    them, those options as typed, for the run's recorded command.

    Raises
    ------
    GraphoptError
        An option out of its range, named as ``--option``.
    """
    given = {k: v for k, v in options.items() if v is not None}
    config = dataclasses.replace(defaults, **given)
    check_fields(config, lambda key: "--" + key.replace("_", "-"))
    flags = [(f"--{k.replace('_', '-')}" if v else f"--no-{k.replace('_', '-')}")
             if isinstance(v, bool) else f"--{k.replace('_', '-')} {v}" for k, v in given.items()]
    return config, flags
