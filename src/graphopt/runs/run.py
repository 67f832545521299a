"""What every trainer does the same way, as CleanRL does it: one seeding block, a run
name, and a CSV log of metrics grouped by kind.

Metric keys follow CleanRL: ``losses/...`` for what the optimizer minimizes and its
diagnostics (loss, entropy, approximate KL, clip fraction), ``charts/...`` for how the
run is doing (step time over the bound, held-out ranking quality, learning rate,
throughput); the counters a row is indexed by (``update``, ``epoch``, ``evals``,
``seconds``) stay bare.
"""

from __future__ import annotations

import csv
import io
import os
import random
import time
from collections.abc import Sequence

import numpy as np
import torch

from graphopt._files import atomic_write
from graphopt.runs.checkpoint import META, POLICY_META, POLICY_WEIGHTS, WEIGHTS

__all__ = ["CURVE_FILE", "LOG_FILE", "RUN_FILES", "run_name", "seed_everything", "write_log"]

#: A trainer's metric log and learning curve in its folder.
LOG_FILE, CURVE_FILE = "log.csv", "curve.png"
#: Every file a trainer writes in its folder: the checkpoint, the log and curve, the policy.
RUN_FILES = (WEIGHTS, META, LOG_FILE, CURVE_FILE, POLICY_WEIGHTS, POLICY_META)


def seed_everything(seed: int, threads: int | None = None) -> torch.Generator:
    """Seed Python, numpy and torch; set torch's CPU threads (left alone when None);
    return a torch generator seeded with ``seed`` for the trainer's own sampling (so that
    a checkpoint can carry it). numba's kernels draw nothing at random.

    Examples
    --------
    >>> g = seed_everything(0)
    >>> bool(torch.rand(1, generator=g) == torch.rand(1, generator=seed_everything(0)))
    True
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.Generator().manual_seed(seed)


def run_name(*parts: str, seed: int) -> str:
    """CleanRL's run name, ``{parts joined by __}__{seed}__{unix time}``.

    Examples
    --------
    >>> run_name("mlp", "hdp", seed=3).startswith("mlp__hdp__3__")
    True
    """
    return "__".join([*parts, str(seed), str(int(time.time()))])


def write_log(rows: Sequence[dict], path: str | os.PathLike) -> None:
    """Write metric rows (one dict per update or epoch, the first one's keys as the
    header) as CSV, atomically; nothing when there are no rows.

    Examples
    --------
    >>> import tempfile
    >>> p = tempfile.mkdtemp() + "/log.csv"
    >>> write_log([{"update": 1, "losses/loss": 0.5}], p)
    >>> open(p).read().splitlines()
    ['update,losses/loss', '1,0.5']
    """
    if not rows:
        return
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write(path, lambda f: f.write(buf.getvalue().encode()))
