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
from graphopt.errors import ClusterError, PlanError, UsageError
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


# -- device maps under a memory budget (accelerate's max_memory) --------------------------

Device = int | str

_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str | int) -> int:
    """Bytes in a size as accelerate writes it: an integer, or a number and a unit
    (``"2GiB"``, ``"500MB"``; KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024).

    >>> parse_size("2GiB"), parse_size("500MB"), parse_size(1024)
    (2147483648, 500000000, 1024)

    Raises
    ------
    ValueError
        Not such a size, or below 0.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip().upper()
        unit = next((u for u in sorted(_UNITS, key=len, reverse=True) if s.endswith(u)), "")
        if not s.isascii() or "_" in s:  # float() also reads '٢', '２' and '1_0'
            raise ValueError(f"{text!r} is not a size (ASCII digits, e.g. 2GiB, 500MB or bytes)")
        try:  # bytes as a whole number exactly; with a unit, as accelerate reads it
            value = int(s) if s.isdigit() else float(s[: len(s) - len(unit)]) * _UNITS.get(unit, 1)
        except ValueError:
            raise ValueError(f"{text!r} is not a size (e.g. 2GiB, 500MB or bytes)") from None
        if not unit and not s.isdigit():
            raise ValueError(f"{text!r} is not a size (e.g. 2GiB, 500MB or bytes)")
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r} is not a size of at least 0 bytes")
    if value > 2**62:
        raise ValueError(f"{text!r} is more than 2**62 bytes")
    return int(value)


def parse_max_memory(text: str) -> dict[Device, int]:
    """``"0=2GiB,1=2GiB"`` (or ``cpu=...``, ``disk=...``) as accelerate's ``max_memory``:
    ``{device: bytes}``, a device a GPU ordinal (ASCII digits, below 1024), ``"cpu"`` or
    ``"disk"``.

    >>> parse_max_memory("0=2GiB, cpu=500MB")
    {0: 2147483648, 'cpu': 500000000}

    Raises
    ------
    GraphoptError
        One line naming ``--max-memory``: an entry not ``DEVICE=SIZE``, an unknown or
        repeated device (a GPU index is ASCII digits, below 1024), or a bad size.
    """

    out: dict[Device, int] = {}
    for item in [p.strip() for p in str(text).split(",")]:
        key, eq, size = (s.strip() for s in item.partition("="))
        # ASCII digits only: str.isdigit() and int() also read '٠', '۱' and '²' (issue 49)
        dev: Device = int(key) if key.isascii() and key.isdigit() and len(key) <= 4 else key.lower()
        if not eq or dev not in ("cpu", "disk") and not (isinstance(dev, int) and dev < 1024):
            raise UsageError(f"--max-memory {text!r}: expected DEVICE=SIZE entries, DEVICE a GPU "
                             f"index (ASCII digits, 0..1023), cpu or disk, e.g. 0=2GiB,1=2GiB; "
                             f"got {item!r}")
        if dev in out:
            raise UsageError(f"--max-memory {text!r}: device {dev} given twice")
        try:
            out[dev] = parse_size(size)
        except ValueError as err:
            raise UsageError(f"--max-memory {text!r}: device {dev}: {err}") from None
    return out


def device_order(devices) -> list[Device]:
    """Devices in accelerate's order of preference: GPUs by ordinal, then ``"cpu"``,
    then ``"disk"``.

    >>> device_order(["disk", 1, "cpu", 0])
    [0, 1, 'cpu', 'disk']
    """
    return sorted(set(devices), key=lambda d: (0, d) if isinstance(d, int) else
                  (1 if d == "cpu" else 2, 0))


def execution_device(device_map: dict[str, Device]) -> dict[Device, Device]:
    """Where accelerate's ``dispatch_model`` runs the modules of each device of a map:
    a GPU its own; ``"cpu"`` and ``"disk"`` the main device (the first GPU the map uses,
    or the CPU), loading their weights there for each forward."""
    gpus = [d for d in device_map.values() if isinstance(d, int)]
    main: Device = min(gpus) if gpus else "cpu"
    return {d: d if isinstance(d, int) else main for d in device_map.values()}


def _map_entries(graph: Graph, device_map: dict[str, Device]) -> np.ndarray:
    """The map entry of each op (-1 for none), entries numbered in ``device_map``'s
    order: a state op's own qualified name, else the longest module path that holds it."""
    keys = list(device_map)
    at = {k: j for j, k in enumerate(keys)}
    out = np.full(graph.num_nodes, -1, dtype=np.int64)
    for i, (name, path, op) in enumerate(zip(graph.names, graph.module, graph.op)):
        if op in _STATE_OPS and str(name) in at:
            out[i] = at[str(name)]
            continue
        parts = str(path).split(".") if path else []
        for k in range(len(parts), -1, -1):
            j = at.get(".".join(parts[:k]))
            if j is not None:
                out[i] = j
                break
    return out


