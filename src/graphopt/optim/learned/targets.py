"""Target plans for learning from search: a long search per training graph of a corpus.

The learned methods imitate what a search finds (issue 35's "learning from search"):
:func:`search_targets` runs one method (``portfolio`` by default: every placement
heuristic, then annealing from the fastest) on every built item of a corpus's split, on
a cluster assigned to each item, and keeps the best plan as the item's *target*. A
later round with ``policy`` set seeds each search with the policy's own zero-shot plan
(expert iteration): the search starts where the policy stands, and an item's target
only ever improves.

On disk, beside the corpus's ``manifest.json``::

    targets.json                 {"format": "graphopt-corpus-targets", "version": 1,
                                  "entries": {"<id>@<cluster>": {...}}}
    targets/<id>@<cluster>.json  the target plan (graphopt plan format)

Each entry: ``item``, ``cluster``, ``file``, ``step_time`` (s), ``expert_step_time``,
``method``, ``budget``, ``seed``, ``evals``, ``seconds``, ``rounds`` (searches that
tried to improve it) and ``policy`` (the seeding policy's folder, or None). Both files
are written atomically after every item, so an interrupted search resumes where it
stopped (an item is done when its entry records this method and budget, and in a
policy's round this policy).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from graphopt._files import check_record, inside, read_index, safe_name, write_json
from graphopt.corpus import load_manifest
from graphopt.errors import BadFileError, GraphoptError, InfeasibleError, UsageError
from graphopt.sim import Plan, Problem, simulate

__all__ = ["FORMAT", "PRIOR_BUDGET", "VERSION", "Target", "assign_clusters", "check_index", "load_targets",
           "move_gains", "prior_moves", "prior_plan", "prior_plans", "search_targets"]

FORMAT = "graphopt-corpus-targets"
VERSION = 1

#: Clusters the targets are searched on, one per item in turn: the device counts GO's
#: shipped corpus trains on, so the policy learns to read the count.
DEFAULT_CLUSTERS = ("p100:2", "p100:4", "p100:8")


def _empty() -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "entries": {}}


def _index(folder: Path) -> dict[str, Any]:
    path = folder / "targets.json"
    if not path.exists():
        return _empty()
    return check_index(read_index(path, FORMAT, VERSION, "entries",
                                  "a graphopt corpus targets file"), path)


def check_index(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """``doc``, the targets index read from ``path``, when every entry is as
    :func:`search_targets` writes it: its key ``<item>@<cluster>``, ``item`` a corpus id
    (never ``../../x``, a path or a NUL), ``cluster`` text, ``method``, ``budget`` and
    ``rounds``; a target's ``file`` a path inside the corpus and its ``step_time`` a
    finite time > 0. Else :class:`GraphoptError`, one line naming the file and the field."""
    for key, entry in doc["entries"].items():
        where = f"{path}: entries[{key!r}]"
        check_record(entry, where, {"item": "str", "cluster": "str", "method": "str",
                                    "budget": "count", "rounds": "count", "policy?": "str?",
                                    "seed?": "count", "evals?": "count", "seconds?": "seconds",
                                    "status?": "str", "step_time?": "time?",
                                    "expert_step_time?": "time?", "file?": "str"})
        safe_name(entry["item"], f"{where}: field 'item'")
        if key != f"{entry['item']}@{entry['cluster']}":
            raise BadFileError(f"{where}: the key is not its item@cluster "
                               f"({entry['item']}@{entry['cluster']})")
        inside(path.parent, f"priors/{key}.json", f"{where}: field 'cluster'")
        if "file" in entry:
            inside(path.parent, entry["file"], f"{where}: field 'file'")
            check_record(entry, where, {"step_time": "time?"})
    return doc


def _save_index(folder: Path, doc: dict[str, Any]) -> None:
    write_json(folder / "targets.json", doc)


def assign_clusters(ids: list[str], clusters: tuple[str, ...] = DEFAULT_CLUSTERS
                    ) -> dict[str, str]:
    """Each item's cluster: ``clusters`` in turn over the ids in sorted order (stable
    whatever order a build added them in).

    >>> assign_clusters(["b", "a", "c"], ("p100:2", "p100:4"))
    {'a': 'p100:2', 'b': 'p100:4', 'c': 'p100:2'}
    """
    if not clusters:
        raise UsageError("targets: no cluster given")
    return {i: clusters[k % len(clusters)] for k, i in enumerate(sorted(ids))}


class Target:
    """One item's target: the problem (graph on its cluster), the plan and its entry."""

    def __init__(self, problem: Problem, plan: Plan, entry: dict[str, Any]) -> None:
        self.problem, self.plan, self.entry = problem, plan, entry

    @property
    def family(self) -> str:
        return self.entry["family"]

    @property
    def key(self) -> str:
        """``<item>@<cluster>``: the entry's name in ``targets.json`` and its files'."""
        return f"{self.entry['item']}@{self.entry['cluster']}"


