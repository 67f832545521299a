"""One run per folder: :func:`lock_folder` claims the folder a command writes in for the
command's life (an exclusive ``flock`` on :data:`LOCK_FILE`); :func:`check_run_folder`
checks a run folder's outputs and claims it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import click

from graphopt._files import check_output
from graphopt.errors import BadFileError, UsageError

__all__ = ["LOCK_FILE", "lock_folder", "check_run_folder"]


#: The file that marks a folder a run is writing in: :func:`lock_folder` holds an
#: exclusive ``flock`` on it for the run's life (the kernel drops it when the process ends,
#: however it ends); a command removes it as it ends. Only a killed one (SIGKILL, power
#: loss) leaves it, empty of meaning once unlocked: the next run takes it over.
LOCK_FILE = ".graphopt.lock"


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