def map_memory(graph: Graph, device_map: dict[str, Device],
               devices: list[Device] | None = None) -> dict[Device, float]:
    """Simulated peak bytes on each device of an inference forward under ``device_map``
    as accelerate's ``dispatch_model`` runs it.

    A device holds the weights (parameters and buffers) of the modules mapped to it for
    the whole forward, and the simulator's peak of the activations its ops keep alive
    (docs/design.md "Memory": an output from its op's start until its last consumer ends, a
    tensor received from another device until its last consumer there ends), each
    tensor kept as long as eager PyTorch keeps it (:func:`_eager_lifetimes`). Modules
    mapped to ``"cpu"`` beside GPUs, or to ``"disk"``, run on the main device
    (:func:`execution_device`): their weights count where they are stored, and on the
    main device only while the op that reads them runs. Ops of no mapped module (the
    input) go where their first input, or first user, goes. The ops run in program
    order, without fusion (eager PyTorch).

    Parameters
    ----------
    graph : Graph
        The forward program (traced with module paths).
    device_map : dict
        ``{module path or parameter name: device}``.
    devices : list, optional
        Devices to report, default the map's; each gets 0 if nothing is on it.

    Notes
    -----
    One simulation: ``O(N log N + E)``.
    """
    from graphopt.exec.pipeline import stage_cluster
    from graphopt.sim import Problem, simulate

    devices = device_order(list(device_map.values()) + list(devices or []))
    slot = {d: k for k, d in enumerate(devices)}
    home = np.array([slot[d] for d in device_map.values()] + [-1], dtype=np.int64)
    run = execution_device(device_map)
    runs = np.array([slot[run[d]] for d in device_map.values()] + [-1], dtype=np.int64)
    entry = _map_entries(graph, device_map)
    where, stored = runs[entry], home[entry]
    ptr, preds, _ = graph.pred
    for v in range(graph.num_nodes):  # unmapped ops follow their first input
        if where[v] < 0 and ptr[v + 1] > ptr[v]:
            where[v] = where[preds[ptr[v]]]
    sptr, succs, _ = graph.succ
    first_user = np.array([succs[sptr[v]] if sptr[v + 1] > sptr[v] else v
                           for v in range(graph.num_nodes)], dtype=np.int64)
    for v in range(graph.num_nodes - 1, -1, -1):  # or, with none, their first user
        if where[v] < 0:
            where[v] = max(where[first_user[v]], 0)
    # weights stored off their execution device are loaded there just for their readers
    moved = (stored >= 0) & (stored != where) & np.isin(graph.op, _STATE_OPS)
    g = graph.replace(persistent_bytes=np.where(moved, 0.0, graph.persistent_bytes),
                      out_bytes=np.where(moved, np.maximum(graph.out_bytes,
                                                           graph.persistent_bytes),
                                         graph.out_bytes))
    source = graph.in_degree == 0
    order = np.where(source, first_user - 0.5, np.arange(graph.num_nodes, dtype=np.float64))
    g = _eager_lifetimes(g)
    cluster = stage_cluster(load_cluster("cpu"), len(devices)).with_memory(float(2**59))
    plan = Plan(placement=where, priority=-order, fusion=np.zeros(graph.num_nodes))
    peak = np.asarray(simulate(Problem(g, cluster), plan).peak_memory, dtype=np.float64)
    np.add.at(peak, stored[moved], graph.persistent_bytes[moved])
    # a weight read where it is not stored (tied, as GPT-2's head reads the embedding)
    # is copied there for the whole forward: accelerate moves it with the reader's module
    for weight, dev in {(w, int(where[v])) for w, v in _weight_reads(graph)}:
        if not moved[weight] and dev != where[weight]:
            peak[dev] += graph.persistent_bytes[weight]
    return {d: float(peak[slot[d]]) for d in devices}