def _problem(folder: Path, record: dict[str, Any], cluster: str) -> Problem:
    from graphopt.hardware import load_cluster
    from graphopt.ir import load_graph

    return Problem(load_graph(folder / record["file"]), load_cluster(cluster))


def load_targets(folder: str | Path, split: str = "train") -> list[Target]:
    """Every target of ``split``'s items in the corpus ``folder``, in sorted key order.

    Raises
    ------
    GraphoptError
        No targets (run ``graphopt corpus search`` first), or a file that does not read.
    """
    folder = Path(folder)
    records = load_manifest(folder)["items"]
    doc = _index(folder)
    out = []
    for key in sorted(doc["entries"]):
        entry = doc["entries"][key]
        record = records.get(entry.get("item"))
        if (record is None or record.get("split") != split or record.get("status") != "built"
                or "file" not in entry):
            continue
        problem = _problem(folder, record, entry["cluster"])
        plan = Plan.load(folder / entry["file"])
        try:
            plan.check(problem.num_nodes, problem.num_devices)
        except GraphoptError as err:
            raise GraphoptError(f"{folder / entry['file']}: {err}") from err
        out.append(Target(problem, plan, {**entry, "family": record["family"]}))
    if not out:
        raise BadFileError(f"{folder}: no target plans of the {split} split; run "
                           f"'graphopt corpus search {folder}' first")
    return out


#: Evaluations of the hand-written prior (``best``: every placement heuristic, the fastest
#: plan), as ``bench/go_transfer.py`` gives it; the heuristics spend 10-100 of them.
PRIOR_BUDGET = 2000


def prior_plan(problem: Problem, seed: int = 0) -> Plan:
    """The hand-written prior of ``problem`` that a prior-aware GO policy learns to
    improve on: the plan of ``best`` (every placement heuristic, the fastest)."""
    from graphopt.optim.base import Budget, optimize

    return optimize(problem, "best", frozenset({"placement"}), Budget(evals=PRIOR_BUDGET),
                    seed)[0]


def prior_plans(folder: str | Path, targets: list[Target], seed: int = 0,
                progress: Callable[[int, int, str], None] | None = None) -> list[Plan]:
    """:func:`prior_plan` of each target's problem, computed once and kept beside the
    targets (``priors/<key>.json``, written atomically), so a second call only reads
    them."""
    folder = Path(folder)
    out = []
    for done, t in enumerate(targets, 1):
        path = folder / "priors" / f"{t.key}.json"
        if path.exists():
            plan = Plan.load(path)
            plan.check(t.problem.num_nodes, t.problem.num_devices)
        else:
            plan = prior_plan(t.problem, seed)
            plan.save(path)
        out.append(plan)
        if progress:
            progress(done, len(targets), t.key)
    return out


