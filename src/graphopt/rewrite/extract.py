"""From a saturated e-graph to the cheapest program it holds.

The e-graph is read from egglog's serialized form into e-classes of :class:`ENode`.
Every e-class gets a shape by running its e-nodes on meta tensors; every e-node gets a
cost from graphopt's cost models (:func:`graphopt.cost.op_costs`: the roofline of a
cluster's device, or a measured :class:`graphopt.cost.Profile`), priced once per
distinct ``(op, input shapes, output shape, fused activation)``; with ``measure=True``
the ops the rules know are timed as the rewritten program will run them (a fused
activation as its fused kernel), the others by the profile's proxy kernels. Weights,
inputs, views and splits cost nothing, as in Tensat.

Two extractors, as Tensat's: :func:`extract_greedy` (each e-class takes the e-node of
least tree cost; Knuth's generalization of Dijkstra's algorithm, so it never picks a
cycle) and :func:`extract_ilp` (Tensat's ILP, solved by OR-Tools CP-SAT: one Boolean per
e-node, the root's class must be computed, a chosen e-node needs each of its operand
classes, and order variables per e-class rule out cycles; e-nodes whose operand is their
own class are filtered first, the greedy choice is the solver's starting point and its
answer when the time runs out).
"""

from __future__ import annotations

import heapq
import json
import math
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from egglog import EGraph

from graphopt.cost import op_costs
from graphopt.frontends.torch import ATEN_TO_IR
from graphopt.hardware import Cluster
from graphopt.ir.formulas import op_cost
from graphopt.ir.graph import GraphBuilder
from graphopt.rewrite.codegen import ARGS, ENode, call_of, run_call, weight_value
from graphopt.rewrite.terms import RewriteError, Translation

__all__ = ["Costs", "EClasses", "dag_cost", "extract_greedy", "extract_ilp", "read_egraph"]

#: Constructors that cost nothing: views, splits, inputs and everything about weights.
_FREE = {"T", "T.const", "T.permute", "T.reshape", "T.slice", "T.item", "T.output", "L.nil",
         "L.cons"}
_IR_OP = {"T.linear": "linear", "T.conv": "conv", "T.linear_act": "linear", "T.conv_act": "conv",
          "T.bn": "batch_norm", "T.matmul": "matmul",
          "T.add": "add", "T.mul": "mul", "T.muls": "mul", "T.cat": "cat"}


@dataclass
class EClasses:
    """An e-graph as e-classes of e-nodes, with the shape of every e-class.

    Attributes
    ----------
    nodes : dict
        E-class → its e-nodes (the ones whose shapes could be computed).
    root : str
        The e-class of the program's outputs (``T.output``).
    values : dict
        E-class → a meta tensor of its shape and dtype (a list for ``L`` classes).
    position : dict
        E-class → the earliest position in the input program of a node it holds
        (``terms.fx_order``).
    """

    nodes: dict[str, list[ENode]]
    root: str
    values: dict[str, Any] = field(default_factory=dict)
    position: dict[str, int] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        """E-nodes in all."""
        return sum(len(v) for v in self.nodes.values())


def _literal(text: str, kind: str) -> Any:
    if kind == "s":
        return json.loads(text)
    return int(text) if kind == "i" else float(text)


def read_egraph(egraph: EGraph, tr: Translation) -> EClasses:
    """The e-classes and e-nodes of ``egraph``, each e-class with its shape.

    An e-node whose shape cannot be computed (a rule combined operands that do not fit,
    which egglog cannot know) is dropped: it names no program.

    Raises
    ------
    RewriteError
        The root or an input program's op has no shape on meta tensors.
    """
    raw = json.loads(egraph._serialize().to_json())["nodes"]
    by_class: dict[str, list[ENode]] = defaultdict(list)
    literal = {e["eclass"]: e["op"] for k, e in raw.items() if k.startswith("primitive-")}
    position: dict[str, int] = {}
    root = None
    for entry in raw.values():
        op = entry["op"]
        if op == "fx_order":
            c, at = raw[entry["children"][0]]["eclass"], int(literal[entry["eclass"]])
            position[c] = min(at, position.get(c, at))
            continue
        kinds = ARGS.get(op)
        if kinds is None or len(kinds) != len(entry["children"]):
            continue  # primitives and functions (shape_of, perm_compose)
        args = tuple(raw[c]["eclass"] if k in "TWL" else _literal(raw[c]["op"], k)
                     for c, k in zip(entry["children"], kinds))
        node = ENode(op, args, entry["eclass"])
        by_class[entry["eclass"]].append(node)
        if op == "T.output":
            root = entry["eclass"]
    if root is None:
        raise RewriteError("the e-graph has no T.output root")
    ec = EClasses(dict(by_class), root, position=position)
    _infer(ec, tr)
    return ec