def _eager_lifetimes(graph: Graph) -> Graph:
    """``graph`` with edges (of 0 bytes) that keep each tensor alive as eager PyTorch
    does, beyond its last reader in the dataflow: while a view of it is read (a view
    owns no bytes), and, for a tensor a module is called with, until that call of the
    module returns (its caller holds it). A call is a run of the module's ops in program
    order that no op outside it interrupts. ``O(N·M + E)`` for ``M`` module paths."""
    from graphopt.ir.ops import op_class
    from graphopt.sim.pipeline import stationary

    n = graph.num_nodes
    still = stationary(graph)
    view = np.array([op_class(str(o)) == "view" for o in graph.op], dtype=bool)
    view &= (graph.in_degree > 0) & ~still
    base = np.arange(n)
    ptr, preds, _ = graph.pred
    for v in np.flatnonzero(view):  # topological order: a view of a view finds the tensor
        base[v] = base[preds[ptr[v]]]
    parts = [str(m).split(".") if m else [] for m in graph.module]
    computes = graph.in_degree > 0
    ends: dict[str, np.ndarray] = {}

    def call_end(path: str, v: int) -> int:
        if path not in ends:
            inside = np.array([m == path or m.startswith(path + ".") for m in
                               map(str, graph.module)])
            between = np.cumsum(~inside & computes)  # outside ops that run so far
            idx = np.flatnonzero(inside)
            run = np.cumsum(np.r_[True, between[idx[1:]] != between[idx[:-1]]]) - 1
            last = np.zeros(run.max() + 1, dtype=np.int64)
            last[run] = idx  # increasing: each run keeps its last op
            ends[path] = np.full(n, -1, dtype=np.int64)
            ends[path][idx] = last[run]
        return int(ends[path][v])

    pairs = set()
    for u, v in zip(graph.src.tolist(), graph.dst.tolist()):
        if still[u]:
            continue
        if base[u] != u:
            pairs.add((int(base[u]), v))
        pu, pv = parts[u], parts[v]
        k = next((i for i, (a, b) in enumerate(zip(pu, pv)) if a != b), min(len(pu), len(pv)))
        if len(pv) > k:  # v is inside a module u is not: that call holds u
            end = call_end(".".join(pv[:k + 1]), v)
            if end > v:
                pairs.add((int(base[u]), end))
    pairs -= set(zip(graph.src.tolist(), graph.dst.tolist()))
    if not pairs:
        return graph
    add_src, add_dst = (np.array(x, dtype=graph.src.dtype) for x in zip(*sorted(pairs)))
    return graph.replace(src=np.concatenate([graph.src, add_src]),
                         dst=np.concatenate([graph.dst, add_dst]),
                         edge_bytes=np.concatenate([graph.edge_bytes, np.zeros(len(pairs))]))


