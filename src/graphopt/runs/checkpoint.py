"""Training checkpoints: tensors in safetensors, everything else in JSON, never pickle.

A checkpoint is a folder with two files:

- ``weights.safetensors``: every module's parameters and buffers (``model.<name>.<key>``),
  the optimizer's per-parameter state (``optim.<index>.<key>``), the state of the
  torch generator the policy samples with (``rng``), so a resumed run draws the same
  samples an uninterrupted one would, and any other tensors of the run
  (``data.<key>``: a feature normalizer's statistics, a table of embeddings);
- ``checkpoint.json``: format and version, the run's ``config`` (hyperparameters and the
  problem it trains on), the optimizer's parameter groups, the trainer's ``state``
  (update count, baseline, best plan, history: anything JSON-ready) and the SHA-256 of
  the weights file (``weights_sha256``).

A save is one atomic unit: the new weights are written (atomically) beside the old ones as
``.weights.safetensors.pending``, then the metadata replaces the old (the commit: it
records the new weights' hash), then the pending file is renamed over the old weights. A
process killed before the commit leaves the previous checkpoint whole (the pending file is
removed by the next save); one killed after it leaves metadata whose weights are the
pending file, which the reader takes (and renames into place) by their hash. Weights that
match neither are refused as a torn checkpoint. A checkpoint is resumed only by a run with
the same config. The policy files (``policy.safetensors`` + ``policy.json``) are saved the
same way.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from graphopt.errors import CheckpointError, WriteError
from graphopt._files import atomic_write, read_json, regular_file, write_error

__all__ = ["CheckpointError", "check_state", "load_checkpoint", "load_policy", "read_checkpoint",
           "save_checkpoint", "save_policy"]

# the name it had when checkpoints lived in graphopt.rl: run folders written then still resume
FORMAT = "graphopt.rl.checkpoint"
VERSION = 1
WEIGHTS, META = "weights.safetensors", "checkpoint.json"



def _check_version(meta: dict, where: str) -> None:
    """Refuse a format version other than the one this graphopt writes (``-7``, ``true``,
    ``1.0`` and a missing one too), naming the file and the field."""
    got = meta.get("version")
    if type(got) is not int or got != VERSION:
        raise CheckpointError(f"{where}: field 'version' is {got!r}; this graphopt reads and "
                              f"writes version {VERSION} only")


def _plain(config: dict) -> dict:
    """``config`` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(config))