def _dependencies(ec: EClasses) -> tuple[dict[str, list[ENode]], dict[ENode, int], list[ENode]]:
    """For a bottom-up pass: the e-nodes waiting on each e-class, how many operand classes
    each e-node still waits for, and the e-nodes that wait for none."""
    waiting: dict[str, list[ENode]] = defaultdict(list)
    missing: dict[ENode, int] = {}
    leaves: list[ENode] = []
    for nodes in ec.nodes.values():
        for n in nodes:
            kids = set(n.children)
            missing[n] = len(kids)
            for k in kids:
                waiting[k].append(n)
            if not kids:
                leaves.append(n)
    return waiting, missing, leaves


def _infer(ec: EClasses, tr: Translation) -> None:
    """Shapes of e-classes bottom-up: an e-node runs on meta tensors once all its operand
    classes have a value; its class takes the first value found. Calls are cached by
    their arguments' shapes, so equal e-nodes of different classes run once."""
    waiting, missing, ready = _dependencies(ec)
    values = ec.values
    ok: dict[str, list[ENode]] = defaultdict(list)
    failed: list[str] = []
    while ready:
        n = ready.pop()
        try:
            out = _evaluate(n, values, tr)
        except (RuntimeError, ValueError, TypeError, IndexError) as err:
            if n.op in ("T.op", "T") and all(
                    o.op in ("T.op", "T") for o in ec.nodes[n.eclass]):
                raise RewriteError(f"op {n.args[0]!r} cannot run on meta tensors: "
                                   f"{str(err).splitlines()[0]}") from err
            failed.append(f"{n.op}{n.args}: {str(err).splitlines()[0] if str(err) else err!r}")
            continue
        ok[n.eclass].append(n)
        if n.eclass in values:
            continue
        values[n.eclass] = out
        for parent in waiting.get(n.eclass, ()):
            missing[parent] -= 1
            if missing[parent] == 0:
                ready.append(parent)
    if ec.root not in values:
        raise RewriteError("the rewritten program's outputs have no shape"
                           + (f"; e.g. {failed[0]}" if failed else ""))
    ec.nodes = dict(ok)


