"""Options from dataclass fields: a hyperparameter's help and range, ``-p METHOD.KEY=VALUE``
and parameter files (:func:`method_params`), and typer options generated from a dataclass
(:func:`options_from_fields`, :func:`ppo_options`)."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path

import typer
import typer.core

from graphopt.cli.locks import check_run_folder
from graphopt.errors import BadFileError, GraphoptError, UsageError, check_fields

__all__ = ["PARAM_HELP", "field_help", "field_range", "parse_field", "method_params", "options_from_fields",
           "ppo_options"]


PARAM_HELP = ("Set a method's hyperparameter, METHOD.KEY=VALUE (repeatable; 'graphopt methods "
              "METHOD' lists the keys, their types, defaults and help), or every one in a "
              ".json file written by 'graphopt tune'. Example: "
              "-p rl-lstm.lr=0.01 -p hdp.checkpoint_dir=runs/ckpt -p runs/tune/best.json")


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
