"""Learning curves of searches and trainers as PNG."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["learning_curve"]


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
