"""Gantt chart of a simulated timeline as a PNG: one row per device, one per busy link."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from matplotlib.colors import to_rgba_array
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from graphopt._files import atomic_write
from graphopt.ir.ops import OP_CLASSES
from graphopt.sim.problem import Problem, SimResult
from graphopt.sim.trace import kernel_ops, require_timeline, used_links

__all__ = ["gantt"]

_MS = 1e3
_PIXELS = 2000  # merge resolution: about twice the plot's width in pixels
_TRANSFER_COLOR = "#555555"
# one colour per op class id: tab10 without its grey, then tab20's light tones
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896"]
_RGBA = to_rgba_array(_PALETTE)


def _merge(start: np.ndarray, end: np.ndarray, key: np.ndarray, gap: float):
    """Join intervals of equal ``key`` less than ``gap`` apart; ``(start, end, key)`` of the
    runs. Intervals of one key must not overlap (one kernel or transfer at a time)."""
    o = np.lexsort((start, key))
    s, e, k = start[o], end[o], key[o]
    new = np.ones(len(s), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] - e[:-1] > gap)
    i = np.flatnonzero(new)
    return s[i], (np.maximum.reduceat(e, i) if len(i) else e), k[i]


def gantt(problem: Problem, result: SimResult, path: str | os.PathLike, title: str | None = None,
          max_kernels: int = 20000) -> Path:
    """Draw the timeline of ``result`` as a Gantt chart and write it to ``path`` (PNG).

    Rows are the devices' compute, then every directed link that carried a transfer,
    each labelled with its busy share of the step. Kernels are coloured by the op class
    of the op that dominates them (:func:`~graphopt.sim.trace.kernel_ops`; a fused
    kernel's root is often a cheap view), the widest (over 1/12 of the step, 40 at most)
    named by it; transfers in grey; the x axis is in ms and the title gives the
    step time, its ratio to the lower bound and the plan's validity.

    Parameters
    ----------
    problem, result
        ``result`` must come from ``simulate(problem, plan, timeline=True)``.
    path : path-like
        The PNG to write (atomically).
    title : str, optional
        First title line. Default: ``"<graph> on <cluster>"``.
    max_kernels : int
        Above this many kernels plus transfers, bars of one row and op class less than
        about half a pixel apart are drawn as one (same picture, bounded drawing time).

    Raises
    ------
    GraphoptError
        ``result`` has no timeline.

    Examples
    --------
    >>> import os, tempfile
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import Plan, Problem, simulate
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> png = gantt(prob, simulate(prob, Plan(), timeline=True),
    ...             os.path.join(tempfile.mkdtemp(), "step.png"))
    >>> png.read_bytes()[:4] == b"\\x89PNG"
    True
    """
    tl = require_timeline(result)
    devices, nd, nc = problem.cluster.devices, problem.cluster.num_devices, len(OP_CLASSES)
    step = max(result.step_time, 1e-12)
    link = tl.transfer_src * nd + tl.transfer_dst
    link_busy = np.bincount(link, weights=tl.transfer_end - tl.transfer_start, minlength=nd * nd)
    # a fused kernel takes the colour and name of the op that dominates it, not its root's
    dominant = kernel_ops(problem, tl)[0]
    k = (tl.start, tl.end, tl.device * nc + problem.costs.class_id[dominant])
    t = (tl.transfer_start, tl.transfer_end, link)
    merged = len(tl.kernel) + len(link) > max_kernels
    if merged:
        k, t = _merge(*k, step / _PIXELS), _merge(*t, step / _PIXELS)
    kbars, tbars = (np.column_stack([s, e - s]) * _MS for s, e, _ in (k, t))
    kdev, cls = np.divmod(k[2], nc)
    kcolor = _RGBA[cls % len(_RGBA)]
    # (label, busy seconds, bars, colour, bar height) per row: devices, then used links
    rows = [(dev.name, result.busy[d], kbars[kdev == d], kcolor[kdev == d], 0.8)
            for d, dev in enumerate(devices)]
    rows += [(f"{devices[s].name} → {devices[d].name}", link_busy[s * nd + d],
              tbars[t[2] == s * nd + d], _TRANSFER_COLOR, 0.6) for s, d in used_links(tl)]

    n = len(rows)
    fig = Figure(figsize=(12, 1.5 + 0.4 * min(n, 12) + 0.2 * max(n - 12, 0)),
                 layout="constrained")
    ax = fig.add_subplot()
    edge = 0.5 if len(kbars) + len(tbars) <= 1000 else 0.0  # white gaps between wide bars
    for r, (_, _, bars, color, h) in enumerate(rows):
        ax.broken_barh(bars, (r - h / 2, h), facecolors=color, edgecolor="white", linewidth=edge)
    if not merged:  # kernels wide enough to hold it carry their dominant op's name
        names = problem.graph.names
        for i in np.flatnonzero(tl.end - tl.start > step / 12)[:40]:
            ax.text((tl.start[i] + tl.end[i]) / 2 * _MS, tl.device[i], names[dominant[i]][:24],
                    ha="center", va="center", fontsize="x-small", clip_on=True)
    ax.set_yticks(range(n), [f"{label}  {busy / step:4.0%}" for label, busy, *_ in rows],
                  fontsize="medium" if n <= 12 else "small")
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, step * _MS)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("busy share of the step")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=_RGBA[c % len(_RGBA)], label=OP_CLASSES[c])
               for c in np.unique(cls[kbars[:, 1] > 0])]
    if n > nd:
        ax.axhline(nd - 0.5, color="black", linewidth=0.5)
        handles.append(Patch(color=_TRANSFER_COLOR, label="transfer"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1), frameon=False,
              fontsize="small")

    head = title or f"{problem.graph.name} on {problem.cluster.name}"
    bound = (f" = {result.step_time / result.lower_bound:.2f} × bound"
             if result.lower_bound > 0 else "")
    status = "valid" if result.valid else f"INVALID: {result.reason}"
    note = f" ({len(link):,} transfers; bars < 1 px apart merged)" if merged else ""
    ax.set_title(f"{head}\nstep {result.step_time * _MS:.3f} ms{bound}, "
                 f"{result.num_kernels:,} kernels{note}, {status}", fontsize="medium")

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    return Path(path)