def _weight_reads(graph: Graph) -> set[tuple[int, int]]:
    """``(weight op, reader op)`` for each op that reads a weight, through views of it
    (:func:`~graphopt.sim.pipeline.stationary`)."""
    from graphopt.sim.pipeline import stationary

    still = stationary(graph)
    root = np.arange(graph.num_nodes)
    ptr, preds, _ = graph.pred
    for v in np.flatnonzero(still & (graph.in_degree > 0)):  # topological: inputs first
        root[v] = root[preds[ptr[v]]]
    return {(int(root[u]), int(v)) for u, v in zip(graph.src, graph.dst)
            if still[u] and not still[v] and graph.persistent_bytes[root[u]] > 0}


@dataclass
class FittedMap:
    """A device map made to fit a memory budget.

    Attributes
    ----------
    device_map : dict
        ``{module path or parameter name: device}`` in program order.
    memory : dict
        Simulated peak bytes on each device of the budget (:func:`map_memory`).
    max_memory : dict
        The budget, ``{device: bytes}``.
    moved : list of tuple
        ``(entry, device it had, device it has)`` for each entry the fit moved; a module
        split to move part of it appears as its parts.
    """

    device_map: dict[str, Device]
    memory: dict[Device, float]
    max_memory: dict[Device, int]
    moved: list[tuple[str, Device, Device]] = field(default_factory=list)

    def save(self, path: str | os.PathLike) -> Path:
        """Write :attr:`device_map` as JSON."""
        return _write_json(path, self.device_map)


