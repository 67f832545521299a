"""Plans exported to the tools users run: accelerate's ``device_map`` and the split
points of ``torch.distributed.pipelining``.

A plan decides a device per op; these tools decide a device per module. Where the plan
assigns whole modules, the export says exactly the same thing; where it does not,
:func:`device_map` says which ops the map would move and how much simulated time they
hold, and :func:`pipeline_split` refuses, naming the first op that is not part of a
contiguous sequence of stages.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graphopt.cost import op_costs
from graphopt.errors import ClusterError, PlanError
from graphopt.sim.plan import check_made_for
from graphopt.frontends.torch import TracedProgram
from graphopt.hardware import Cluster, load_cluster
from graphopt.ir import Graph
from graphopt._files import atomic_write
from graphopt.sim import Plan

__all__ = ["DeviceMap", "Disagreement", "PipelineSplit", "device_map", "forward_ops",
           "pipeline_split"]

# Ops that hold a module's state: accelerate maps them by their qualified name.
_STATE_OPS = ("parameter", "buffer")


@dataclass(frozen=True)
class Disagreement:
    """An op the device map puts elsewhere than the plan does."""

    node: str
    module: str
    device: int  # where the plan puts it
    mapped: int  # where the map puts its module (a plan device index)
    seconds: float  # its simulated time where the plan puts it


@dataclass
class DeviceMap:
    """An accelerate ``device_map`` for a plan, and what it does not express.

    Attributes
    ----------
    device_map : dict
        ``{module path: device}`` in program order, as ``from_pretrained(device_map=...)``
        and ``accelerate.dispatch_model`` take it: a GPU ordinal, or ``"cpu"`` for a host
        CPU beside accelerators. ``""`` is the whole model.
    disagree : list of Disagreement
        Ops placed elsewhere than the device their module gets, slowest first.
    disagree_seconds, total_seconds : float
        Simulated time of those ops, and of every op, where the plan puts them.
    """

    device_map: dict[str, int | str]
    disagree: list[Disagreement] = field(default_factory=list)
    disagree_seconds: float = 0.0
    total_seconds: float = 0.0

    def save(self, path: str | os.PathLike) -> Path:
        """Write :attr:`device_map` as JSON (``json.load`` gives accelerate's argument)."""
        return _write_json(path, self.device_map)


@dataclass
class PipelineSplit:
    """The stages of a pipeline plan as ``torch.distributed.pipelining`` takes them.

    Attributes
    ----------
    split_spec : dict
        ``{module path: "beginning"}``: a new stage begins where each module begins; pass
        ``{k: SplitPoint[v.upper()] for k, v in split_spec.items()}`` to ``pipeline``.
    stages : list of int
        The plan device of each stage, in order.
    """

    split_spec: dict[str, str]
    stages: list[int]

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``{"split_spec": ..., "stages": ...}`` as JSON."""
        return _write_json(path, {"split_spec": self.split_spec, "stages": self.stages})


def device_map(graph: Graph, plan: Plan, cluster: Cluster | None = None) -> DeviceMap:
    """The coarsest modules whose ops all sit on one device of ``plan``, as a device map.

    A module whose ops span devices is split into its children; a module with no
    children (or the ops a module runs itself, outside its children) goes to the device
    holding most of its simulated time, and its ops elsewhere are reported. Parameters
    and buffers a split module holds itself are mapped one by one by qualified name, as
    accelerate allows, so they never disagree. Ops outside every submodule (the inputs,
    the loss) are not the map's to place: accelerate runs them where their inputs are.

    Parameters
    ----------
    graph : Graph
        With module paths (graphs traced from PyTorch have them).
    plan : Plan
        Its placement; none means every op on device 0.
    cluster : Cluster, optional
        Prices each op (its roofline time on the device the plan gives it) and names
        the devices: on a cluster of a host CPU and accelerators the CPU is ``"cpu"``
        and the accelerators are numbered from 0; otherwise a device is its plan index.
        Default: the ``cpu`` preset with as many devices as the plan uses.

    Raises
    ------
    PlanError
        The plan does not fit the graph or the cluster (or, without a cluster, uses more
        devices than the ``cpu`` preset has).

    Notes
    -----
    O(N * module depth).

    Examples
    --------
    >>> import torch
    >>> from graphopt.frontends.torch import trace_program
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> g = trace_program(net, (torch.randn(3, 4),)).graph
    >>> place = [1 if m == "2" else 0 for m in g.module]
    >>> device_map(g, Plan(placement=place)).device_map
    {'0': 0, '1': 0, '2': 1}
    """
    dev = _placement(graph, plan)
    if cluster is None:
        used = int(dev.max(initial=0)) + 1
        try:
            cluster = load_cluster(f"cpu:{used}")
        except ClusterError:
            raise PlanError(f"plan places ops on {used} devices, more than the default cluster "
                            "'cpu' has; give the cluster it was made for") from None
    plan.check(graph.num_nodes, cluster.num_devices)
    seconds = op_costs(graph, cluster).time[np.arange(graph.num_nodes), dev]
    ids = _accelerate_ids(cluster)
    mods = [str(m) for m in graph.module]
    subtree, children = _module_tree(mods)
    mapped = dev.copy()
    out: dict[str, int | str] = {}

    def majority(ops: np.ndarray) -> int:
        weight = np.bincount(dev[ops], weights=seconds[ops])
        return int(np.argmax(weight if weight.max() > 0 else np.bincount(dev[ops])))

    def visit(path: str) -> None:
        ops = np.asarray(subtree[path])
        kids = children.get(path, [])
        if len(np.unique(dev[ops])) == 1 or not kids:
            d = majority(ops)
            out[path] = ids[d]
            mapped[ops] = d
            return
        own = np.array([i for i in ops if mods[i] == path], dtype=np.int64)
        state = own[np.isin(graph.op[own], _STATE_OPS)]
        for i in state:
            out[str(graph.names[i])] = ids[dev[i]]
        rest = own[~np.isin(own, state)]
        if len(rest) and path:  # ops outside every submodule (inputs, the loss) follow their inputs
            mapped[rest] = majority(rest)
        for kid in kids:
            visit(kid)

    if graph.num_nodes:
        visit("")
    wrong = np.flatnonzero(mapped != dev)
    wrong = wrong[np.argsort(-seconds[wrong], kind="stable")]
    disagree = [Disagreement(str(graph.names[i]), mods[i], int(dev[i]), int(mapped[i]),
                             float(seconds[i])) for i in wrong]
    return DeviceMap(out, disagree, float(seconds[wrong].sum()), float(seconds.sum()))


def forward_ops(program: TracedProgram | Graph) -> np.ndarray:
    """Which ops compute the forward pass (bool, shape (N,)).

    For a training step: the loss and every op it depends on; the backward pass and
    the optimizer update are the rest. A forward program is all forward.

    Raises
    ------
    PlanError
        ``program`` is a graph of a training step: only its traced program names the
        loss.

    Examples
    --------
    >>> import torch
    >>> from graphopt.frontends.torch import trace_program
    >>> t = trace_program(torch.nn.Linear(4, 2), (torch.randn(3, 4),), training=True)
    >>> fwd = forward_ops(t)
    >>> sorted(t.graph.op[fwd].tolist())
    ['addmm', 'input', 'mean', 'parameter', 'parameter', 'permute_view']
    """
    if isinstance(program, Graph):
        if program.meta.get("training"):
            raise PlanError(f"graph {program.name!r} is a training step: tell its forward pass "
                            "from the backward with its traced program (zoo:NAME or "
                            "graphopt.frontends.torch.trace_program), not a graph file")
        return np.ones(program.num_nodes, dtype=bool)
    graph = program.graph
    if not program.training:
        return np.ones(graph.num_nodes, dtype=bool)
    out = next(iter(program.module.graph.find_nodes(op="output")))
    loss = graph.index[program.ir_names[out.args[0][0].name]]
    fwd = np.zeros(graph.num_nodes, dtype=bool)
    fwd[loss] = True
    ptr, preds, _ = graph.pred
    for v in range(loss, -1, -1):  # reverse topological order: a node's users come first
        if fwd[v]:
            fwd[preds[ptr[v]:ptr[v + 1]]] = True
    return fwd


def pipeline_split(program: TracedProgram | Graph, plan: Plan) -> PipelineSplit:
    """The split points of a plan whose devices are a sequence of pipeline stages.

    ``torch.distributed.pipelining`` cuts the forward program, in program order, where a
    module begins; each stage's backward pass and updates run where its forward does.
    So the plan must put the forward ops in program order on non-decreasing devices
    (no op reads from a later stage), begin each new stage where a module begins whose
    forward ops all sit on that stage, and run every other op (backward, updates) on a
    device where its module's forward runs.

    Parameters
    ----------
    program : TracedProgram or Graph
        A traced program, or the graph of a forward program (a training step's graph
        alone cannot tell forward from backward).
    plan : Plan
        Its placement; none means one stage.

    Raises
    ------
    PlanError
        The plan is not such a pipeline: the message names the first op that breaks
        it, its module and its device.

    Examples
    --------
    >>> import torch
    >>> from graphopt.frontends.torch import trace_program
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> t = trace_program(net, (torch.randn(3, 4),))  # forward; training steps work alike
    >>> place = [int(m == "2") for m in t.graph.module]
    >>> pipeline_split(t, Plan(placement=place))
    PipelineSplit(split_spec={'2': 'beginning'}, stages=[0, 1])
    """
    graph = program if isinstance(program, Graph) else program.graph
    dev = _placement(graph, plan)
    fwd = forward_ops(program)
    mods = np.asarray(graph.module, dtype=str)
    ptr, preds, _ = graph.pred
    stages: list[int] = []
    starts: list[int] = []
    for i in np.flatnonzero(fwd):
        d = int(dev[i])
        if stages and d < stages[-1]:
            later = [p for p in preds[ptr[i]:ptr[i + 1]] if fwd[p] and dev[p] > d]
            why = (f"reads {graph.names[later[0]]} from device {dev[later[0]]}, a later stage"
                   if later else f"follows op {graph.names[starts[-1]]} of device {stages[-1]} "
                   "in program order, so stages are not contiguous")
            raise PlanError(f"not a pipeline plan: op {graph.names[i]} (module "
                            f"{str(mods[i])!r}) on device {d} {why}")
        if not stages or d > stages[-1]:
            stages.append(d)
            starts.append(int(i))
    spec = {_stage_module(graph, dev, fwd, mods, i): "beginning" for i in starts[1:]}
    _check_backward(graph, dev, fwd, mods)
    return PipelineSplit(spec, stages or [0])


def _stage_module(graph: Graph, dev: np.ndarray, fwd: np.ndarray, mods: np.ndarray,
                  first: int) -> str:
    """The coarsest module containing op ``first`` whose forward ops all sit on its device."""
    path = str(mods[first])
    parts = path.split(".") if path else []
    for k in range(1, len(parts) + 1):
        prefix = ".".join(parts[:k])
        inside = fwd & ((mods == prefix) | np.char.startswith(mods, prefix + "."))
        if (dev[inside] == dev[first]).all():
            return prefix
    if path:
        other = np.flatnonzero(inside & (dev != dev[first]))[0]  # inside: the finest module
        where = f"inside module {path!r}, whose op {graph.names[other]} is on device {dev[other]}"
    else:
        where = "outside every submodule"
    raise PlanError(f"not a pipeline plan: the stage on device {dev[first]} begins at op "
                    f"{graph.names[first]} {where}; pipelining splits only where a module "
                    "begins")


def _check_backward(graph: Graph, dev: np.ndarray, fwd: np.ndarray, mods: np.ndarray) -> None:
    """Every op outside the forward pass runs on a device of its module's forward."""
    allowed: dict[str, set[int]] = {}
    for i in np.flatnonzero(~fwd):
        path = str(mods[i])
        if path not in allowed:
            prefix, devices = path, set()
            while not devices:  # the nearest enclosing module that has forward ops
                inside = fwd & ((mods == prefix) | np.char.startswith(mods, prefix + ".")) \
                    if prefix else fwd
                devices = {int(d) for d in dev[inside]}
                if not prefix:
                    break
                prefix = prefix.rpartition(".")[0]
            allowed[path] = devices
        if allowed[path] and int(dev[i]) not in allowed[path]:
            raise PlanError(f"not a pipeline plan: op {graph.names[i]} (module {path!r}, backward "
                            f"or update) is on device {dev[i]}, but its module's forward runs on "
                            f"device {', '.join(map(str, sorted(allowed[path])))}; pipelining "
                            "runs a stage's backward where its forward runs")


def _placement(graph: Graph, plan: Plan) -> np.ndarray:
    check_made_for(plan, graph)
    if plan.placement is None:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    plan.check(graph.num_nodes, int(plan.placement.max(initial=0)) + 1)
    return np.asarray(plan.placement, dtype=np.int64)


def _module_tree(mods: list[str]) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
    """Ops under each module path (itself and its descendants; ``""`` holds every op) and
    each path's child paths in order of their first op."""
    subtree: dict[str, list[int]] = {"": []}
    children: dict[str, list[str]] = {}
    for i, path in enumerate(mods):
        subtree[""].append(i)
        parts = path.split(".") if path else []
        for k in range(1, len(parts) + 1):
            prefix = ".".join(parts[:k])
            if prefix not in subtree:
                subtree[prefix] = []
                children.setdefault(".".join(parts[:k - 1]), []).append(prefix)
            subtree[prefix].append(i)
    return subtree, children


def _accelerate_ids(cluster: Cluster) -> list[int | str]:
    """accelerate's name of each device: ``"cpu"`` for a host CPU beside accelerators,
    accelerators numbered from 0; on a cluster of CPUs alone, the device index."""
    is_cpu = [d.name.startswith("cpu") for d in cluster.devices]
    if all(is_cpu):
        return list(range(cluster.num_devices))
    ordinal = iter(range(cluster.num_devices))
    return ["cpu" if c else next(ordinal) for c in is_cpu]


def _write_json(path: str | os.PathLike, data: dict) -> Path:
    text = json.dumps(data, indent=1)
    atomic_write(path, lambda f: f.write(text.encode()))
    return Path(path)
