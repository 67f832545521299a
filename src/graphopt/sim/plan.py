"""Plans: the decisions an optimizer makes, as plain data with an exact JSON form."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphopt.errors import PlanError
from graphopt._files import atomic_write, read_json
from graphopt.ir.io import check_header

__all__ = ["INVALID_PENALTY", "Plan", "check_made_for"]

#: The one cost of an invalid plan (out of memory), in every score that ranks plans: it
#: counts as this many times a valid plan's scale. The evaluator's score adds this many
#: bounds per unit of relative memory overflow (``graphopt.evaluate.objective.score``); ``tune``
#: counts an invalid plan's step time this many times over; PPO rewards it as
#: ``−√INVALID_PENALTY`` (this many lower bounds); REINFORCE charges it
#: ``INVALID_PENALTY**2`` seconds, a cost of √ = ``INVALID_PENALTY`` (grappler's 100 s).
INVALID_PENALTY = 10.0

FORMAT = "graphopt.plan"
VERSION = 1


@dataclass(frozen=True, eq=False)
class Plan:
    """Where each op runs, in what order, and what fuses.

    Parameters
    ----------
    placement : int array (N,), optional
        Device index of every node. Default: everything on device 0.
    priority : float array (N,), optional
        Higher runs first among the kernels ready on a device; ties go to the lower
        node index. Default: first ready, first run (TensorFlow's executor).
    fusion : float array (N,), optional
        Fusion priority of every node: the fusion pass tries to fuse a node into its
        consumer in decreasing order of this value; a value <= 0 never fuses. Default:
        the compiler's greedy fusion. ``np.zeros(N)`` turns fusion off.
    meta : dict
        Free-form provenance (method, seed, search time); kept in the JSON form.

    Examples
    --------
    >>> p = Plan(placement=np.array([0, 1, 1]))
    >>> Plan.from_dict(p.to_dict()) == p
    True
    """

    placement: np.ndarray | None = None
    priority: np.ndarray | None = None
    fusion: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k, t in (("placement", np.int64), ("priority", np.float64), ("fusion", np.float64)):
            v = getattr(self, k)
            if v is None:
                continue
            try:
                f = np.array(v, dtype=np.float64)
                with np.errstate(invalid="ignore"):  # NaN or 1e30 as int: refused just below
                    a = f.astype(t)
            except (TypeError, ValueError, OverflowError) as err:
                raise PlanError(f"plan {k} is not numeric: {err}") from err
            if t is np.int64 and f.ndim == 1 and not (np.isfinite(f).all() and (f == a).all()):
                j = int(np.flatnonzero(~np.isfinite(f) | (f != a))[0])
                raise PlanError(f"plan placement[{j}] = {f[j]}; expected a whole device index")
            if a.ndim != 1:
                raise PlanError(f"plan {k} must be one value per node (1-D), got shape {a.shape}")
            if t is np.float64 and not np.isfinite(a).all():
                j = int(np.flatnonzero(~np.isfinite(a))[0])
                raise PlanError(f"plan {k}[{j}] = {a[j]}; expected a finite number")
            a.setflags(write=False)
            object.__setattr__(self, k, a)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        for k in ("placement", "priority", "fusion"):
            a, b = getattr(self, k), getattr(other, k)
            if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
                return False
        return self.meta == other.meta

    def check(self, num_nodes: int, num_devices: int) -> None:
        """Raise :class:`PlanError` unless the plan fits N nodes and D devices."""
        for k in ("placement", "priority", "fusion"):
            a = getattr(self, k)
            if a is not None and len(a) != num_nodes:
                raise PlanError(f"plan {k} has {len(a)} entries; the graph has {num_nodes} nodes")
        p = self.placement
        if p is not None and len(p) and (p.min() < 0 or p.max() >= num_devices):
            bad = np.flatnonzero((p < 0) | (p >= num_devices))
            if len(bad):
                j = int(bad[0])
                raise PlanError(f"plan placement[{j}] = {int(p[j])}: node {j} on device "
                                f"{int(p[j])}; the cluster has devices 0..{num_devices - 1}")

    def replace(self, **changes: Any) -> Plan:
        fields = {"placement": self.placement, "priority": self.priority, "fusion": self.fusion,
                  "meta": dict(self.meta)}
        fields.update(changes)
        return Plan(**fields)

    # -- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {"format": FORMAT, "version": VERSION}
        for k in ("placement", "priority", "fusion"):
            a = getattr(self, k)
            out[k] = None if a is None else a.tolist()
        return {**out, "meta": self.meta}

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Plan:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlanError(f"{source}: not a graphopt plan (expected format {FORMAT!r})")
        check_header(data, source, VERSION, PlanError)
        for k in ("placement", "priority", "fusion"):
            v = data.get(k)
            # numpy reads true as 1 and "3" as 3.0: a typo would pass as a number
            j = next((j for j, x in enumerate(v) if isinstance(x, (bool, str))), None) \
                if isinstance(v, list) else None
            if j is not None:
                raise PlanError(f"{source}: plan {k}[{j}] = {json.dumps(v[j])}; expected a number")
        try:
            return cls(placement=data.get("placement"), priority=data.get("priority"),
                       fusion=data.get("fusion"), meta=dict(data.get("meta") or {}))
        except PlanError as err:
            raise PlanError(f"{source}: {err}") from err

    def save(self, path: str | os.PathLike) -> Path:
        """Write the plan as JSON, atomically."""
        text = json.dumps(self.to_dict())
        atomic_write(path, lambda f: f.write(text.encode()))
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Plan:
        return cls.from_dict(read_json(path, PlanError), source=str(path))


def check_made_for(plan: Plan, graph) -> None:
    """Refuse a plan made for another trace than ``graph``: its ``meta["graph"]
    ["fingerprint"]``, which ``graphopt optimize --out`` writes, differs from the graph's
    (a plan without one passes).

    Raises
    ------
    PlanError
        One line naming both graphs, their node counts and fingerprints.
    """
    made_for = plan.meta.get("graph") if isinstance(plan.meta.get("graph"), dict) else {}
    if made_for.get("fingerprint") not in (None, graph.fingerprint()):
        raise PlanError(f"the plan was made for graph {made_for.get('name')!r} "
                        f"({made_for.get('nodes')} nodes, fingerprint {made_for['fingerprint']}); this "
                        f"program traces to {graph.name!r} ({graph.num_nodes} nodes, fingerprint "
                        f"{graph.fingerprint()}): not the same trace")
