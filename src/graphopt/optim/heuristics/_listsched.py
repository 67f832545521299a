"""A list scheduler that places and times ops one at a time, with a memory ledger.

HEFT, m-ETF and m-SCT all build a schedule the same way: pick an op whose inputs are
scheduled, pick a device for it, start it when the device is free and its inputs have
arrived. They differ only in which (op, device) pair they pick; that choice lives in
``heft.py`` and ``baechi.py``. This module is the shared bookkeeping:

- **time**: a device runs one op at a time (no insertion into idle gaps); an input
  from another device arrives :meth:`~graphopt.sim.Problem.transfer_time` after its
  producer ends, over the directed link, one transfer per link at a time, sent once
  per destination device (docs/design.md's transfer model).
- **followers**: inputs and parameters (no inputs of their own, no compute time) are
  not scheduled on their own; each goes to the device of its first consumer, or of its
  colocation group once the group is placed, as a placer colocates a variable with its
  reader. Otherwise every variable would be dealt out at time 0 before anything is
  known about its readers.
- **memory** (Baechi's dynamic accounting, plus received tensors): a colocation
  group's persistent bytes are reserved on its device when its first member is
  placed; an op's output and scratch are taken when it runs, the scratch given back
  after; an output is released, on its device and wherever it was received, once all
  its consumers are scheduled. An op fits a device if what is in use plus what it
  would take (output, scratch, inputs still to receive, persistent bytes, followers
  coming along) stays within the device's limit.

The ledger follows the scheduler's own order of decisions, not the simulator's, so
it is an estimate; :func:`graphopt.optim.heuristics._common.fit_memory` checks the
result with the simulator.
"""

from __future__ import annotations

import numpy as np

from graphopt.optim.heuristics._common import order_to_priority
from graphopt.sim import Problem

__all__ = ["ListScheduler"]