def _signature(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return tuple(v.shape), v.dtype
    if isinstance(v, (list, tuple)):
        return tuple(_signature(x) for x in v)
    return v


def _evaluate(n: ENode, values: dict, tr: Translation) -> Any:
    """The meta value of ``n`` (cached by its literals and its operands' shapes: running
    an op on meta tensors takes about a millisecond)."""
    if n.op in ("T", "W"):
        return _run(n, values, tr)
    key = (n.op, tuple(_signature(values[a]) if k in "TWL" else a
                       for a, k in zip(n.args, ARGS[n.op])))
    if key not in tr.shape_cache:
        tr.shape_cache[key] = _run(n, values, tr)
    return tr.shape_cache[key]


def _run(n: ENode, values: dict, tr: Translation) -> Any:
    if n.op.startswith("W"):
        return weight_value(n.op, n.args, values.__getitem__, tr.constants, meta=True)
    if n.op == "T":
        i = tr.inputs.index(n.args[0])
        return tr.input_values[i]
    if n.op == "L.nil":
        return []
    if n.op == "L.cons":
        return [values[n.args[0]], *values[n.args[1]]]
    if n.op == "T.output":
        return values[n.args[0]]
    target, args = call_of(n.op, n.args, values.__getitem__, tr)
    if n.op == "T.op" and "device" in args[1]:
        # a tensor the program creates (nn.LSTM's zero state) goes where its operands are
        args = (args[0], {**args[1], "device": torch.device("meta")})
    out = run_call(target, args, n.op)
    if n.op == "T.op" and not isinstance(out, torch.Tensor):
        return out
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{n.op} gave no tensor")
    return out


#: Measured seconds by signature, per (cluster, repeats), shared by every measuring
#: :class:`Costs` of the process: an op is timed once, and two rewriters compared in one
#: process (saturation and the sequential rewriter) see the same prices.
_MEASURED: dict[tuple, dict[tuple, float]] = {}


class Costs:
    """Seconds of every e-node, from a cluster's first device and optionally a profile.

    Parameters
    ----------
    cluster : Cluster
        Whose first device prices the ops (roofline, docs/design.md §2).
    profile : Profile, optional
        Measured times that replace the roofline where they cover an op (its
        ``device_kind`` must be the cluster's).
    measure : bool
        Measure on this machine instead: every op the rules know is run as the rewritten
        program runs it (:func:`graphopt.rewrite.codegen.call_of`, a fused activation as
        its fused kernel) on seeded random tensors of its shapes, the median of
        ``repeats`` runs kept; the other ops (``T.op``) by graphopt's measured profile
        (:func:`graphopt.cost.profile_graph`).
    repeats : int
        Timed runs per signature with ``measure``; measured prices are kept for the
        process (shared by every ``Costs`` of the same cluster and repeats).

    Notes
    -----
    In the roofline a fused activation adds its FLOPs to the linear's or convolution's
    but no bytes: the kernel applies it to the output as it writes it, which saves the
    activation's pass over memory, so the fused op is priced below the pair.
    """

    def __init__(self, cluster: Cluster, profile=None, measure: bool = False, repeats: int = 5):
        self.cluster = cluster
        self.profile = profile
        self.measure = measure
        self.repeats = repeats
        self._cache: dict[tuple, float] = (_MEASURED.setdefault((cluster.name, repeats), {})
                                           if measure else {})

    def of(self, ec: EClasses) -> dict[ENode, float]:
        """The cost of every e-node of ``ec``; new signatures are priced in one batch."""
        sig_of: dict[ENode, tuple | None] = {}
        example: dict[tuple, ENode] = {}  # signature → an e-node of it, to measure
        for nodes in ec.nodes.values():
            for n in nodes:
                sig_of[n] = s = self._signature(n, ec.values)
                if s is not None:
                    example.setdefault(s, n)
        new = sorted({s for s in sig_of.values() if s is not None and s not in self._cache},
                     key=repr)
        if self.measure:
            for s in new:
                if example[s].op != "T.op":
                    self._cache[s] = _measure(example[s], ec.values, self.repeats)
            new = [s for s in new if s not in self._cache]
        if new:
            self._price(new)
        return {n: 0.0 if s is None else self._cache[s] for n, s in sig_of.items()}

    def _signature(self, n: ENode, values: dict) -> tuple | None:
        if n.op in _FREE or n.op.startswith("W"):
            return None
        act = n.args[0] if n.op in ("T.linear_act", "T.conv_act") else ""
        if n.op == "T.un":
            ir = n.args[0]
        elif n.op == "T.op":
            ir = ir_op_of_key(n.args[0])
        else:
            ir = _IR_OP[n.op]
        out = values[n.eclass]
        outs = out if isinstance(out, (list, tuple)) else [out]
        outs = [o for o in outs if isinstance(o, torch.Tensor)]
        ins = []
        for k in n.children:
            v = values[k]
            ins.extend(x for x in (v if isinstance(v, list) else [v]) if isinstance(x, torch.Tensor))
        dtype = str(outs[0].dtype).removeprefix("torch.") if outs else "float32"
        return (ir, dtype, tuple(tuple(t.shape) for t in ins), tuple(tuple(t.shape) for t in outs),
                act)

    def _price(self, sigs: list[tuple]) -> None:
        b = GraphBuilder("rewrite-costs")
        for j, (ir, dtype, ins, outs, act) in enumerate(sigs):
            srcs = [b.add_node(f"s{j}i{k}", "input", shape=s, dtype=dtype,
                               out_bytes=4 * math.prod(s)) for k, s in enumerate(ins)]
            flops, rd, wr = op_cost(ir, ins, outs or [()], dtype, warn=False)
            if act:
                flops += op_cost(act, outs, outs, dtype, warn=False)[0]
            b.add_node(f"s{j}", ir, shape=outs[0] if outs else (), dtype=dtype, flops=flops,
                       bytes_read=rd, bytes_written=wr, inputs=srcs)
        graph = b.build()
        profile = self.profile
        if self.measure:
            from graphopt.cost import profile_graph
            profile = profile_graph(graph, "cpu", repeats=self.repeats, warmup=1,
                                    progress=False).for_kind(self.cluster.devices[0].kind)
        t = op_costs(graph, self.cluster, profile).time[:, 0]
        order = {name: i for i, name in enumerate(graph.names.tolist())}
        for j, s in enumerate(sigs):
            self._cache[s] = float(t[order[f"s{j}"]])


def _measure(n: ENode, values: dict, repeats: int, warmup: int = 1) -> float:
    """Median seconds of the call of ``n`` (not a ``T.op``) on seeded random tensors of
    its operands' shapes."""
    gen = torch.Generator().manual_seed(0)
    real: dict[str, torch.Tensor] = {}

    def value(c: str) -> torch.Tensor:
        if c not in real:
            v = values[c]
            real[c] = (torch.randn(v.shape, generator=gen, dtype=v.dtype)
                       if v.is_floating_point() else torch.zeros(v.shape, dtype=v.dtype))
        return real[c]

    target, args = call_of(n.op, n.args, value, None)
    times = []
    with torch.no_grad():
        for i in range(warmup + repeats):
            start = time.perf_counter()
            run_call(target, args, n.op)
            if i >= warmup:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def ir_op_of_key(key: str) -> str:
    """The IR op name of a ``T.op`` key (its ATen op, named as the torch frontend does)."""
    name = key.split("(", 1)[0]
    base, _, overload = name.removeprefix("aten.").partition(".")
    return ATEN_TO_IR.get(f"{base}.{overload}") or ATEN_TO_IR.get(base) or base


def extract_greedy(ec: EClasses, cost: dict[ENode, float]) -> dict[str, ENode]:
    """Each e-class's e-node of least tree cost (own cost plus its operands' trees).

    Knuth's generalization of Dijkstra: e-classes are settled in order of cost, an
    e-node becomes a candidate once all its operand classes are settled, so the choice
    is acyclic. O(E log E) for E e-nodes.
    """
    waiting, missing, leaves = _dependencies(ec)
    heap = [(cost[n], tick, n.eclass, n) for tick, n in enumerate(leaves)]
    heapq.heapify(heap)
    tick = len(heap)
    best: dict[str, float] = {}
    choice: dict[str, ENode] = {}
    while heap:
        c, _, cls, n = heapq.heappop(heap)
        if cls in choice:
            continue
        choice[cls], best[cls] = n, c
        for parent in waiting.get(cls, ()):
            missing[parent] -= 1
            if missing[parent] == 0:
                total = cost[parent] + sum(best[k] for k in set(parent.children))
                heapq.heappush(heap, (total, tick, parent.eclass, parent))
                tick += 1
    if ec.root not in choice:
        raise RewriteError("no program can be extracted from the e-graph")
    return choice


def _reachable(choice: dict[str, ENode], root: str) -> set[str]:
    """The e-classes the program ``choice`` names needs, from ``root``."""
    seen, stack = set(), [root]
    while stack:
        c = stack.pop()
        if c not in seen:
            seen.add(c)
            stack.extend(choice[c].children)
    return seen


def dag_cost(choice: dict[str, ENode], root: str, cost: dict[ENode, float]) -> float:
    """Seconds of the program ``choice`` names: each e-class reached from ``root`` once."""
    return sum(cost[choice[c]] for c in _reachable(choice, root))


def _cyclic_components(ec: EClasses, classes: list[str]) -> dict[str, int]:
    """E-class → its strongly connected component, for the e-classes that lie on a cycle
    of the class graph (an e-class points to its e-nodes' operand classes). Only these
    need order variables: elsewhere no choice can close a cycle."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    index = {c: i for i, c in enumerate(classes)}
    src, dst = [], []
    for c in classes:
        for n in ec.nodes[c]:
            for k in set(n.children):
                if k in index and k != c:
                    src.append(index[c])
                    dst.append(index[k])
    graph = coo_matrix(([1] * len(src), (src, dst)), shape=(len(classes), len(classes)))
    _, label = connected_components(graph, directed=True, connection="strong")
    sizes = np.bincount(label)
    return {c: int(label[i]) for c, i in index.items() if sizes[label[i]] > 1}


def extract_ilp(ec: EClasses, cost: dict[ENode, float], time_limit: float = 10.0,
                seed: int = 0, hint: dict[str, ENode] | None = None
                ) -> tuple[dict[str, ENode], dict]:
    """Tensat's ILP extraction, solved with OR-Tools CP-SAT.

    Minimizes the summed cost of the chosen e-nodes (a shared operand counts once).
    Variables: ``x[n]`` per e-node, ``a[c]`` per e-class (computed or not), and an
    integer order ``o[c]``; constraints: ``a[root] = 1``, ``a[c] = sum x[n]`` over c's
    e-nodes, ``x[n] <= a[k]`` for each operand class k of n, and ``x[n] => o[c] > o[k]``
    (no cycles; only for e-classes on a cycle of the class graph, found as strongly
    connected components). Weight classes are left out: they cost nothing and never form
    cycles.

    Parameters
    ----------
    time_limit : float
        Seconds for this call, building the model included (Tensat gives its solver
        10). When they run out, the best solution found is used (the hint at worst).
    hint : dict, optional
        A choice to start from (the greedy one).

    Returns
    -------
    choice : dict
    stats : dict
        ``status`` (OPTIMAL or FEASIBLE), ``seconds``, ``variables``, ``filtered`` (e-nodes
        dropped by cycle filtering).
    """
    from ortools.sat.python import cp_model

    began = time.perf_counter()
    scale = 1e8  # costs in units of 10 ns: CP-SAT's objective is integral
    m = cp_model.CpModel()
    tensor_classes = [c for c, ns in ec.nodes.items() if not ns[0].op.startswith("W")]
    active = {c: m.new_bool_var(f"a{i}") for i, c in enumerate(tensor_classes)}
    cyclic = _cyclic_components(ec, tensor_classes)
    order = {c: m.new_int_var(0, len(cyclic), f"o{i}") for i, c in enumerate(tensor_classes)
             if c in cyclic}
    x: dict[ENode, Any] = {}
    filtered = 0
    for c in tensor_classes:
        members = []
        for n in ec.nodes[c]:
            kids = [k for k in set(n.children) if k in active]
            if c in kids:
                filtered += 1  # Tensat's cycle filter: an e-node that needs its own class
                continue
            v = m.new_bool_var(f"x{len(x)}")
            x[n] = v
            members.append(v)
            for k in kids:
                m.add_implication(v, active[k])
                if c in cyclic and cyclic.get(k) == cyclic[c]:
                    m.add(order[c] > order[k]).only_enforce_if(v)
        m.add(sum(members) == active[c])
    m.add(active[ec.root] == 1)
    m.minimize(sum(int(round(cost[n] * scale)) * v for n, v in x.items()))
    if hint:
        used = _reachable(hint, ec.root)  # the hint's program: other classes stay off
        for n, v in x.items():
            m.add_hint(v, n.eclass in used and hint[n.eclass] == n)
        for c, v in active.items():
            m.add_hint(v, c in used)
    solver = cp_model.CpSolver()
    # freeing the model when this returns takes about as long as building it did (0.22 s
    # and 0.27 s on WaveNet-2x18's 11,572 variables): both are left out of the solver's time
    built = time.perf_counter() - began
    solver.parameters.max_time_in_seconds = max(float(time_limit) - 2 * built, 0.0)
    solver.parameters.random_seed = int(seed)
    solver.parameters.num_workers = 1  # deterministic; the machine is small
    # the full LP relaxation: with many programs of equal cost (an activation fused, or
    # moved out of a concatenation), the default level took seconds to prove what the
    # LP bound proves at once
    solver.parameters.linearization_level = 2
    start = time.perf_counter()
    status = solver.solve(m)
    stats = {"status": solver.status_name(status), "seconds": time.perf_counter() - start,
             "variables": len(x) + len(active) + len(order), "filtered": filtered,
             "cyclic_classes": len(cyclic)}
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if hint is None:
            raise RewriteError(f"the ILP found no program ({stats['status']})")
        return hint, stats
    values = solver.response_proto.solution  # one read: boolean_value() per variable took 0.2 s on 8k
    choice = {n.eclass: n for n, v in x.items() if values[v.index]}
    for c, ns in ec.nodes.items():
        if ns[0].op.startswith("W"):
            choice[c] = (hint or {}).get(c, ns[0])
    return choice, stats

