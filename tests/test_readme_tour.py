"""The README's tour runs as written on a fresh clone, in order, and leaves the checkout
clean: every input is made by a command shown before it, every output goes under runs/.

The commands run in a fresh git repository holding a copy of this checkout's tracked
files; ``graphopt`` commands run in this process through the Typer app (one import of
torch and the simulator for all of them), the ``python -c`` lines with ``exec``. The long
commands get the short settings of :data:`SHORT`; ``graphopt bench`` lines are left out
(the benchmarks have their own tests and take minutes even with ``--quick``), and so are
the real runs on worker processes (:data:`SIMULATED`) unless $GRAPHOPT_TOUR_FULL=1.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: (pattern, replacement) applied to a tour command before it runs: the same command with
#: short settings. Each pattern must match some command (checked), so that a tour edit
#: that drops one shows here.
SHORT: list[tuple[str, str]] = [
    # the full-size zoo graphs (8,402 ops: m-sct alone takes 25 s) at their quick sizes
    (r"zoo:(rnnlm-4|transformer-xl-8) ", r"zoo:\1-quick "),
    (r"--budget 2000", "--budget 60"),
    # optimize lines without a budget: the default is 2,000 evaluations per method
    (r"^(graphopt optimize (?:runs/mlp\.npz|zoo:transformer-xl-8)\b(?!.*--budget).*)$",
     r"\1 --budget 60"),
    (r"^(graphopt optimize zoo:rnnlm-2-quick .*--measure.*)$",
     r"\1 --budget 60 --measure-steps 1"),
    # pre-training: the zoo's train split for 12 minutes; here two updates on a quick model
    (r"^graphopt train --out runs/go$",
     "graphopt train --out runs/go --corpus zoo:rnnlm-2-quick@p100:2 --updates 2 --num-samples 4"
     " --update-epochs 1"),
    (r"--corpus zoo:gnmt-4@p100:4,zoo:rnnlm-8@p100:8",
     "--corpus zoo:rnnlm-2-quick@p100:2 --updates 1 --num-samples 4 --update-epochs 1"),
    (r"^(graphopt costmodel train .*)$", r"\1 --epochs 1 --no-progress"),
    (r"^(graphopt run .*)$", r"\1 --steps 1"),
    (r"^(graphopt profile .*)$", r"\1 --repeats 1"),
]

#: Unless $GRAPHOPT_TOUR_FULL=1: the commands that run programs for real on CPU worker
#: processes (each worker imports torch; calibrate, optimize --measure and run took 25-30
#: CPU seconds each here, minutes on a loaded machine) are left out or simulated only. An
#: empty replacement leaves the command out; the next ones still get their inputs.
SIMULATED: list[tuple[str, str]] = [
    (r"^graphopt calibrate .*$", ""),
    (r"^(graphopt optimize zoo:rnnlm-2-quick) -c runs/cluster\.toml (--methods \S+) --measure "
     r"(--out runs/r) .*$", r"\1 -c cpu:2 \2 \3 --budget 60"),
    (r"^graphopt run .*$", ""),
]
FULL = os.environ.get("GRAPHOPT_TOUR_FULL") == "1"


def tour_commands(text: str) -> list[str]:
    """The commands of README's ``<!-- tour -->`` block: comments dropped, continued
    lines joined, ``.venv/bin/`` taken off."""
    m = re.search(r"<!-- tour -->\s*```bash\n(.*?)```\s*<!-- /tour -->", text, re.S)
    assert m, "README.md has no <!-- tour --> ... <!-- /tour --> block"
    commands, current = [], ""
    for line in m.group(1).splitlines():
        continued = line.rstrip().endswith("\\")
        words = shlex.split(line.rstrip().removesuffix("\\"), comments=True)
        if not words:
            continue
        if continued:
            current += shlex.join(words) + " "
            continue
        commands.append((current + shlex.join(words)).removeprefix(".venv/bin/"))
        current = ""
    assert not current, f"a continued line ends the tour: {current!r}"
    return commands


def shorten(command: str, used: set[int], full: bool = True) -> str:
    """``command`` with :data:`SHORT`'s settings and, unless ``full``, :data:`SIMULATED`'s;
    ``used`` collects the indices of the rules that applied (SIMULATED's after SHORT's)."""
    rules = SHORT + ([] if full else SIMULATED)
    for i, (pattern, repl) in enumerate(rules):
        new = re.sub(pattern, repl, command)
        if new != command:
            used.add(i)
            command = new
    return command


def _status(repo: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                          capture_output=True, text=True, check=True).stdout


def _fresh_clone(dest: Path) -> None:
    """A git repository holding this checkout's files as they are now (edits and files
    not yet added included, ignored ones left out), committed: what a user has after
    cloning."""
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listing, cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "clone"]):
        subprocess.run(cmd, cwd=dest, check=True, env=env)


def test_tour_parses_and_every_short_setting_applies():
    commands = tour_commands(README.read_text())
    assert commands[0].startswith("graphopt ") and len(commands) > 10
    used: set[int] = set()
    for c in commands:
        assert c.startswith(("graphopt ", "python -c ")), c
        shorten(c, used, full=False)
    rules = SHORT + SIMULATED
    assert used == set(range(len(rules))), [rules[i][0] for i in set(range(len(rules))) - used]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs git and a git checkout")
def test_readme_tour_runs_in_order_and_leaves_the_clone_clean(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from graphopt.cli import app

    clone = tmp_path / "clone"
    clone.mkdir()
    _fresh_clone(clone)
    monkeypatch.chdir(clone)
    runner = CliRunner()
    used: set[int] = set()
    for command in tour_commands(README.read_text()):
        start = time.perf_counter()
        words = shlex.split(shorten(command, used, full=FULL))
        if not words or words[:2] == ["graphopt", "bench"]:
            continue  # minutes even with --quick; tests/benchmarks covers them
        if words[0] == "python":
            exec(compile(words[2], "<README tour>", "exec"), {})
            continue
        result = runner.invoke(app, words[1:])
        assert result.exit_code == 0, f"{command}\n{result.output}\n{result.exception!r}"
        print(f"{time.perf_counter() - start:6.1f} s  {command}")  # shown with -s or on failure
    assert _status(clone) == "", "the tour left files git does not ignore"
    assert (clone / "runs").is_dir()
