"""Files in and out: the checks every reader makes before it opens a path, bounded JSON and
npz readers, and the atomic write every writer uses.

The lowest layer beside :mod:`graphopt.errors`, so that every package that reads or writes
files (``ir``, ``hardware``, ``sim``, checkpoints, reports) uses the same code.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import json
import math
import os
import re
import stat
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from graphopt.errors import BadFileError, GraphFormatError, GraphoptError, UsageError, WriteError

__all__ = ["MAX_JSON_BYTES", "MAX_NPZ_BYTES", "atomic_write", "check_output", "env_limit", "fd_alias",
           "check_record", "inside", "npz_arrays", "read_index", "read_json", "regular_file",
           "safe_name", "save_figure", "write_error", "write_json"]

#: The largest JSON file graphopt reads (graphs, plans, profiles, policies): a bound on
#: what an outside file can make us allocate, about 5x its size once loaded (a 128 MB plan
#: of 8M placements and priorities: 0.67 GB peak for ``Plan.load``, by /usr/bin/time).
#: GNMT-8's graph, 53,694 ops, is 15 MB as JSON. Raise it with $GRAPHOPT_MAX_JSON_BYTES.
MAX_JSON_BYTES = 2**28

#: The most bytes the arrays of one ``.npz`` file may take once decompressed, read from
#: the file's headers before anything is decompressed (a zip bomb is refused unopened).
#: Raise it with $GRAPHOPT_MAX_NPZ_BYTES.
MAX_NPZ_BYTES = 2**31


def env_limit(name: str, default: int, unit: str = "bytes") -> int:
    """The limit in environment variable ``name`` (a number of ``unit``), or ``default``
    where it is unset:
    a whole number from 1 to 2**62 (``1e9`` is refused, not read as 1), else
    :class:`GraphoptError` naming the variable.

    >>> env_limit("GRAPHOPT_NO_SUCH_LIMIT", 10)
    10
    """
    text = os.environ.get(name)
    if text is None:
        return default
    digits = text.strip().replace("_", "")
    # ASCII digits only: int() also reads '٢', '+2' and ' 2'
    value = int(digits) if digits.isascii() and digits.isdigit() else 0
    if not 1 <= value <= 2**62:
        raise UsageError(f"${name}={text!r}: expected a whole number of {unit} from 1 to 2**62")
    return value


def regular_file(path: str | os.PathLike, error: type[Exception] = GraphFormatError) -> int:
    """The size of the regular file ``path`` (links followed), or ``error`` with one line
    naming it: missing, a folder, or a device, pipe or socket, whose size says nothing of
    what reading it gives (``/dev/zero`` never ends, a pipe may never answer).

    >>> regular_file("/dev/zero")
    Traceback (most recent call last):
    graphopt.errors.GraphFormatError: /dev/zero: not a regular file (a device, pipe or socket)
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as err:  # a loop of links, a name too long, no permission
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{path}: is a folder, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: not a regular file (a device, pipe or socket)")
    return st.st_size


_FD_PATH = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd|proc/(\d+)/fd)/(\d+)")


def fd_alias(path: str | os.PathLike) -> int | None:
    """The descriptor of this process that ``path`` names, links followed, or None:
    ``/dev/stdout`` (a link to ``/proc/self/fd/1``), ``/dev/stderr``, ``/dev/fd/N``,
    ``/proc/self/fd/N``, ``/proc/PID/fd/N`` of this process, or a link to one of them.
    Such a name is the open file itself (a log opened for appending, a pipe, a
    terminal): a writer writes to that descriptor, never renames over what it points at.

    >>> fd_alias("/dev/stdout"), fd_alias("/dev/fd/2"), fd_alias("/tmp/x.json")
    (1, 2, None)
    """
    p = os.path.abspath(os.fspath(path))
    for _ in range(40):  # the kernel's own bound on a chain of links
        for q in (p, os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))):
            m = _FD_PATH.fullmatch(q)
            if m and (m.group(1) is None or int(m.group(1)) == os.getpid()):
                return int(m.group(2))
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def _in_place(path: str | os.PathLike) -> tuple[int | None, str | None]:
    """``(fd, None)`` when ``path`` is one of this process's descriptors, ``(None, real)``
    when it is (a link to) a device, pipe or socket, whose name a rename would replace;
    ``(None, None)`` for a regular file, a folder or a name not there yet."""
    fd = fd_alias(path)
    if fd is not None:
        return fd, None
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return None, None
    return None, (None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else real)