def move_gains(problem: Problem, plan: Plan, unit: np.ndarray, chunk: int = 512) -> np.ndarray:
    """The speedup of every single move from ``plan``: entry ``[u, d]`` is ``plan``'s step
    time over that of ``plan`` with all ops of node ``u`` (``unit``: each op's node) on
    device ``d`` (1 where they all are there already, 0 where the move does not fit).
    The whole neighbourhood a local search walks from ``plan``, simulated in batches of
    ``chunk``.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> p = Problem(layered_graph(4, 3, seed=0), load_cluster("p100:2"))
    >>> g = move_gains(p, Plan(placement=np.zeros(p.num_nodes, np.int64)), np.arange(p.num_nodes))
    >>> g.shape == (p.num_nodes, 2), bool((g[:, 0] == 1).all()), bool((g[:, 1] > 1).any())
    (True, True, True)
    """
    from graphopt.evaluate.local import LocalEvaluator

    place = np.asarray(plan.placement, np.int64)
    u, d = int(unit.max()) + 1, problem.num_devices
    ev = LocalEvaluator(problem)
    base = ev.evaluate(place[None])
    if not base.valid[0]:
        raise InfeasibleError(f"{problem.graph.name}: the start plan does not fit")
    members = np.split(np.argsort(unit, kind="stable"), np.cumsum(np.bincount(unit, minlength=u))[:-1])
    gains = np.ones((u, d))  # a node already wholly on a device: nothing moves, nothing simulated
    moves = [(k, dev) for k in range(u) for dev in range(d) if (place[members[k]] != dev).any()]
    for i in range(0, len(moves), chunk):
        batch = moves[i:i + chunk]
        rows = np.repeat(place[None], len(batch), 0)
        for r, (k, dev) in enumerate(batch):
            rows[r, members[k]] = dev
        res = ev.evaluate(rows)
        k, dev = np.array(batch).T
        gains[k, dev] = np.where(res.valid, base.step_time[0] / res.step_time, 0.0)
    return gains


def _read_gains(path: Path, shape: tuple[int, int]) -> np.ndarray | None:
    """The float64 array of ``shape`` kept at ``path``; None when it is missing, or its
    header says another shape or type (checked before any array is allocated), or it
    does not read.

    Raises
    ------
    GraphoptError
        A gain that is NaN, infinite or negative (a speedup is a ratio of finite times:
        the policy would learn from it), naming the file and the first such entry.
    """
    from numpy.lib import format as npy

    try:
        with open(path, "rb") as f:
            version = npy.read_magic(f)
            read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            header = read(f)
        if header != (shape, False, np.dtype(np.float64)):
            return None
        gains = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    bad = ~np.isfinite(gains) | (gains < 0)
    if bad.any():
        u, d = (int(i) for i in np.argwhere(bad)[0])
        raise BadFileError(f"{path}: move gain [{u}, {d}] is {gains[u, d]}; gains are finite "
                           "numbers >= 0 (remove the file to compute them again)")
    return gains


def prior_moves(folder: str | Path, targets: list[Target], priors: list[Plan],
                units: list[np.ndarray],
                progress: Callable[[int, int, str], None] | None = None) -> list[np.ndarray]:
    """:func:`move_gains` from each target's prior, on the policy's nodes ``units``; kept
    beside the priors (``priors/<key>.<digest>.moves.npy``, no pickle; the digest is of
    the prior's placement and the nodes, so a changed prior is never read with another's
    gains) and read back when the header matches."""
    import hashlib
    import io

    from graphopt._files import atomic_write

    folder = Path(folder)
    out = []
    for done, (t, prior, unit) in enumerate(zip(targets, priors, units), 1):
        digest = hashlib.sha256(np.asarray(prior.placement, np.int64).tobytes()
                                + np.asarray(unit, np.int64).tobytes()).hexdigest()[:16]
        path = folder / "priors" / f"{t.key}.{digest}.moves.npy"
        shape = (int(unit.max()) + 1, t.problem.num_devices)
        gains = _read_gains(path, shape)
        if gains is None:
            gains = move_gains(t.problem, prior, unit)
            buf = io.BytesIO()
            np.save(buf, gains, allow_pickle=False)
            atomic_write(path, lambda f, data=buf.getvalue(): f.write(data))
        out.append(gains)
        if progress:
            progress(done, len(targets), t.key)
    return out


