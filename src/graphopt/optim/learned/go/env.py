"""A problem as GO's policy sees it: nodes (colocation groups or ops), their features,
the edges between them, and the plans a choice per node makes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from graphopt.ir.coarsen import colocation_groups
from graphopt.ir.features import FEATURE_NAMES, MODULE_FEATURE_NAMES, module_features, node_features
from graphopt.ir.ops import OP_CLASSES, class_ids
from graphopt.sim import Plan, Problem

__all__ = ["GOEnv", "PRIOR_DEVICE_FEATURES", "PRIOR_FEATURES", "UNIT_FEATURES"]

#: Columns of a node's feature vector (a node is a colocation group or one op).
UNIT_FEATURES: tuple[str, ...] = (
    "compute_share", "cum_compute_start", "cum_compute_end", "out_transfer_share",
    "in_transfer_share", "persistent_of_memory", "log_ops", "topo_first", "topo_last",
    *(f"class_{c}" for c in OP_CLASSES), *(f"mean_{k}" for k in FEATURE_NAMES),
    *MODULE_FEATURE_NAMES,
)

#: Columns a prior-aware policy reads about a node's place in the start plan (the prior):
#: whether there is one, its device's compute load over the fair share, and the shares of
#: its outgoing and incoming bytes that cross to other devices.
PRIOR_FEATURES: tuple[str, ...] = ("has_prior", "home_load", "out_cut_share", "in_cut_share")
#: Columns about each (node, device) pair in the prior, device by device after
#: :data:`PRIOR_FEATURES`: the pair reads the same whatever the devices' numbers, so a
#: head on them does not care how devices are numbered.
PRIOR_DEVICE_FEATURES: tuple[str, ...] = ("is_home", "neighbour_bytes_share", "load",
                                          "load_minus_home", "memory", "load_after_move",
                                          "max_load_change")


def _share(x: np.ndarray) -> np.ndarray:
    """A non-negative ratio (1 = a device's fair share) squashed to about [0, 1.5]."""
    return np.log1p(100.0 * x) / np.log(101.0)


@dataclass
class GOEnv:
    """One graph on one cluster, ready for :class:`graphopt.optim.learned.go.policy.GOPolicy`.

    Parameters
    ----------
    problem : Problem
    task : frozenset of str
        What the policy decides; the rest stays the compiler default.
    units : "groups", "ops" or int array (N_ops,)
        The policy's nodes: colocation groups grown along single-consumer chains
        (:func:`graphopt.ir.coarsen.colocation_groups`; every plan keeps them whole), raw
        ops, or the given node of every op (numbered from 0 in a topological order).
    init : Plan, optional
        The decisions of the tasks left out (a fusion-only policy fuses on this placement).
    fusion_flips : float
        How many nodes the fusion prior (:meth:`with_prior`) expects a plan to move off
        XLA's default fusion.
    placement_flips : float
        How many nodes the placement prior expects a plan to move off ``init``'s
        placement (no prior without an ``init`` placement, or at 0).
    scheduling_flips : float
        How many nodes the scheduling prior expects a plan to give a priority other
        than the one all share (equal priorities run in the nodes' topological order);
        0: no prior.
    prior_inputs : bool
        Append the start plan's :data:`PRIOR_FEATURES` and, per device,
        :data:`PRIOR_DEVICE_FEATURES` to the policy's inputs (zeros without a start
        placement), for a prior-aware policy
        (:class:`graphopt.optim.learned.go.policy.PriorGOPolicy`).

    Attributes
    ----------
    unit : int64 array (N_ops,)
        Node of the policy each op belongs to.
    x, op_ids, op_node, edge_index : Tensor
        The policy's inputs (see :class:`graphopt.optim.learned.go.policy.GOPolicy`).
    fusion_matters : bool Tensor (N_units,)
        Nodes holding an op whose fusion priority can change the plan
        (``Problem.fusion_choice``).

    Notes
    -----
    Node features are measured in the cluster's terms, so they carry over between
    graphs of any size: compute time as a share of one device's fair share
    (``total / devices``), where the node sits in the cumulative compute of the
    topological order, the transfer time of the bytes it sends and receives, its
    persistent bytes against a device's memory, its op-class mix, mean op features, and
    where its ops sit in the model's layers (:func:`graphopt.ir.features.module_features`:
    our addition, the structure a human expert places by).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> env = GOEnv(Problem(mlp_training_graph(), load_cluster("p100:2")), frozenset({"placement"}))
    >>> env.x.shape[1] == len(UNIT_FEATURES), env.num_units <= env.problem.num_nodes
    (True, True)
    """

    problem: Problem
    task: frozenset[str]
    units: str | np.ndarray = "groups"
    init: Plan | None = None
    fusion_flips: float = 2.0
    placement_flips: float = 4.0
    scheduling_flips: float = 2.0
    prior_inputs: bool = False

    def __post_init__(self) -> None:
        g, p = self.problem.graph, self.problem
        if isinstance(self.units, str) and self.units not in ("groups", "ops"):
            raise ValueError(f"units must be 'groups', 'ops' or an array, not {self.units!r}")
        unit = (np.asarray(self.units) if not isinstance(self.units, str) else
                colocation_groups(g) if self.units == "groups" else np.arange(g.num_nodes))
        u = int(unit.max()) + 1
        self.unit, self.num_units = unit.astype(np.int64), u
        d = p.num_devices

        op_time = p.costs.time.mean(axis=1)
        fair = max(op_time.sum() / d, 1e-12)
        t = np.bincount(unit, op_time, u)
        cum = np.cumsum(t) / max(t.sum(), 1e-12)
        cross = unit[g.src] != unit[g.dst]
        bw = p.bandwidth[~np.eye(d, dtype=bool)].mean() if d > 1 else np.inf
        out_t = np.bincount(unit[g.src[cross]], g.edge_bytes[cross], u) / bw
        in_t = np.bincount(unit[g.dst[cross]], g.edge_bytes[cross], u) / bw
        persist = np.bincount(unit, g.persistent_bytes, u) / p.capacity.min()
        count = np.bincount(unit, minlength=u)
        pos = np.arange(g.num_nodes) / max(g.num_nodes - 1, 1)
        first = np.full(u, np.inf)
        np.minimum.at(first, unit, pos)
        last = np.zeros(u)
        np.maximum.at(last, unit, pos)
        classes = np.zeros((u, len(OP_CLASSES)))
        np.add.at(classes, (unit, class_ids(g.op)), 1.0)
        ids, feats = node_features(g)
        mean = np.zeros((u, feats.shape[1]))
        np.add.at(mean, unit, feats)
        modules = np.zeros((u, len(MODULE_FEATURE_NAMES)))
        np.add.at(modules, unit, module_features(g))
        cols = [_share(t / fair), cum - t / max(t.sum(), 1e-12), cum, _share(out_t / fair),
                _share(in_t / fair), np.minimum(persist, 4.0), np.log1p(count) / 10, first, last]
        x = np.concatenate([np.stack(cols, 1), classes / count[:, None],
                            mean / count[:, None] / 10, modules / count[:, None]], axis=1)
        assert x.shape[1] == len(UNIT_FEATURES), x.shape
        self.x = torch.as_tensor(x, dtype=torch.float32)
        self.op_ids = torch.as_tensor(ids)
        self.op_node = torch.as_tensor(self.unit)
        pairs = np.unique(np.stack([unit[g.src[cross]], unit[g.dst[cross]]], 1), axis=0)
        self.edge_index = torch.as_tensor(pairs.T.reshape(2, -1), dtype=torch.long)
        self.tasks = tuple(t for t in ("placement", "scheduling", "fusion") if t in self.task)
        self.fusion_matters = torch.as_tensor(
            np.bincount(unit, self.problem.fusion_choice, u) > 0)
        place = (None if self.init is None or self.init.placement is None
                 else np.asarray(self.init.placement))
        share = None  # (N_units, D): each node's compute on each device in init's placement
        if place is not None:
            share = np.zeros((u, d))
            np.add.at(share, (unit, place), op_time + 1e-12)
        self.home = None  # each node's device in init's placement: the most compute on it
        if "placement" in self.task and share is not None and d > 1 and self.placement_flips > 0:
            self.home = torch.as_tensor(share.argmax(1))
        if self.prior_inputs:
            self.prior_x = self._prior_features(place, share, fair, unit, cross)

    def _prior_features(self, place: np.ndarray | None, share: np.ndarray | None, fair: float,
                        unit: np.ndarray, cross: np.ndarray) -> Tensor:
        """(N_units, len(PRIOR_FEATURES) + D · len(PRIOR_DEVICE_FEATURES)): the start
        placement ``place`` as each node sees it (``share``: each node's compute per
        device in it; see :data:`PRIOR_FEATURES`); zeros without one."""
        p, g, u, d = self.problem, self.problem.graph, self.num_units, self.problem.num_devices
        node = np.zeros((u, len(PRIOR_FEATURES)))
        pair = np.zeros((u, d, len(PRIOR_DEVICE_FEATURES)))
        if place is not None:
            home = share.argmax(1)
            raw = share.sum(0) / fair
            load = np.minimum(raw, 4.0)
            memory = np.minimum(np.bincount(place, g.persistent_bytes, d) / p.capacity, 4.0)
            a, b, w = unit[g.src[cross]], unit[g.dst[cross]], g.edge_bytes[cross]
            out_all = np.bincount(a, w, u)
            in_all = np.bincount(b, w, u)
            away = home[a] != home[b]
            node[:, 0] = 1.0
            node[:, 1] = load[home]
            node[:, 2] = np.bincount(a[away], w[away], u) / np.maximum(out_all, 1e-30)
            node[:, 3] = np.bincount(b[away], w[away], u) / np.maximum(in_all, 1e-30)
            neighbour = np.zeros((u, d))
            np.add.at(neighbour, (a, home[b]), w)
            np.add.at(neighbour, (b, home[a]), w)
            pair[:, :, 0] = np.eye(d)[home]
            pair[:, :, 1] = neighbour / np.maximum(neighbour.sum(1, keepdims=True), 1e-30)
            pair[:, :, 2] = load[None, :]
            pair[:, :, 3] = load[None, :] - load[home][:, None]
            pair[:, :, 4] = memory[None, :]
            # the loads if all the node's ops moved to each device (as move_gains moves
            # them, from wherever they are): a move that unloads the busiest device
            # shortens the step unless it makes another the busiest
            without = raw[None, :] - share / fair
            after = np.repeat(without[:, None, :], d, 1)  # (u, to, device)
            after[:, np.arange(d), np.arange(d)] += share.sum(1, keepdims=True) / fair
            pair[:, :, 5] = np.minimum(after[:, np.arange(d), np.arange(d)], 4.0)
            pair[:, :, 6] = np.clip(after.max(2) - raw.max(), -4.0, 4.0)
        return torch.as_tensor(np.concatenate([node, pair.reshape(u, -1)], 1), dtype=torch.float32)

    def with_prior(self, logits: dict[str, Tensor]) -> dict[str, Tensor]:
        """The policy's ``logits`` plus the environment's prior, which centres the fusion
        head on XLA's default: every node at the highest fusion level is exactly the
        default pass (equal priorities are taken later op first, as the default walks
        them). A node whose fusion changes nothing always takes that level, so its
        choice adds neither noise to the gradient nor entropy; every other node gets a
        bias towards it such that, with the network's logits at zero, a plan moves
        ``fusion_flips`` of them elsewhere on average — near the default, where the
        searches' single toggles explore, rather than a quarter of the nodes unfused.

        Examples
        --------
        >>> from graphopt.hardware import load_cluster
        >>> from graphopt.ir.generate import mlp_training_graph
        >>> env = GOEnv(Problem(mlp_training_graph(), load_cluster("p100:2")),
        ...             frozenset({"fusion"}))
        >>> p = torch.softmax(env.with_prior({"fusion": torch.zeros(env.num_units, 4)})
        ...                   ["fusion"], 1)
        >>> m = env.fusion_matters
        >>> round(float((1 - p[m, -1]).sum()), 6), bool((p[~m, -1] == 1).all())
        (2.0, True)
        """
        if "placement" in logits and self.home is not None:
            logits = {**logits, "placement": self._centred(
                logits["placement"], self.home, self.placement_flips, self.problem.num_devices)}
        if "scheduling" in logits and self.scheduling_flips > 0:
            z = logits["scheduling"]  # centred on one level for all: the nodes' own order
            logits = {**logits, "scheduling": self._centred(
                z, torch.full((z.shape[0],), z.shape[1] - 1), self.scheduling_flips, z.shape[1])}
        if "fusion" not in logits:
            return logits
        z, m = logits["fusion"], self.fusion_matters
        levels = z.shape[1]
        fused = z.clone()
        fused[~m, :-1] = float("-inf")
        fused[m] = self._centred(z[m], torch.full((int(m.sum()),), levels - 1),
                                 self.fusion_flips, levels)
        return {**logits, "fusion": fused}

    @staticmethod
    def _centred(z: Tensor, home: Tensor, flips: float, k: int) -> Tensor:
        """``z`` (N_units, >= k) biased towards choice ``home`` of each node so that, with
        ``z`` at zero over the ``k`` open choices, a plan moves ``flips`` nodes elsewhere
        on average."""
        n = z.shape[0]
        if n <= flips or k < 2:  # the prior alone would move fewer than asked: no bias
            return z
        prior = torch.zeros_like(z)
        prior[torch.arange(n), home] = float(np.log((k - 1) * (n / flips - 1)))
        return z + prior

    def inputs(self) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
        """Positional arguments of :meth:`~graphopt.optim.learned.go.policy.GOPolicy.forward`
        (less ``tasks``); with :attr:`prior_inputs`, ``x`` carries the prior's columns
        after the node features."""
        if self.prior_inputs:
            return (torch.cat([self.x, self.prior_x], 1), self.op_ids, self.op_node,
                    self.edge_index, self.problem.num_devices)
        return self.x, self.op_ids, self.op_node, self.edge_index, self.problem.num_devices

    def rollout(self, ev, actions: dict[str, np.ndarray], logits: dict[str, Tensor]) -> tuple:
        """The plans of ``actions`` (:meth:`plans`) simulated through the evaluator ``ev``:
        ``(placements, priorities, fusion, BatchResult, reference step time)``, what PPO's
        rollout needs; ``logits`` (the policy's output) are unused here."""
        place, prio, fuse = self.plans(actions)
        return (place, prio, fuse, ev.evaluate(place, prio, fuse, problem=self.problem),
                self.problem.lower_bound)

    def plans(self, actions: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None,
                                                             np.ndarray | None]:
        """Per-op placements, priorities and fusion priorities (B, N_ops) from a choice per
        node (B, N_units) for each task; a task left out takes :attr:`init`'s decision,
        or else the compiler default (None; placement: everything on device 0)."""
        b = len(next(iter(actions.values())))
        n = self.problem.num_nodes

        def left_out(part: np.ndarray | None, dtype) -> np.ndarray | None:
            return None if part is None else np.repeat(np.asarray(part, dtype)[None], b, axis=0)

        init = self.init or Plan()
        place = (actions["placement"][:, self.unit] if "placement" in actions
                 else left_out(init.placement, np.int64))
        if place is None:
            place = np.zeros((b, n), np.int64)
        prio = (actions["scheduling"][:, self.unit].astype(np.float64) if "scheduling" in actions
                else left_out(init.priority, np.float64))
        fuse = (actions["fusion"][:, self.unit].astype(np.float64) if "fusion" in actions
                else left_out(init.fusion, np.float64))
        return place, prio, fuse