def _write_in_place(path: str | os.PathLike, fd: int | None, real: str | None, write) -> None:
    """``write(fileobj)`` on descriptor ``fd`` (a duplicate: the caller's stays open, and a
    log opened for appending is appended to), or on the special file ``real`` opened for
    writing as it is (not truncated, not made; a pipe with no reader is refused, not
    waited on)."""
    try:
        if fd is not None:
            for stream in (sys.stdout, sys.stderr):  # what was printed comes first
                with contextlib.suppress(Exception):
                    stream.flush()
            out = os.dup(fd)
        else:
            mode = os.stat(real).st_mode
            if stat.S_ISSOCK(mode) or stat.S_ISBLK(mode):
                raise UsageError(f"{path}: a {'socket' if stat.S_ISSOCK(mode) else 'block device'}"
                                 ", which graphopt does not write")
            try:
                out = os.open(real, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
            except OSError as err:
                if err.errno == errno.ENXIO:
                    raise UsageError(f"{path}: a pipe with no reader") from None
                raise
            os.set_blocking(out, True)
        with os.fdopen(out, "wb") as f:
            write(f)
    except OSError as err:
        if isinstance(err, GraphoptError):
            raise
        raise write_error(path, err) from None


def atomic_write(path: str | os.PathLike, write) -> None:
    """Call ``write(fileobj)`` on a temporary file beside ``path``, then rename it into place.

    A link is followed, as ``open()`` would, and kept. A name that is not a regular file
    is written in place, never renamed over (the rename would delete it, or replace the
    file behind it): one of this process's descriptors (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``: ``export -o /dev/stdout >> log`` appends to the log), a device
    (``/dev/null``, a terminal) or a pipe with a reader; a socket or a block device is
    refused. A write the file system refuses (a full disk, a quota, ``ulimit -f``, a
    read-only mount) leaves the old file whole and no temporary file, and raises
    :class:`WriteError`, one line: ``PATH: cannot write (No space left on device)``.

    >>> atomic_write("/proc/graphopt.json", lambda f: f.write(b"{}"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphopt.errors.WriteError: /proc/graphopt.json: cannot write (...)
    """
    fd, special = _in_place(path)
    if fd is not None or special is not None:
        _write_in_place(path, fd, special, write)
        return
    path = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, GraphoptError):
            raise write_error(path, err) from None
        raise


def save_figure(fig, path: str | os.PathLike, **options) -> Path:
    """Draw matplotlib figure ``fig`` in memory, in the format of ``path``'s suffix (PNG
    without one), then :func:`atomic_write` it: a full disk leaves no half image."""
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix[1:].lower() or "png", **options)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    return Path(path)


def write_error(path: str | os.PathLike, err: OSError) -> WriteError:
    """``err``, raised writing ``path``, as one line: ``PATH: cannot write (REASON)``."""
    out = WriteError(f"{path}: cannot write ({err.strerror or err})")
    out.errno, out.filename = err.errno, str(path)
    return out


