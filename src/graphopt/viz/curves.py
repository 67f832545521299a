"""Learning curves of searches and trainers as PNG."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["learning_curve", "metric_curves"]


def learning_curve(history: Sequence[Sequence], path: str | os.PathLike,
                   samples: Sequence[Sequence] | None = None, title: str = "") -> Path:
    """Plot the best step time so far against evaluations and write a PNG.

    Parameters
    ----------
    history : rows of (evals, seconds, best step time in s or None)
        As in an optimizer's ``stats["history"]``; rows before the first valid plan
        (None or inf) are skipped.
    path : str or PathLike
        The PNG to write (folders are created).
    samples : rows of (evals, mean step time of a batch in s or None), optional
        Drawn too: how good the policy's samples are, not only the best one.
    title : str

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> p = learning_curve([(4, 0.1, 2e-3), (8, 0.2, 1e-3)], tempfile.mkdtemp() + "/c.png")
    >>> p.stat().st_size > 0
    True
    """
    plt = _pyplot()

    def finite(rows):
        return [(r[0], r[-1] * 1e3) for r in rows if r[-1] is not None and r[-1] != float("inf")]

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    if samples:
        pts = finite(samples)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", ms=2, alpha=0.5,
                color="tab:gray", label="batch mean")
    pts = finite(history)
    ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color="tab:blue",
            label="best so far")
    ax.set_xlabel("simulator evaluations")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def metric_curves(rows: Sequence[dict], path: str | os.PathLike, x: str,
                  panels: Sequence[Sequence[str]], title: str = "") -> Path:
    """Plot logged metrics against a counter, one panel per group of keys, and write a PNG.

    Parameters
    ----------
    rows : dicts
        A trainer's log, one row per update or epoch (as written to its ``log.csv``);
        missing or None values are skipped.
    path : str or PathLike
        The PNG to write (folders are created).
    x : str
        The key on the horizontal axis, e.g. ``"epoch"``.
    panels : groups of keys
        One panel per group, each key a line, e.g. ``[["losses/train"],
        ["charts/kendall_tau", "charts/tile_score"]]``.
    title : str

    Returns
    -------
    Path

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"epoch": 0, "losses/train": 1.0}, {"epoch": 1, "losses/train": 0.5}]
    >>> metric_curves(rows, tempfile.mkdtemp() + "/c.png", "epoch", [["losses/train"]]).is_file()
    True
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.2), dpi=100,
                             squeeze=False)
    for ax, keys in zip(axes[0], panels):
        for key in keys:
            pts = [(r[x], r[key]) for r in rows if r.get(key) is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=key)
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike) -> Path:
    import matplotlib.pyplot as plt

    from graphopt._files import save_figure

    fig.tight_layout()
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)
