"""Issue 37: a full disk (or ``ulimit -f``, a quota, a read-only folder) while numba saves
the simulator's compiled code is a one-line warning naming numba's cache folder, and the
command goes on with the code it compiled; it was ``error: a write failed (No space left
on device)``, naming nothing."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).parents[2] / "src")


def test_a_cache_that_cannot_be_saved_is_a_warning_naming_its_folder(monkeypatch):
    from graphopt.sim.engine import _CacheWrites, _jit

    @_jit()
    def twice(x):
        return 2 * x

    assert isinstance(twice._cache, _CacheWrites)

    def full(sig, cres):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(_CacheWrites, "warned", False)
    monkeypatch.setattr(twice._cache._cache, "save_overload", full)
    monkeypatch.setattr(twice._cache._cache, "load_overload", lambda sig, ctx: None)
    with pytest.warns(RuntimeWarning, match="numba cannot save the simulator's compiled code in "
                                            f".*{twice._cache.cache_path}.*No space left"):
        assert twice(21) == 42

    def other(sig, cres):  # not a refused write: numba's own error stands
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    monkeypatch.setattr(twice._cache._cache, "save_overload", other)
    with pytest.raises(OSError):
        twice(1.5)


def test_under_ulimit_f_a_fresh_cache_compiles_and_warns_in_one_line(tmp_path):
    script = textwrap.dedent("""
        import warnings
        from graphopt._main import one_line_warning
        warnings.showwarning = one_line_warning
        from graphopt.sim.engine import _jit

        @_jit()
        def twice(x):
            return 2 * x

        print(twice(21))
    """)
    (tmp_path / "job.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": SRC, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))
    r = subprocess.run([sys.executable, str(tmp_path / "job.py")], capture_output=True, text=True,
                       env=env, preexec_fn=limit, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "42", r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: numba cannot save"), r.stderr
    assert str(tmp_path / "cache") in lines[0] and "File too large" in lines[0]