def read_json(path: str | os.PathLike, error: type[Exception] = GraphFormatError) -> Any:
    """The JSON document in ``path``, or ``error`` with one line naming the file: missing,
    larger than :data:`MAX_JSON_BYTES` (or $GRAPHOPT_MAX_JSON_BYTES), not UTF-8, not
    JSON, nested too deeply for the parser, or holding a number too long for ``int()``.

    Does not check what the document holds; its loader does.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "deep.json")
    >>> _ = open(p, "w").write("[" * 100000)
    >>> read_json(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphopt.errors.GraphFormatError: ...deep.json: not valid JSON (nested too deeply)
    """
    path = Path(path)
    limit = env_limit("GRAPHOPT_MAX_JSON_BYTES", MAX_JSON_BYTES)
    size = regular_file(path, error)
    try:
        if size > limit:
            raise error(f"{path}: {size:,} bytes, more than the {limit:,} graphopt reads "
                        "(raise the limit with $GRAPHOPT_MAX_JSON_BYTES)")
        return json.loads(path.read_bytes())
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise error(f"{path}: not valid JSON (not UTF-8 text: {err.reason} at byte "
                    f"{err.start})") from None
    except json.JSONDecodeError as err:
        raise error(f"{path}: not valid JSON ({err})") from None
    except ValueError:  # the one other: an integer longer than int() converts
        raise error(f"{path}: not valid JSON (a number of more than "
                    f"{sys.get_int_max_str_digits():,} digits)") from None
    except RecursionError:
        raise error(f"{path}: not valid JSON (nested too deeply)") from None


def read_index(path: str | os.PathLike, fmt: str, version: int, key: str, what: str) -> dict:
    """A versioned JSON index graphopt wrote (a corpus manifest, a folder of targets):
    ``{"format": fmt, "version": version, key: {...}, ...}``, or a one-line
    :class:`GraphoptError` naming the file, as ``{path}: not {what}`` when it is not one
    and naming the field when it is of another version.
    """
    doc = read_json(path, GraphoptError)
    if not isinstance(doc, dict) or doc.get("format") != fmt or not isinstance(doc.get(key), dict):
        raise BadFileError(f"{path}: not {what}")
    if type(doc.get("version")) is not int or doc["version"] != version:
        raise BadFileError(f"{path}: field 'version': format version {doc.get('version')!r}; "
                           f"this graphopt reads version {version}: make it anew")
    return doc


#: A name graphopt makes a file name of (a corpus item id, a graph's name in a targets
#: folder): letters, digits and ``_.+=,:@-``, not starting with a dot, no ``..``.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=,:@-]{0,199}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def safe_name(value: Any, where: str) -> str:
    """``value`` when it is a name graphopt would make a file of (an item id read back from
    an index), else :class:`GraphoptError`, one line naming ``where``: a name that would
    leave its folder (``../../x``, ``/etc/x``), hold a NUL, a newline or a separator, or is
    not text.

    >>> safe_name("bert-0123abcd", "m.json: items")
    'bert-0123abcd'
    >>> safe_name("../../x", "m.json: items")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphopt.errors.BadFileError: m.json: items: '../../x' is not a name graphopt makes (...)
    """
    if not isinstance(value, str) or not _SAFE_NAME.fullmatch(value) or ".." in value:
        raise BadFileError(f"{where}: {_shown(value)} is not a name graphopt makes (letters, "
                           "digits and _.+=,:@-; no '/', '..' or NUL)")
    return value


def inside(folder: str | os.PathLike, rel: Any, where: str) -> Path:
    """``folder / rel`` for a relative path ``rel`` read from an index in ``folder``, which
    must stay inside it: text, not absolute, no ``..`` part, no NUL or backslash; else
    :class:`GraphoptError` naming ``where``.

    >>> inside("corpus", "graphs/a.npz", "f")
    PosixPath('corpus/graphs/a.npz')
    >>> inside("corpus", "/etc/passwd", "corpus/m.json: field 'file'")
    Traceback (most recent call last):
    graphopt.errors.BadFileError: corpus/m.json: field 'file': '/etc/passwd' is not a path inside corpus
    """
    if not isinstance(rel, str) or not rel or "\0" in rel or "\\" in rel or os.path.isabs(rel) \
            or ".." in Path(rel).parts or any(c in rel for c in "\n\r"):
        raise BadFileError(f"{where}: {_shown(rel)} is not a path inside {folder}")
    return Path(folder) / rel