class ListScheduler:
    """Incremental schedule of ``problem`` under per-device memory ``limit`` (bytes, (D,)).

    ``coloc`` replaces the graph's colocation groups (e.g. by
    :func:`~graphopt.optim.heuristics._common.coplace`); it must contain them.

    An algorithm calls :meth:`assign` for every op that is not a :attr:`follower`, each
    once its :attr:`pending` inputs are assigned, in its own order and on the device
    it chooses (with :meth:`estimate`); then :meth:`place_followers` for the followers
    nobody consumed.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(layers=1, hidden=8, batch=2), load_cluster("dgx1-v100:2"))
    >>> s = ListScheduler(prob, prob.capacity)
    >>> for v in np.flatnonzero(~s.follower):   # index order is topological
    ...     s.assign(int(v), 0)
    >>> s.place_followers()
    >>> bool((s.dev == 0).all()), s.overflow
    (True, 0)

    Attributes
    ----------
    follower : bool array (N,)
        Ops placed with their first consumer instead of by the algorithm.
    pending : int array (N,)
        Inputs of each op that the algorithm itself must assign first (followers do
        not count).
    dev, start, finish : arrays (N,)
        Device (-1 until placed), start and end time of every scheduled op.
    avail : float array (D,)
        When each device finishes the last op given to it.
    used, peak, limit : float arrays (D,)
        Bytes the ledger holds on each device now, the most it has held (with scratch,
        and counting inputs received at the start of the step from then on), and what
        it may hold.
    last : int array (D,)
        The op each device ran last (-1: none yet).
    version : int array (D,)
        Bumped whenever estimates on a device may have changed (see :meth:`assign`);
        estimates made at the current version are exact, older ones are lower bounds on
        the ready time.
    overflow : int
        Ops placed on a device they did not fit (no device had room).

    Notes
    -----
    :meth:`estimate` is vectorized over the given ops and devices: O(k·K) array work for
    k inputs on K devices. :meth:`assign` costs O(in-degree + D) per input.
    """

    def __init__(self, problem: Problem, limit: np.ndarray, coloc: np.ndarray | None = None):
        g = problem.graph
        n, d = problem.num_nodes, problem.num_devices
        self.time = problem.costs.time
        self.pred_ptr, self.pred_idx = problem.pred_ptr, problem.pred_idx
        self.pred_bytes = g.edge_bytes[g.pred[2]]
        self.transfer_time = problem.transfer_time
        self.coloc = problem.coloc if coloc is None else coloc
        grouped = self.coloc >= 0
        self.num_groups = max(int(self.coloc.max(initial=-1)) + 1, 1)
        self.group_dev = np.full(self.num_groups, -1, dtype=np.int64)
        self.group_persistent = np.bincount(self.coloc[grouped], weights=problem.persistent[grouped],
                                            minlength=self.num_groups)
        self.persistent, self.out, self.temp = problem.persistent, problem.out_bytes, problem.temp_bytes
        self.follower = (g.in_degree == 0) & (self.time.max(axis=1, initial=0.0) == 0.0)
        self.pending = np.bincount(g.dst[~self.follower[g.src]], minlength=n)
        self.group_followers: dict[int, list[int]] = {}
        for v in np.flatnonzero(self.follower & grouped):
            self.group_followers.setdefault(int(self.coloc[v]), []).append(int(v))
        self.limit = np.asarray(limit, dtype=np.float64)
        self.used = np.zeros(d)
        self.peak = np.zeros(d)
        self.uses_left = np.array(g.out_degree)
        self.arrival = np.full((n, d), np.nan)  # when a node's output reached a device
        self.copy_bytes = np.zeros((n, d))  # bytes of received copies the ledger holds
        self.dev = np.full(n, -1, dtype=np.int64)
        self.start = np.zeros(n)
        self.finish = np.zeros(n)
        self.avail = np.zeros(d)
        self.link_free = np.zeros((d, d))
        self.last = np.full(d, -1, dtype=np.int64)
        self.version = np.zeros(d, dtype=np.int64)
        self.overflow = 0

    def pinned(self, nodes: np.ndarray) -> np.ndarray:
        """Device each of ``nodes`` is pinned to by its placed colocation group (-1: free)."""
        g = self.coloc[nodes]
        return np.where(g >= 0, self.group_dev[np.maximum(g, 0)], -1)

    def allowed(self, v: int) -> np.ndarray:
        """Devices ``v`` may go to: its colocation group's device once the group is placed."""
        d = self.pinned(np.array([v]))[0]
        return np.array([d]) if d >= 0 else np.arange(len(self.avail))

    def _persistent(self, nodes: np.ndarray) -> np.ndarray:
        """Persistent bytes placing each node would reserve: its group's, once per group."""
        g = self.coloc[nodes]
        gi = np.maximum(g, 0)
        group = np.where(self.group_dev[gi] < 0, self.group_persistent[gi], 0.0)
        return np.where(g < 0, self.persistent[nodes], group)

    def estimate(self, nodes, devices) -> tuple[np.ndarray, np.ndarray]:
        """When each of ``nodes`` could have all its inputs on each of ``devices``, and the
        bytes it would take there at its peak (output, scratch, persistent bytes, inputs
        still to receive, followers coming along). Both (len(nodes), len(devices)); a dry
        run.

        Every missing input is sent when its producer has ended and the link is free,
        ignoring the op's other inputs on the same link (:meth:`assign` queues them).
        """
        nodes, devices = np.asarray(nodes, dtype=np.int64), np.asarray(devices, dtype=np.int64)
        lo = self.pred_ptr[nodes]
        deg = self.pred_ptr[nodes + 1] - lo
        row = np.repeat(np.arange(len(nodes)), deg)
        j = np.arange(deg.sum()) + np.repeat(lo - (np.cumsum(deg) - deg), deg)
        p, nbytes = self.pred_idx[j], self.pred_bytes[j][:, None]
        comes = (self.follower[p] & (self.dev[p] < 0))[:, None]  # arrives with the op
        a, dd = np.maximum(self.dev[p], 0)[:, None], devices[None, :]
        done = self.finish[p][:, None]
        got = self.arrival[p][:, devices]
        send = np.maximum(done, self.link_free[a, dd]) + self.transfer_time(nbytes, a, dd)
        local = comes | (a == dd)
        missing = ~local & np.isnan(got)
        t = np.where(local, done, np.where(missing, send, got))
        ready = np.zeros((len(nodes), len(devices)))
        np.maximum.at(ready, row, t)
        recv = np.zeros((len(nodes), len(devices)))
        np.add.at(recv, row, np.where(missing, nbytes, 0.0))
        own = self._persistent(nodes) + self.out[nodes] + self.temp[nodes]
        f = comes[:, 0]
        if f.any():  # followers coming along: their outputs, their group's persistent bytes once
            fg = self.coloc[p]
            np.add.at(own, row[f], self.out[p[f]] + np.where(fg[f] < 0, self.persistent[p[f]], 0.0))
            new = f & (fg >= 0) & (fg != self.coloc[nodes][row])
            pairs = np.unique(row[new] * self.num_groups + fg[new])
            np.add.at(own, pairs // self.num_groups, self.group_persistent[pairs % self.num_groups])
        return ready, own[:, None] + recv

    def roomiest(self, v: int) -> int:
        """The allowed device with the most room left: where an op goes when none fits."""
        allowed = self.allowed(v)
        _, need = self.estimate([v], allowed)
        return int(allowed[np.argmax(self.limit[allowed] - self.used[allowed] - need[0])])

    def assign(self, v: int, d: int) -> None:
        """Place ``v`` on ``d`` with its followers, start it as early as the device and its
        inputs allow (queueing each missing input on its link), and update the ledger.

        Bumps :attr:`version` of every device where other ops' :meth:`estimate` may have
        changed: ``d`` when an input was sent there or a colocation group placed, every
        device when a follower was placed.
        """
        _, need = self.estimate([v], [d])
        self.overflow += bool(self.used[d] + need[0, 0] > self.limit[d])
        groups_placed = int((self.group_dev >= 0).sum())
        sent = False
        for j in range(self.pred_ptr[v], self.pred_ptr[v + 1]):
            p = self.pred_idx[j]
            if self.follower[p] and self.dev[p] < 0:
                self._place(p, d)
                self.version += 1
        self.used[d] += self._persistent(np.array([v]))[0] + self.out[v]
        ready = 0.0
        for j in range(self.pred_ptr[v], self.pred_ptr[v + 1]):
            p = self.pred_idx[j]
            a = self.dev[p]
            if a != d and np.isnan(self.arrival[p, d]):
                s = max(self.finish[p], self.link_free[a, d])
                self.arrival[p, d] = self.link_free[a, d] = (
                    s + self.transfer_time(self.pred_bytes[j], a, d))
                self.copy_bytes[p, d] = self.pred_bytes[j]
                self.used[d] += self.pred_bytes[j]
                sent = True
                if self.finish[p] == 0.0:  # sent at the start of the step: held since then
                    self.peak[d] += self.pred_bytes[j]
            ready = max(ready, self.finish[p] if a == d else self.arrival[p, d])
        self.peak[d] = max(self.peak[d], self.used[d] + self.temp[v])
        self.start[v] = max(self.avail[d], ready)
        self.finish[v] = self.avail[d] = self.start[v] + self.time[v, d]
        self.dev[v] = d
        self.last[d] = v
        self._pin(v, d)
        for j in range(self.pred_ptr[v], self.pred_ptr[v + 1]):
            p = self.pred_idx[j]
            self.uses_left[p] -= 1
            if self.uses_left[p] == 0:
                self._release(p)
        if self.uses_left[v] == 0:
            self._release(v)
        if sent or int((self.group_dev >= 0).sum()) > groups_placed:
            self.version[d] += 1

    def _place(self, p: int, d: int) -> None:
        """Put follower ``p`` on ``d`` (its group's device if the group is placed) at time 0."""
        pin = self.pinned(np.array([p]))[0]
        d = int(pin) if pin >= 0 else d
        self.used[d] += self._persistent(np.array([p]))[0] + self.out[p]
        self.peak[d] = max(self.peak[d], self.used[d])
        self.dev[p] = d
        self._pin(p, d)
        if self.uses_left[p] == 0:
            self._release(p)

    def _pin(self, v: int, d: int) -> None:
        """``v`` is on ``d``: so is its colocation group, and the group's followers."""
        g = self.coloc[v]
        if g >= 0 and self.group_dev[g] < 0:
            self.group_dev[g] = d
            for f in self.group_followers.get(int(g), ()):
                if self.dev[f] < 0:
                    self._place(f, d)

    def place_followers(self) -> None:
        """Followers no consumer brought along go to the device with the most room."""
        for p in np.flatnonzero(self.follower & (self.dev < 0)):
            self._place(int(p), int(np.argmax(self.limit - self.used)))

    def _release(self, p: int) -> None:
        """All of ``p``'s consumers are scheduled: free its output and received copies."""
        self.used[self.dev[p]] -= self.out[p]
        self.used -= self.copy_bytes[p]
        self.copy_bytes[p] = 0.0

    def summary(self) -> dict:
        """What the schedule believed: its step time, and the ops it could not fit."""
        return {"estimated_step_time": float(self.finish.max(initial=0.0)), "overflow": self.overflow}

    def priority(self) -> np.ndarray:
        """Priorities that replay this schedule's order on each device (earlier start first)."""
        return order_to_priority(np.lexsort((np.arange(len(self.start)), self.start)))