def _policy_plan(problem: Problem, policy_dir: str | Path, seed: int) -> Plan:
    """The policy's most likely placement (its zero-shot greedy plan): the search's seed;
    a prior-aware policy's, its best moves off the heuristics' plan (``go``)."""
    import torch

    from graphopt.optim.base import Budget, optimize
    from graphopt.optim.learned.go.env import GOEnv
    from graphopt.optim.learned.go.method import load_go_policy, reads_prior
    from graphopt.rl.ppo import sample

    policy, _ = load_go_policy(policy_dir)
    if reads_prior(policy):
        return optimize(problem, "go", frozenset({"placement"}), Budget(evals=PRIOR_BUDGET),
                        seed, checkpoint=str(policy_dir))[0]
    env = GOEnv(problem, frozenset({"placement"}), "groups", placement_flips=0.0)
    with torch.no_grad():
        logits = policy(*env.inputs(), tasks=env.tasks)
    actions = sample(logits, 1, torch.Generator().manual_seed(seed), greedy=True)
    place, _, _ = env.plans(actions)
    return Plan(placement=place[0])


def search_targets(folder: str | Path, *, method: str = "portfolio", budget: int = 2000,
                   clusters: tuple[str, ...] = DEFAULT_CLUSTERS, seed: int = 0,
                   split: str = "train", policy: str | Path | None = None,
                   limit: int | None = None,
                   progress: Callable[[int, int, str, dict[str, Any]], None] | None = None,
                   ) -> dict[str, Any]:
    """Search a target plan for every built item of ``split`` (see the module docstring).

    Parameters
    ----------
    folder : path
        A corpus built by ``graphopt corpus build``.
    method, budget, seed
        The search (a registered method name), its evaluations per item and its seed.
    clusters : tuple of str
        Cluster specs assigned to the items in turn (:func:`assign_clusters`).
    policy : path, optional
        A saved GO policy: each search starts from its greedy plan (expert iteration);
        the round counter of the entry goes up by one.
    limit : int, optional
        Search at most this many items (the first, in sorted id order).
    progress : callable, optional
        ``progress(done, total, key, entry)`` after each item.

    Returns
    -------
    dict
        The targets index (``entries``).
    """
    from graphopt.optim.base import Budget, optimize

    folder = Path(folder)
    records = load_manifest(folder)["items"]
    ids = sorted(i for i, r in records.items()
                 if r.get("split") == split and r.get("status") == "built")
    if not ids:
        raise BadFileError(f"{folder}: no built items of the {split} split")
    where = assign_clusters(ids, clusters)
    ids = ids[:limit] if limit is not None else ids
    doc = _index(folder)
    seeded_by = None if policy is None else str(policy)
    for done, item in enumerate(ids, 1):
        cluster = where[item]
        key = f"{item}@{cluster}"
        old = doc["entries"].get(key)
        # a target of this method and budget is kept; in a policy's round, one that this
        # policy seeded (so an interrupted round resumes where it stopped)
        if old is not None and (old.get("method"), old.get("budget")) == (method, budget) \
                and (policy is None or old.get("policy") == seeded_by):
            if progress:
                progress(done, len(ids), key, {**old, "reused": True})
            continue
        round_ = old["rounds"] + 1 if old else 1
        t0 = time.perf_counter()
        problem = _problem(folder, records[item], cluster)
        init = None if policy is None else _policy_plan(problem, policy, seed)
        plan, stats = optimize(problem, method, frozenset({"placement"}), Budget(evals=budget),
                               seed, init=init)
        step = stats.get("step_time")
        expert, _ = optimize(problem, "expert", frozenset({"placement"}), Budget(evals=1), seed)
        expert_res = simulate(problem, expert)
        if old is not None and old.get("step_time") is not None and (
                step is None or old["step_time"] <= step):
            plan, step = Plan.load(folder / old["file"]), old["step_time"]  # keep the better
        if step is None or not np.isfinite(step):
            entry = {"item": item, "cluster": cluster, "status": "no valid plan",
                     "method": method, "budget": budget, "rounds": round_, "policy": seeded_by}
        else:
            file = f"targets/{key}.json"
            plan.save(folder / file)
            entry = {"item": item, "cluster": cluster, "file": file, "step_time": float(step),
                     "expert_step_time": float(expert_res.step_time) if expert_res.valid else None,
                     "method": method, "budget": budget, "seed": seed,
                     "evals": int(stats.get("evals", 0)), "rounds": round_,
                     "policy": seeded_by,
                     "seconds": round(time.perf_counter() - t0, 3)}
        doc["entries"][key] = entry
        _save_index(folder, doc)
        if progress:
            progress(done, len(ids), key, entry)
    return doc