def _kind_ok(kind: Any, value: Any) -> str | None:
    """None when ``value`` is of ``kind`` (see :func:`check_record`), else what was expected."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(kind, (set, frozenset, tuple)):
        return None if isinstance(value, str) and value in kind else f"one of {', '.join(sorted(kind))}"
    checks = {
        "str": (isinstance(value, str) and "\0" not in value, "text"),
        "str?": (value is None or isinstance(value, str), "text or null"),
        "count": (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**62,
                  "a whole number from 0 to 2**62"),
        "seconds": (number and math.isfinite(value) and value >= 0, "a finite number >= 0"),
        "number": (number and math.isfinite(value), "a finite number"),
        "real": (number, "a number"),
        "time?": (value is None or (number and math.isfinite(value) and value > 0),
                  "a finite number > 0 or null"),
        "list": (isinstance(value, list), "a list"),
        "dict": (isinstance(value, dict), "an object"),
    }
    ok, expected = checks[kind]
    return None if ok else expected


def check_record(record: Any, where: str, fields: dict[str, Any]) -> dict:
    """``record`` (an entry of an index graphopt wrote, read back from disk) when each of
    ``fields`` holds a value of its kind, else :class:`GraphoptError`, one line naming
    ``where`` and the field. A name ending in ``?`` may be missing. Kinds: ``"str"``,
    ``"str?"`` (or null), ``"count"`` (a whole number 0..2**62, not ``true``),
    ``"seconds"`` (finite, >= 0), ``"number"`` (finite), ``"real"`` (any number, not
    ``true``), ``"time?"`` (finite, > 0, or null), ``"list"``,
    ``"dict"``, or a set of allowed strings.

    >>> check_record({"status": "built", "nodes": True}, "m.json: items['a']",
    ...              {"status": {"built", "skipped"}, "nodes": "count"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphopt.errors.BadFileError: m.json: items['a']: field 'nodes': expected a whole number ..., got True
    """
    if not isinstance(record, dict):
        raise BadFileError(f"{where}: expected an object, got {_shown(record)}")
    for name, kind in fields.items():
        key, optional = name.rstrip("?"), name.endswith("?")
        if key not in record:
            if optional:
                continue
            raise BadFileError(f"{where}: field {key!r} is missing")
        expected = _kind_ok(kind, record[key])
        if expected is not None:
            raise BadFileError(f"{where}: field {key!r}: expected {expected}, got "
                               f"{_shown(record[key])}")
    return record


def write_json(path: str | os.PathLike, doc: Any) -> None:
    """``doc`` as indented JSON with sorted keys (a stable diff between versions),
    written atomically."""
    text = json.dumps(doc, indent=1, sort_keys=True)
    atomic_write(path, lambda f: f.write(text.encode()))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def npz_arrays(path: str | os.PathLike, error: type[Exception] = GraphFormatError,
               limit: int | None = None) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The ``(shape, dtype)`` of each array in the ``.npz`` at ``path``, read from the zip
    directory and each array's header, without decompressing the arrays.

    Refuses, with ``error`` and one line naming the file, what is not an npz archive (a
    Git LFS pointer says so), an array of Python objects (pickled), and a file whose
    arrays would take more than ``limit`` bytes (default :data:`MAX_NPZ_BYTES`, or
    $GRAPHOPT_MAX_NPZ_BYTES) once decompressed, counting for each the larger of its
    declared size in the zip directory and its array header's size: a zip bomb is
    refused before it is opened.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "a.npz")
    >>> np.savez_compressed(p, x=np.zeros((1000, 3)))
    >>> npz_arrays(p)
    {'x': ((1000, 3), dtype('float64'))}
    >>> npz_arrays(p, limit=1000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphopt.errors.GraphFormatError: ...a.npz: its arrays take 24,128 bytes once decompressed, ...
    """
    path = Path(path)
    regular_file(path, error)  # zipfile would read a device's endless "end" looking for a directory
    if limit is None:
        limit = env_limit("GRAPHOPT_MAX_NPZ_BYTES", MAX_NPZ_BYTES)
    readers = {(1, 0): np.lib.format.read_array_header_1_0,
               (2, 0): np.lib.format.read_array_header_2_0}
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    total = 0
    try:
        if not zipfile.is_zipfile(path):
            with open(path, "rb") as f:
                lfs = f.read(40).startswith(b"version https://git-lfs")
            raise error(f"{path}: a Git LFS pointer, not the file itself (run git lfs pull)" if lfs
                        else f"{path}: not an npz archive")
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                key = info.filename.removesuffix(".npy")
                with z.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version not in readers:
                        raise error(f"{path}: array {key!r} has npy format version {version}, "
                                    "which graphopt does not read")
                    shape, _, dtype = readers[version](f)
                if dtype.hasobject:
                    raise error(f"{path}: contains pickled objects (array {key!r}), which "
                                "graphopt never loads")
                total += max(info.file_size, math.prod(shape) * dtype.itemsize)
                out[key] = (shape, dtype)
    except (OSError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError,
            ValueError) as err:
        raise error(f"{path}: truncated, corrupted or not an npz file "
                    f"({type(err).__name__}: {err})") from None
    if total > limit:
        raise error(f"{path}: its arrays take {total:,} bytes once decompressed, more than the "
                    f"{limit:,} graphopt reads (raise the limit with $GRAPHOPT_MAX_NPZ_BYTES)")
    return out


def check_output(path: Path | None, option: str, *, folder: bool = False) -> None:
    """Check, before any work starts, that ``path`` (given to ``option``) can be written,
    so that a long run never fails at its end for want of a place to put its result.

    A file must not be a folder and a folder not a file; every part of the name must
    fit the file system's limits; the nearest existing folder above must be a folder
    (not a file) that this user may write in. Missing folders are fine: writing makes
    them. None (the option not given) passes. Does not check free space. A file that
    :func:`atomic_write` writes in place passes when it can be written: one of this
    process's descriptors open for writing (``/dev/stdout``), a device or a pipe (not a
    socket or a block device).

    Raises
    ------
    GraphoptError
        One line naming the option, the path and what is wrong.

    Examples
    --------
    >>> check_output(Path("/"), "--out")
    Traceback (most recent call last):
    graphopt.errors.UsageError: --out /: is a folder, expected a file
    """
    if path is None:
        return
    path = Path(path)
    where = f"{option} {path}"
    if not folder:  # written in place (atomic_write): the descriptor or the special file
        fd, special = _in_place(path)
        if fd is not None:
            try:
                mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            except OSError:
                raise UsageError(f"{where}: descriptor {fd} is not open") from None
            if mode == os.O_RDONLY:
                raise UsageError(f"{where}: descriptor {fd} is open for reading only")
            return
        if special is not None:
            mode = os.stat(special).st_mode
            if stat.S_ISSOCK(mode) or stat.S_ISBLK(mode):
                raise UsageError(f"{where}: a {'socket' if stat.S_ISSOCK(mode) else 'block device'}"
                                 ", which graphopt does not write")
            if not os.access(special, os.W_OK):
                raise UsageError(f"{where}: cannot write {special} (permission denied)")
            return
    existing = path.absolute()
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    name_max = os.pathconf(existing if existing.is_dir() else existing.parent, "PC_NAME_MAX")
    long = [p for p in path.parts if len(os.fsencode(p)) > name_max]
    if long:
        raise UsageError(f"{where}: a name of {len(os.fsencode(long[0]))} bytes exceeds the "
                         f"file system's limit of {name_max}")
    if len(os.fsencode(str(path.absolute()))) >= os.pathconf("/", "PC_PATH_MAX"):
        raise UsageError(f"{where}: the path exceeds the file system's limit of "
                         f"{os.pathconf('/', 'PC_PATH_MAX')} bytes")
    if existing == path.absolute():
        if folder and not path.is_dir():
            raise UsageError(f"{where}: is a file, expected a folder")
        if not folder and path.is_dir():
            raise UsageError(f"{where}: is a folder, expected a file")
        if not folder and path.exists() and not path.is_file():  # links followed
            raise UsageError(f"{where}: not a regular file (a device, pipe or socket)")
        existing = path.absolute() if folder else path.absolute().parent
    if not existing.is_dir():
        raise UsageError(f"{where}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{where}: cannot write in {existing} (permission denied)")
    try:  # access() says yes to root everywhere, and to folders like /proc where nothing can be made
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise UsageError(f"{where}: cannot write in {existing} ({err.strerror})") from None