def save_checkpoint(folder: str | os.PathLike, config: dict, modules: dict[str, nn.Module],
                    optimizer: torch.optim.Optimizer, generator: torch.Generator | None,
                    state: dict, tensors: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a checkpoint into ``folder`` (created if need be) as one unit: a kill at any
    point leaves the previous checkpoint or this one (the module docstring says how).

    ``generator`` may be None for a trainer that reseeds the global generators itself;
    ``tensors`` are other tensors of the run, read back by :func:`read_checkpoint`.

    Examples
    --------
    >>> import tempfile
    >>> net, gen = nn.Linear(2, 2), torch.Generator().manual_seed(0)
    >>> opt = torch.optim.Adam(net.parameters())
    >>> d = save_checkpoint(tempfile.mkdtemp(), {"lr": 0.1}, {"net": net}, opt, gen, {"step": 3})
    >>> load_checkpoint(d, {"lr": 0.1}, {"net": nn.Linear(2, 2)},
    ...                 torch.optim.Adam(nn.Linear(2, 2).parameters()), torch.Generator())
    {'step': 3}
    """
    folder = Path(folder)
    blobs = {f"model.{name}.{k}": v.detach().cpu().contiguous()
             for name, m in modules.items() for k, v in m.state_dict().items()}
    blobs |= {f"data.{k}": v.detach().cpu().contiguous() for k, v in (tensors or {}).items()}
    opt = optimizer.state_dict()
    for index, per_param in opt["state"].items():
        for k, v in per_param.items():
            blobs[f"optim.{index}.{k}"] = torch.as_tensor(v).detach().cpu().contiguous()
    if generator is not None:
        blobs["rng"] = generator.get_state()
    blob = save_tensors(blobs)
    meta = {"format": FORMAT, "version": VERSION, "config": _plain(config),
            "param_groups": opt["param_groups"], "state": state,
            "weights_sha256": hashlib.sha256(blob).hexdigest()}
    _save_pair(folder, WEIGHTS, META, blob, json.dumps(meta))
    return folder


def _pending(weights: str) -> str:
    """The name new weights have until their metadata is committed."""
    return f".{weights}.pending"


def _save_pair(folder: Path, weights: str, meta_file: str, blob: bytes, text: str) -> None:
    """Save ``blob`` as ``weights`` and ``text`` (recording its hash) as ``meta_file`` in
    ``folder``, as one unit (the module docstring says how): a kill at any point leaves
    the previous pair or the new one readable."""
    _settle(folder, weights, meta_file)
    _remove_stale(folder)
    try:
        atomic_write(folder / _pending(weights), lambda f: f.write(blob))
    except WriteError as err:  # name the file the user knows
        moved = WriteError(str(err).replace(_pending(weights), weights, 1))
        moved.errno, moved.filename = err.errno, str(folder / weights)
        raise moved from None
    atomic_write(folder / meta_file, lambda f: f.write(text.encode()))  # the commit
    try:
        os.replace(folder / _pending(weights), folder / weights)
    except OSError as err:  # committed all the same: the reader takes the pending file
        raise write_error(folder / weights, err) from None


def _settle(folder: Path, weights: str, meta_file: str) -> None:
    """Finish what a killed save left: pending weights its metadata committed to are
    renamed into place, uncommitted ones removed (so a new save never overwrites the
    only copy of committed weights)."""
    pending = folder / _pending(weights)
    if not pending.is_file():
        return
    try:
        meta = json.loads((folder / meta_file).read_bytes())
        want = meta.get("weights_sha256") if isinstance(meta, dict) else None
    except (OSError, ValueError):
        want = None
    if want is not None and want == hashlib.sha256(pending.read_bytes()).hexdigest():
        os.replace(pending, folder / weights)
    else:
        pending.unlink(missing_ok=True)


def read_checkpoint(folder: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]] | None:
    """The metadata (``config``, ``state``, ...) and every tensor of the checkpoint in
    ``folder``, keys as the module docstring names them; None when there is none.

    Raises
    ------
    CheckpointError
        The files are corrupt or incomplete, or not a graphopt checkpoint.
    """
    folder = Path(folder)
    if not (folder / META).is_file():
        return None
    return _read_pair(folder, META, WEIGHTS, FORMAT, "checkpoint", "unreadable checkpoint")


def _read_pair(folder: Path, meta_file: str, weights: str, fmt: str, what: str,
               unreadable: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """A metadata file and the weights it was saved with, each checked: format, version
    and the weights' hash (a torn pair is refused)."""
    meta = read_json(folder / meta_file, error=CheckpointError)
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise CheckpointError(f"{folder}/{meta_file}: not a graphopt {what} (expected format "
                              f"{fmt!r} version {VERSION})")
    _check_version(meta, f"{folder}/{meta_file}")
    blob = _committed_pending(folder, weights, meta)
    if blob is None:
        regular_file(folder / weights, CheckpointError)
        try:
            blob = (folder / weights).read_bytes()
        except OSError as err:
            raise CheckpointError(f"{folder}: {unreadable} ({err})") from err
    _check_hash(folder, weights, meta_file, meta, blob)
    try:
        tensors = load_tensors(blob)
    except SafetensorError as err:
        raise CheckpointError(f"{folder}: {unreadable} ({err})") from err
    _check_finite(folder / weights, tensors)
    return meta, tensors


def _check_finite(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Refuse weights (or optimizer state) holding NaN or an infinity: a policy built from
    them samples from NaN logits (every plan the same, or a crash deep in the sampler),
    and a run resumed from them never recovers. A file's SHA-256 matching its metadata
    says only that the two were saved together (issue 49)."""
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            kind = "NaN" if bool(torch.isnan(t).any()) else "an infinity"
            raise CheckpointError(f"{path}: tensor {name!r} holds {kind}; weights must be finite "
                                  "(a run that diverged, or an edited file): train again or use "
                                  "an earlier copy")


def _committed_pending(folder: Path, weights: str, meta: dict) -> bytes | None:
    """The pending weights ``meta`` committed to (a save killed between its commit and
    the rename), renamed into place where the folder can be written; else None."""
    pending, want = folder / _pending(weights), meta.get("weights_sha256")
    if want is None or not pending.is_file() or pending.is_symlink():
        return None
    try:
        blob = pending.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(blob).hexdigest() != want:
        return None  # not committed: the previous weights stand
    try:
        os.replace(pending, folder / weights)
    except OSError:  # a read-only folder: read it where it is
        pass
    return blob


def _check_hash(folder: Path, weights: str, meta_file: str, meta: dict, blob: bytes) -> None:
    """Refuse ``blob`` (the file ``weights``) when ``meta`` records another SHA-256: the
    two files were written by different saves (a kill between them), or one was edited.
    Metadata without the hash (graphopt before it) is not checked."""
    want = meta.get("weights_sha256")
    if want is not None and want != hashlib.sha256(blob).hexdigest():
        raise CheckpointError(f"{folder}: torn checkpoint: {weights} is not the file "
                              f"{meta_file} was saved with (a write was killed between the "
                              "two, or one was changed); remove both to start afresh")


def _remove_stale(folder: Path) -> None:
    """Remove the temporary files a killed :func:`atomic_write` left in ``folder`` for
    the files a trainer writes there (``.NAME.<random>.tmp``, NAME one of the checkpoint's,
    the policy's, their pending weights, the log and the chart:
    :data:`graphopt.runs.run.RUN_FILES`); another tool's temporary files in the same
    folder are not ours to delete, and stay."""
    from graphopt.runs.run import RUN_FILES

    if folder.is_dir():
        for name in (*RUN_FILES, _pending(WEIGHTS), _pending(POLICY_WEIGHTS)):
            for tmp in folder.glob(f".{glob.escape(name)}.*.tmp"):
                if tmp.is_file() and not tmp.is_symlink():
                    tmp.unlink(missing_ok=True)


def load_checkpoint(folder: str | os.PathLike, config: dict, modules: dict[str, nn.Module],
                    optimizer: torch.optim.Optimizer, generator: torch.Generator | None,
                    fresh: dict | None = None) -> dict | None:
    """Restore modules, optimizer and generator (unless None) from ``folder``; return the
    trainer state.

    Returns None when ``folder`` holds no checkpoint. With ``fresh`` (the state a new run
    starts from), each of its keys the saved state has must hold a value of the same
    JSON type (see :func:`check_state`), and a key the saved state lacks (a checkpoint of
    an older graphopt) keeps its fresh value.

    Raises
    ------
    CheckpointError
        The files are corrupt or incomplete, the checkpoint belongs to a run with
        another config (the message names the keys that differ), or its state does not
        match ``fresh``.
    """
    found = read_checkpoint(folder)
    if found is None:
        return None
    meta, tensors = found
    want, have = _plain(config), meta.get("config", {})
    if want != have:
        keys = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        raise CheckpointError(f"{folder}: checkpoint of another run (config differs in "
                              f"{', '.join(keys)}); use a new checkpoint folder")
    check_state(meta.get("state"), fresh or {}, f"{folder}/{META}")
    try:
        for name, m in modules.items():
            prefix = f"model.{name}."
            m.load_state_dict({k[len(prefix):]: v for k, v in tensors.items()
                               if k.startswith(prefix)})
        per_param: dict[int, dict] = {}
        for k, v in tensors.items():
            if k.startswith("optim."):
                _, index, key = k.split(".", 2)
                per_param.setdefault(int(index), {})[key] = v
        optimizer.load_state_dict({"state": per_param, "param_groups": meta["param_groups"]})
        if generator is not None:
            generator.set_state(tensors["rng"])
    except (KeyError, RuntimeError, TypeError, ValueError) as err:
        raise CheckpointError(f"{folder}: checkpoint does not fit this model ({err})") from err
    return {**(fresh or {}), **meta["state"]}


def _kind(value: object) -> str:
    """The JSON type of ``value``: a number is one whether int or float."""
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def check_state(state: object, fresh: dict, source: str) -> None:
    """Refuse a saved trainer ``state`` that is not an object, or holds under a key of
    ``fresh`` a value of another JSON type than ``fresh``'s (a count as text, a log as a
    number; any where ``fresh``'s is None), so that a hand-edited checkpoint fails with
    one line, not in the trainer. A key it lacks is left to the caller (a checkpoint older
    than the key takes ``fresh``'s value).

    Raises
    ------
    CheckpointError
        One line naming ``source`` and the first key at fault.

    Examples
    --------
    >>> check_state({"update": "3"}, {"update": 0}, "ckpt/checkpoint.json")
    Traceback (most recent call last):
    graphopt.errors.CheckpointError: ckpt/checkpoint.json: state 'update' is a str, expected a number
    """
    if not isinstance(state, dict):
        raise CheckpointError(f"{source}: state is a {_kind(state)}, expected an object")
    for key, value in fresh.items():
        if key in state and value is not None and _kind(state[key]) != _kind(value):
            raise CheckpointError(f"{source}: state {key!r} is a {_kind(state[key])}, expected "
                                  f"a {_kind(value)}")


# -- a trained policy on its own (what ships in the package) -----------------------------------
POLICY_WEIGHTS, POLICY_META = "policy.safetensors", "policy.json"
POLICY_FORMAT = "graphopt.policy"


def save_policy(folder: str | os.PathLike, policy: nn.Module, config: dict, info: dict) -> Path:
    """Write a policy's weights (safetensors) and its constructor ``config`` and provenance
    ``info`` (JSON) into ``folder``, as one unit as :func:`save_checkpoint` does; no
    optimizer state."""
    folder = Path(folder)
    blob = save_tensors({k: v.detach().contiguous() for k, v in policy.state_dict().items()})
    text = json.dumps({"format": POLICY_FORMAT, "version": VERSION, "config": _plain(config),
                       "info": info, "weights_sha256": hashlib.sha256(blob).hexdigest()},
                      indent=1)
    _save_pair(folder, POLICY_WEIGHTS, POLICY_META, blob, text)
    return folder


def load_policy(folder: str | os.PathLike, build) -> tuple[nn.Module, dict]:
    """``build(config)`` a module, load the weights of ``folder`` into it; return it and
    the saved ``info``.

    Raises
    ------
    CheckpointError
        Missing, corrupt or mismatched files (the message names the folder); a config
        whose weights' names or shapes differ from the file's is refused before the
        module is built, so that a hostile config cannot make us allocate.
    """
    folder = Path(folder)
    meta, tensors = _read_pair(folder, POLICY_META, POLICY_WEIGHTS, POLICY_FORMAT, "policy",
                               "no readable policy")
    try:
        with torch.device("meta"):  # shapes only: a config far larger than its weights allocates nothing
            shapes = {k: tuple(v.shape) for k, v in build(meta["config"]).state_dict().items()}
        wrong = sorted(k for k in shapes.keys() | tensors.keys()
                       if shapes.get(k) != (tuple(tensors[k].shape) if k in tensors else None))
        if wrong:
            raise ValueError(f"{len(wrong)} weight(s) differ in name or shape, first "
                             f"{wrong[0]!r}: config {shapes.get(wrong[0])}, file "
                             f"{tuple(tensors[wrong[0]].shape) if wrong[0] in tensors else None}")
        module = build(meta["config"])
        module.load_state_dict(tensors)
    except (KeyError, TypeError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"{folder}: policy does not fit its config ({err})") from err
    return module, meta.get("info", {})
