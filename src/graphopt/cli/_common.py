"""What every command group shares: the console, one-line errors, graph arguments,
``-p METHOD.KEY=VALUE`` parsing and options generated from dataclass fields.

Imports nothing heavy: ``graphopt --help`` builds every command from this module and
the command modules, so torch, numba and the cost models load only inside a command
that uses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import signal
import sys
import threading
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import click
import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from graphopt._files import check_output
from graphopt.cli.options import ADDRESS_HELP, BACKEND_HELP
from graphopt.errors import BadFileError, GraphoptError, MissingDependencyError, UsageError, check_fields

__all__ = ["ADDRESS_HELP", "BACKEND_HELP", "GRAPH_HELP", "LOCK_FILE", "PARAM_HELP",
           "OneLineUsageErrors", "check_run_folder", "compile_simulator", "console",
           "evaluation_backend", "fail", "field_help", "field_range", "interrupt_on_signals",
           "lock_folder", "method_params", "options_from_fields", "parse_field", "usage_line"]

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

def fail(err: Exception) -> NoReturn:
    """Print ``err`` as one line and exit 2 (a user's mistake: no traceback)."""
    console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


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
    shown. A sub-command's arguments are parsed inside this group's :meth:`invoke`, so
    one override here covers every command below."""

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


#: The file that marks a folder a run is writing in: :func:`lock_folder` holds an
#: exclusive ``flock`` on it for the run's life (the kernel drops it when the process ends,
#: however it ends); a command removes it as it ends. Only a killed one (SIGKILL, power
#: loss) leaves it, empty of meaning once unlocked: the next run takes it over.
LOCK_FILE = ".graphopt.lock"


@contextlib.contextmanager
def interrupt_on_signals():
    """Within this block SIGTERM (``kill``, a batch system's time limit) and SIGHUP (the
    terminal closed) end the command as Ctrl-C does: ``KeyboardInterrupt``, which closes
    the worker processes on its way out; the block then prints one line, ``graphopt:
    interrupted``, and exits with status 130 (Typer would exit 130 without a word).
    Without it SIGTERM killed the parent at once and its orphaned workers printed
    tracebacks of the broken pipe. For commands that hold no search: a search's
    :func:`graphopt.evaluate.interrupt.stop_on_interrupt` saves its best plan instead. Outside
    the main thread the signals are left as they are."""
    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                previous[sig] = signal.signal(sig, interrupt)
    try:
        yield
    except KeyboardInterrupt:
        print("graphopt: interrupted", file=sys.stderr, flush=True)
        raise typer.Exit(130) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def lock_folder(folder: Path | None, option: str = "--out"):
    """Claim ``folder`` (made if need be) until the running command ends (or, outside a
    command, until the returned file is closed), so that two runs never write one folder:
    their files would mix and one's would vanish. None (no folder) claims nothing and
    returns None.

    Raises
    ------
    GraphoptError
        Another process holds the folder; the message names the option, the folder and
        that process's id. Or the lock file is not one graphopt takes (:func:`_open_lock`):
        a symbolic link (live or dangling), a folder, a pipe, a device, a hard link.
    """
    import fcntl

    if folder is None:
        return None
    folder = Path(folder)
    made = next((p for p in reversed([folder, *folder.parents]) if not p.exists()), None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file where the folder goes, no permission
        raise UsageError(f"{option} {folder}: cannot make the folder ({err.strerror or err})"
                         ) from None
    while True:
        f = _open_lock(folder, option)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            pid = f.read().strip() or "?"
            f.close()
            raise UsageError(f"{option} {folder}: another graphopt run (pid {pid}) is "
                             "writing there; wait for it to end or choose another "
                             "folder") from None
        if _same_file(f, folder / LOCK_FILE):
            break
        # the run that held it removed it as it ended (after we opened it): a lock on
        # that file guards nothing, as a third run may already hold the new one
        f.close()
    try:  # who holds it, for the message above; a full disk leaves it unsaid
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
    except OSError:
        pass
    ctx = _current_context()
    if ctx is not None:  # released when the command ends, however it ends, even in-process
        ctx.with_resource(_released(f, folder, made))
    return f


def _open_lock(folder: Path, option: str):
    """``folder``'s lock file, opened for reading and writing (made if need be), following
    no symbolic link (``O_NOFOLLOW``) and taking only a regular file of one name (a hard
    link's other name would have its content replaced by our pid): a lock path that is a
    link, a folder, a pipe, a device or a socket is refused in one line and nothing is
    written through it."""
    import stat

    path = folder / LOCK_FILE
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    where = f"{option} {folder}: {LOCK_FILE}"
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as err:
        if os.path.islink(path):
            raise BadFileError(f"{where} is a symbolic link (to {os.readlink(path)}); graphopt "
                               "follows none for its lock: remove it") from None
        if os.path.isdir(path):
            raise BadFileError(f"{where} is a folder, expected a lock file: remove it") from None
        raise BadFileError(f"{where}: cannot open ({err.strerror or err})") from None
    st = os.fstat(fd)
    problem = ("" if stat.S_ISREG(st.st_mode) and st.st_nlink <= 1 else
               f"has {st.st_nlink} names (a hard link), expected a file of its own"
               if stat.S_ISREG(st.st_mode) else "is not a regular file (a pipe, device or socket)")
    if problem:
        os.close(fd)
        raise BadFileError(f"{where} {problem}: remove it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "r+")


def _same_file(f, path: Path) -> bool:
    """Whether the open file ``f`` is still the one at ``path`` (not removed, not replaced)."""
    try:
        here, there = os.fstat(f.fileno()), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _current_context():
    """The running command's context, or None: Typer from 0.22 or so runs commands on its
    own copy of click (``typer._click``), whose context the ``click`` package does not
    see (so the lock was released only when the process ended)."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # a Typer on the click package
        get_current_context = click.get_current_context
    ctx = get_current_context(silent=True)
    return ctx if ctx is not None else click.get_current_context(silent=True)


@contextlib.contextmanager
def _released(lock, folder: Path, made: Path | None):
    """Hold ``lock`` (``folder``'s lock file) until the command ends, then remove the lock
    file however the command ended, so that a run leaves only its results (a failed run
    into a folder that was there left ``.graphopt.lock`` in it); and where this run made
    the folder (``made``: the first folder of its path that did not exist) and wrote
    nothing else there (a run that failed before any result), remove the folders it made
    too. The lock file is removed while still held: a run refused meanwhile stays
    refused, and one that opened it meanwhile sees it gone once it holds it
    (:func:`lock_folder` checks) and takes a new one."""
    try:
        yield lock
    finally:
        try:
            if _same_file(lock, folder / LOCK_FILE):
                (folder / LOCK_FILE).unlink()
            if made is not None and not any(folder.iterdir()):
                for p in [folder, *folder.parents]:
                    p.rmdir()  # empty ones only: one another process wrote in stays
                    if p == made:
                        break
        except OSError:
            pass
        finally:
            lock.close()


def check_run_folder(out: Path, option: str = "--out"):
    """:func:`check_output` of a trainer's folder (given to ``option``) and of every file
    the trainer writes there (:data:`graphopt.runs.run.RUN_FILES`): a folder named
    ``policy.json`` there failed only when the run saved, after training. Then the folder
    is claimed (:func:`lock_folder`): keep the returned file while the run lasts."""
    from graphopt.runs.run import RUN_FILES

    check_output(out, option, folder=True)
    for name in RUN_FILES:
        check_output(out / name, option)
    return lock_folder(out, option)


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
    pool of Ray actors (:func:`graphopt.evaluate.ray.ray_backend`). Ray is imported only here.

    Raises
    ------
    GraphoptError
        An unknown backend, ``--address`` without ``ray``, or Ray not installed.
    """
    import contextlib

    if backend not in ("local", "ray"):
        raise UsageError(f"--backend {backend!r}: expected local or ray")
    if backend == "local":
        if address:
            raise UsageError(f"--address {address}: only with --backend ray")
        return contextlib.nullcontext()
    try:
        from graphopt.evaluate import ray as evaluate_ray
    except ModuleNotFoundError as err:
        raise MissingDependencyError(f"--backend ray needs {err.name}: pip install 'graphopt[ray]'"
                                     ) from None
    return evaluate_ray.ray_backend(address) if pool else evaluate_ray.ray_session(address)


def field_help(f: dataclasses.Field) -> str:
    """A hyperparameter's one-line help, from its field's ``metadata["help"]``, ending with
    the range :func:`graphopt.errors.check_fields` holds it to (:func:`field_range`)."""
    text, bounds = f.metadata.get("help", ""), field_range(f)
    return f"{text.rstrip()} Range: {bounds}." if bounds and text else text or bounds


def field_range(f: dataclasses.Field) -> str:
    """The range of a field's metadata (``min``, ``gt``, ``max``, ``limit``) as a person
    reads it, or "" for none.

    Examples
    --------
    >>> from dataclasses import dataclass, field, fields
    >>> @dataclass
    ... class C:
    ...     a: int = field(default=1, metadata={"min": 1, "limit": 10_000})
    ...     b: float = field(default=0.1, metadata={"gt": 0})
    ...     c: float = field(default=0.5, metadata={"min": 0, "max": 1})
    >>> [field_range(f) for f in fields(C)]
    ['1..10,000', '> 0', '0..1']
    """
    m = f.metadata
    hi = min((m[k] for k in ("max", "limit") if k in m), default=None)

    def n(x) -> str:
        return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else f"{x:g}"
    if "min" in m and hi is not None:
        return f"{n(m['min'])}..{n(hi)}"
    parts = ([f">= {n(m['min'])}"] if "min" in m else []) + \
        ([f"> {n(m['gt'])}"] if "gt" in m else []) + ([f"<= {n(hi)}"] if hi is not None else [])
    return " and ".join(parts)


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
            raise UsageError(f"{where}: expected METHOD.KEY=VALUE, e.g. "
                             "rl-lstm.lr=0.01")
        if method not in methods:
            raise UsageError(f"{where}: method {method!r} is not among the methods "
                             f"run ({', '.join(methods)})")
        cls = type(get_optimizer(method))
        fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) \
            else {}
        if key not in fields:
            raise UsageError(f"{where}: {method} has no parameter {key!r}; it has "
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
        raise BadFileError(f"--param {spec}: not a parameter file (JSON with \"params\": "
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