def fit_device_map(graph: Graph, device_map: dict[str, Device], max_memory: dict[Device, int],
                   no_split: tuple[str, ...] = ()) -> FittedMap:
    """Move modules of ``device_map`` until every device's simulated memory
    (:func:`map_memory`) is within ``max_memory``; a map that fits is kept as it is.

    A repair in program order, as accelerate fills devices: while a device is over its
    budget, the last of its entries moves to the next device of the budget
    (:func:`device_order`: GPUs, then ``"cpu"``, then ``"disk"``). An entry whose weights
    exceed the overflow, or the only entry of its device, is first split into its
    children (and the parameters it holds itself) when it has any and is not in
    ``no_split``, so that no more than needed moves; a module that reads a weight its
    device stores (tied) moves only when nothing else of its device is left. Last, a
    module that reads a weight stored on another device joins that device where the
    map still fits.

    Parameters
    ----------
    graph : Graph
        The forward program the map is for.
    device_map : dict
        The map to fit (:func:`device_map`'s); every device it uses needs a budget.
    max_memory : dict
        ``{device: bytes}`` (:func:`parse_max_memory`). ``"disk"`` is used only if
        given, as in accelerate's ``max_memory``.
    no_split : tuple of str
        Module paths never split (accelerate's ``no_split_module_classes``, as paths:
        a block whose parts add a residual must run on one device).

    Raises
    ------
    PlanError
        A device of the map has no budget, or no map fits: the message names the last
        device and its bytes over its budget.

    Notes
    -----
    One :func:`map_memory` per move or split: ``O(M·D)`` simulations for ``M`` modules
    and ``D`` devices at most.

    Examples
    --------
    >>> import torch
    >>> from graphopt.frontends.torch import trace_program
    >>> net = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    >>> g = trace_program(net, (torch.randn(2, 256),)).graph
    >>> fit = fit_device_map(g, {"": 0}, {0: 600_000, 1: 600_000})
    >>> fit.device_map
    {'0': 0, '1': 0, '2': 1, '3': 1}
    """
    order = device_order(max_memory)
    lacking = sorted({str(d) for d in device_map.values() if d not in max_memory})
    if lacking:
        raise PlanError(f"max_memory gives no budget for device {', '.join(lacking)} of the "
                        f"map (it has {', '.join(map(str, order))})")
    mods = [str(m) for m in graph.module]
    _, children = _module_tree(mods)
    state = {str(graph.names[i]): str(mods[i]) for i in np.flatnonzero(np.isin(graph.op,
                                                                                _STATE_OPS))}
    m = dict(device_map)
    first = dict(device_map)
    reads = sorted(_weight_reads(graph))
    while True:
        mem = map_memory(graph, m, order)
        over = [d for d in order if mem[d] > max_memory[d]]
        if not over:
            break
        d = over[0]
        excess = mem[d] - max_memory[d]
        if d == order[-1]:
            raise PlanError(f"no device map fits max_memory: device {d} needs "
                            f"{mem[d]:.0f} bytes, {excess:.0f} over its {max_memory[d]} "
                            "(modules are moved toward later devices only)")
        entry = _map_entries(graph, m)
        last = {}
        for i in np.flatnonzero(entry >= 0):
            last[int(entry[i])] = i
        keys = list(m)
        mine = sorted((last[j], keys[j]) for j in last if m[keys[j]] == d)
        if not mine:  # only ops of no module on it (an input): nothing of the map to move
            raise PlanError(f"no device map fits max_memory: device {d} needs {mem[d]:.0f} "
                            f"bytes, over its {max_memory[d]}, holding no module")
        # a module that reads a weight this device stores (tied: GPT-2's head reads the
        # embedding) moves last: moved, it holds a copy of the weight on the next device
        # and its output there too (GPT-2 at 0.75 of its memory fitted no two devices)
        tied = {keys[entry[v]] for w, v in reads if entry[v] >= 0 and entry[w] >= 0
                and entry[w] != entry[v] and m[keys[entry[w]]] == d}
        unit = max(mine, key=lambda r: (r[1] not in tied, r[0]))[1]
        weights = float(graph.persistent_bytes[(entry == keys.index(unit))
                                               & np.isin(graph.op, _STATE_OPS)].sum())
        kids = children.get(unit, [])  # and, beside them, the weights it holds itself
        parts = [*kids, *(n for n, path in state.items() if path == unit)] if kids else []
        if parts and unit not in no_split and (len(mine) == 1 or weights > excess):
            m = _split(m, unit, parts)
            for p in parts:
                first.setdefault(p, first.get(unit, d))
            continue
        m[unit] = order[order.index(d) + 1]
    m, mem = _join_tied(graph, m, mem, max_memory)
    entry = _map_entries(graph, m)
    pos = {k: int(np.flatnonzero(entry == j).min(initial=graph.num_nodes))
           for j, k in enumerate(m)}
    m = {k: m[k] for k in sorted(m, key=lambda k: pos[k])}
    moved = [(k, first[k], v) for k, v in m.items() if first.get(k, v) != v]
    return FittedMap(m, mem, dict(max_memory), moved)


def _join_tied(graph: Graph, m: dict[str, Device], mem: dict[Device, float],
               max_memory: dict[Device, int]) -> tuple[dict[str, Device], dict]:
    """``m`` with each entry that reads a weight another device stores (tied, as GPT-2's
    head reads the token embedding) moved to that device where the map still fits: the
    weight is then held once, and accelerate loads no copy of it for each forward."""
    entry = _map_entries(graph, m)
    keys = list(m)
    for w, v in sorted(_weight_reads(graph)):
        a, b = keys[entry[v]] if entry[v] >= 0 else None, keys[entry[w]] if entry[w] >= 0 else None
        if a is None or b is None or m[a] == m[b]:
            continue
        trial = {**m, a: m[b]}
        got = map_memory(graph, trial, list(max_memory))
        if all(got[d] <= max_memory[d] for d in max_memory):
            m, mem = trial, got
    return m, mem


def _split(m: dict[str, Device], unit: str, parts: list[str]) -> dict[str, Device]:
    """``m`` with ``unit`` replaced by ``parts`` on its device, in its place."""
    out: dict[str, Device] = {}
    for k, v in m.items():
        if k == unit:
            out.update(dict.fromkeys(parts, v))
        else:
            out[k] = v
    return out
