"""Every trainer run as a person runs it: a subprocess of the command line with a tiny
budget (CleanRL's smoke tests). Each must exit 0 and leave its checkpoint, metric log
and curve behind."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.costmodel.conftest import write_tile

CLI = [sys.executable, "-c", "from graphopt.cli import app; app()"]


def _run(*args: str) -> None:
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def _log_keys(folder: Path) -> set[str]:
    with open(folder / "log.csv") as f:
        return set(next(csv.reader(f)))


def _assert_run(folder: Path, checkpoint: tuple[str, ...]) -> set[str]:
    for name in (*checkpoint, "log.csv", "curve.png"):
        assert (folder / name).is_file(), name
    keys = _log_keys(folder)
    assert any(k.startswith("losses/") for k in keys) and any(k.startswith("charts/") for k in keys)
    return keys


def test_go_pretraining(tmp_path):
    out = tmp_path / "go"
    _run("train", "--corpus", "example:layered-40@p100:2", "--updates", "2", "--num-samples", "2",
         "--out", str(out))
    keys = _assert_run(out, ("weights.safetensors", "checkpoint.json", "policy.safetensors"))
    assert {"losses/approx_kl", "losses/clipfrac", "charts/best_ratio"} <= keys


@pytest.mark.parametrize("method", ["rl-lstm", "hdp"])
def test_reinforce_placers(tmp_path, method):
    out = tmp_path / method
    _run("optimize", "example:layered-40", "-c", "p100:2", "-m", method, "-b", "8",
         "-p", f"{method}.hidden=8", "-p", f"{method}.checkpoint_dir={out}")
    keys = _assert_run(out, ("weights.safetensors", "checkpoint.json"))
    assert {"losses/loss", "charts/best_step_time"} <= keys


def test_cost_model(tmp_path):
    data = tmp_path / "tile"
    data.mkdir()
    for i in range(4):
        write_tile(data / f"k{i}.npz", n=5, c=8, seed=i)
    _run("costmodel", "train", "--data", str(data), "--epochs", "1", "--hidden", "8",
         "--op-embed", "4", "--split", "graphs", "--out", str(tmp_path), "--run-name", "r",
         "--no-progress")
    keys = _assert_run(tmp_path / "r", ("weights.safetensors", "checkpoint.json", "config.json"))
    assert {"losses/train", "charts/kendall_tau"} <= keys
