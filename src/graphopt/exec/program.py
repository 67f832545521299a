"""A traced PyTorch program compiled for a plan: which device runs each op, in what
order, and which tensors cross devices.

Every FX node of a :class:`~graphopt.frontends.torch.TracedProgram` becomes one
:class:`Instr`, run on the device the plan gives its IR node, ranked on that device by
the plan's priority (ties: FX order, which is the IR's topological order of the same
trace). Nodes that are not IR nodes (ops whose only outputs are empty tensors) run on
the device of their first input, or of their first consumer.

In-place ops need more than data edges. An op that writes into a tensor (an
optimizer update, ``bernoulli_``, a batch-norm counter) must run after every op that
reads the old value and before every op that reads the new one, through any alias
(views, ``getitem``). The compiler finds aliases from the ops' schemas and adds those
orderings: on the writer's device as dependencies, across devices as "the send of
this tensor completes before the write" or "the send is posted after the write". A
writer always runs where the tensor it writes lives, whatever the plan says (the
count of such moves is reported). All dependencies point forward in FX order, which
is what makes the executors deadlock-free (see :mod:`graphopt.exec.workers`).
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx

from graphopt.errors import PlanError
from graphopt.frontends.torch import TracedProgram
from graphopt.sim import Plan
from graphopt.sim.plan import check_made_for

__all__ = ["Instr", "Program", "Ref", "Transfer", "compile_program", "refs",
           "resolve_target", "value_spec"]


@dataclass(frozen=True)
class Ref:
    """The value of FX node number ``node`` (its position in the graph)."""

    node: int


@dataclass
class Instr:
    """One op of the program.

    ``deps`` are instructions on the same device that must finish first (data and
    in-place ordering); ``recvs`` the transfers it waits for; ``wait_sends`` the
    transfers that must have completed before it writes into their tensors.
    """

    node: int
    name: str
    target: str
    args: tuple
    kwargs: dict
    device: int
    priority: float
    rng: bool
    deps: list[int] = field(default_factory=list)
    recvs: list[int] = field(default_factory=list)
    wait_sends: list[int] = field(default_factory=list)


@dataclass
class Transfer:
    """The value of ``node`` sent from ``src`` to ``dst``; posted once ``node`` exists
    and every op of ``after`` (writers of its tensor, on ``src``) has run."""

    tag: int
    node: int
    src: int
    dst: int
    after: list[int] = field(default_factory=list)
    name: str = ""  # the FX node's, for traces


@dataclass
class Program:
    """Instructions and transfers of one traced program under one plan.

    Attributes
    ----------
    instrs : list of Instr
        In FX order; ``instrs[i].node`` increases with ``i``.
    transfers : list of Transfer
    feeds : dict
        Placeholder node -> (device, value): the state and inputs each device holds.
    state : dict
        Placeholder node -> qualified name, for the state tensors (updated in place).
    outputs : Any
        The program's outputs as a tree of :class:`Ref`.
    devices : int
    placement : list of int
        Device of every FX node.
    specs : dict
        Transferred node -> the shape of its value (:func:`value_spec`).
    fifo : bool
        The plan gives no priorities: each device runs its ops in the order they became
        ready, as the simulator does (with priorities, ties go to the earlier FX node).
    moved : int
        In-place ops run on another device than the plan said (where their tensor lives).
    """

    instrs: list[Instr]
    transfers: list[Transfer]
    feeds: dict[int, tuple[int, Any]]
    state: dict[int, str]
    outputs: Any
    devices: int
    placement: list[int]
    specs: dict[int, Any]
    fifo: bool
    moved: int

    def local(self, device: int) -> list[Instr]:
        """The instructions of one device, in FX order."""
        return [ins for ins in self.instrs if ins.device == device]


def resolve_target(target: str) -> Any:
    """The callable an :class:`Instr` names (``aten::mm.default``, ``operator.getitem``)."""
    if target.startswith("operator."):
        return getattr(operator, target.removeprefix("operator."))
    ns, _, rest = target.partition("::")
    name, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), name), overload or "default")


def _target_name(node: fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t.namespace}::{t._opname}.{t._overloadname}"
    if getattr(t, "__module__", None) == "_operator":
        return f"operator.{t.__name__}"
    raise PlanError(f"node {node.name!r}: cannot execute FX target {t!r}")


#: Ops that write into arguments their schema does not mark as written: ATen's
#: ``native_batch_norm`` updates the running statistics in training.
_UNMARKED_WRITES = {"aten::native_batch_norm": (5, (3, 4))}  # (index of `training`, written)


def _aliases_and_writes(node: fx.Node) -> tuple[fx.Node | None, list[fx.Node]]:
    """The input this node's output aliases (or None) and the inputs it writes into."""
    t = node.target
    if t is operator.getitem:
        return node.args[0], []  # an element of a tuple that may alias its producer's input
    schema = getattr(t, "_schema", None)
    if schema is None:
        return None, []
    bound = list(node.args) + [node.kwargs.get(a.name) for a in schema.arguments[len(node.args):]]
    alias = None
    training, written = _UNMARKED_WRITES.get(schema.name, (0, ()))
    writes = [bound[i] for i in written if bound[training] and isinstance(bound[i], fx.Node)]
    for a, v in zip(schema.arguments, bound):
        if a.alias_info is None or not isinstance(v, fx.Node):
            continue
        if a.alias_info.is_write:
            writes.append(v)
        if alias is None and any(r.alias_info is not None and
                                 r.alias_info.before_set & a.alias_info.before_set
                                 for r in schema.returns):
            alias = v
    return alias, writes


def _map_refs(x: Any, pos: dict[fx.Node, int]) -> Any:
    return fx.node.map_aggregate(x, lambda v: Ref(pos[v]) if isinstance(v, fx.Node) else v)


def refs(x: Any) -> list[int]:
    """The nodes a tree of :class:`Ref` refers to, in tree order."""
    out: list[int] = []
    fx.node.map_aggregate(x, lambda v: out.append(v.node) if isinstance(v, Ref) else v)
    return out


def _roots(alias: list[int], device: list[int]) -> list[int]:
    """The tensor each node's output is part of. A view of a tensor received from another
    device aliases that copy, not the original."""
    root = list(range(len(alias)))
    for i in range(len(alias)):
        if alias[i] != i and device[alias[i]] == device[i]:
            root[i] = root[alias[i]]
    return root


def _split_readers_to_writers(nodes: list[fx.Node], pos: dict[fx.Node, int], device: list[int],
                              alias: list[int], written: dict[int, list[int]]) -> int:
    """Move the readers that would need one tensor on a device both before and after it is
    written in place (one transfer cannot carry two versions) to the writer's device: the
    ones before the write, or the ones after where they are fewer. Autograd's in-place
    sigmoid and mul in nn.LSTM's backward make such readers under any placement that
    splits a cell. Returns how many moved; repeats until none need to, as a move can make
    another tensor's readers split."""
    moved = 0
    for _ in range(len(nodes)):
        root = _roots(alias, device)
        reads: dict[int, list[int]] = defaultdict(list)  # root -> its readers, FX order
        for i, n in enumerate(nodes):
            if n.op == "call_function":
                for r in sorted({root[pos[a]] for a in n.all_input_nodes}):
                    reads[r].append(i)
        change = False
        for w, args in written.items():
            for r in {root[a] for a in args}:
                for d in {device[i] for i in reads[r]} - {device[w]}:
                    before = [i for i in reads[r] if i < w and device[i] == d]
                    after = [i for i in reads[r] if i > w and device[i] == d]
                    if before and after:
                        for i in min(before, after, key=len):
                            device[i] = device[w]
                        moved += min(len(before), len(after))
                        change = True
        if not change:
            return moved
    return moved


def compile_program(traced: TracedProgram, plan: Plan | None, devices: int) -> Program:
    """Compile ``traced`` for ``plan`` on ``devices`` devices.

    Raises
    ------
    PlanError
        The plan was made for another trace (its ``meta["graph"]["fingerprint"]``, which
        ``graphopt optimize --out`` writes), does not fit the graph or the devices, or
        needs one tensor on a device
        both before and after it is written in place (two versions of one transfer).
    """
    graph = traced.graph
    plan = plan or Plan()
    check_made_for(plan, graph)
    plan.check(graph.num_nodes, devices)
    place = np.zeros(graph.num_nodes, np.int64) if plan.placement is None else plan.placement
    prio = np.zeros(graph.num_nodes) if plan.priority is None else plan.priority
    index = graph.index

    nodes = list(traced.module.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    ir = [index.get(traced.ir_names.get(n.name, ""), -1) for n in nodes]
    device = [int(place[k]) if k >= 0 else -1 for k in ir]
    # Nodes outside the IR: the device of their first input, else of their first consumer.
    for i, n in enumerate(nodes):
        if device[i] < 0 and n.op != "output":
            ins = [pos[a] for a in n.all_input_nodes if device[pos[a]] >= 0]
            device[i] = device[ins[0]] if ins else -1
    for i in reversed(range(len(nodes))):
        if device[i] < 0 and nodes[i].op != "output":
            users = [pos[u] for u in nodes[i].users if device[pos[u]] >= 0]
            device[i] = device[users[0]] if users else 0

    # Writers run where the tensor they write lives, with the views they write through.
    # State written in place (parameters, running statistics) moves to its writer, once.
    alias: list[int] = list(range(len(nodes)))  # the node each node's output aliases
    written: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        if n.op == "call_function":
            a, w = _aliases_and_writes(n)
            if a is not None:
                alias[i] = pos[a]
            if w:
                written[i] = [pos[x] for x in w]

    def chain(i: int) -> list[int]:
        out = [i]
        while alias[out[-1]] != out[-1]:
            out.append(alias[out[-1]])
        return out

    homed: set[int] = set()
    moved = 0
    for i, args in written.items():
        homes = set()
        for a in args:
            r = chain(a)[-1]
            if nodes[r].op == "placeholder" and r not in homed:
                homes.add(device[i])
            else:
                homes.add(device[r])
        if len(homes) > 1:
            raise PlanError(f"node {nodes[i].name!r} writes into tensors on devices {sorted(homes)}; "
                            "place them on one device")
        home = homes.pop()
        for a in args:
            for j in chain(a):
                moved += device[j] != home
                device[j] = home
                if nodes[j].op == "placeholder":
                    homed.add(j)
        moved += device[i] != home
        device[i] = home
    moved += _split_readers_to_writers(nodes, pos, device, alias, written)
    root = _roots(alias, device)
    writes = {i: sorted({root[a] for a in args}) for i, args in written.items()}

    instrs: list[Instr] = []
    at: dict[int, Instr] = {}
    feeds: dict[int, tuple[int, Any]] = {}
    state: dict[int, str] = {}
    feed_values = iter(zip(traced.feeds, traced.state))
    outputs: Any = None
    for i, n in enumerate(nodes):
        if n.op == "placeholder":
            value, qualname = next(feed_values)
            feeds[i] = (device[i], value)
            if qualname is not None:
                state[i] = qualname
        elif n.op == "call_function":
            t = n.target
            rng = isinstance(t, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in t.tags
            ins = Instr(i, n.name, _target_name(n), _map_refs(n.args, pos), _map_refs(n.kwargs, pos),
                        device[i], float(prio[ir[i]]) if ir[i] >= 0 else 0.0, rng)
            instrs.append(ins)
            at[i] = ins
        elif n.op == "get_attr":  # a constant the trace kept (transformers' masks): an input
            feeds[i] = (device[i], functools.reduce(getattr, n.target.split("."), traced.module))
        elif n.op == "output":
            outputs = _map_refs(n.args[0], pos)
        else:
            raise PlanError(f"node {n.name!r}: cannot execute FX {n.op!r} nodes")

    # Data: a local producer is a dependency, a remote one a transfer.
    transfers: dict[tuple[int, int], Transfer] = {}

    def transfer(node: int, dst: int) -> Transfer:
        key = (node, dst)
        if key not in transfers:
            transfers[key] = Transfer(len(transfers), node, device[node], dst, name=nodes[node].name)
        return transfers[key]

    reads: dict[int, list[int]] = defaultdict(list)  # root -> instrs reading it, FX order
    for ins in instrs:
        for p in sorted(set(refs((ins.args, ins.kwargs)))):
            reads[root[p]].append(ins.node)
            if device[p] == ins.device:
                if p in at:
                    ins.deps.append(p)
            else:
                ins.recvs.append(transfer(p, ins.device).tag)

    # In-place writes: order every reader of the written tensor around the writer.
    tlist = {t.tag: t for t in transfers.values()}
    for w, roots in writes.items():
        writer = at[w]
        for r in roots:
            for reader in reads[r]:
                if reader == w:
                    continue
                rd = at[reader]
                remote = [tlist[tag] for tag in rd.recvs if root[tlist[tag].node] == r]
                if reader < w:  # reads the old value
                    if rd.device == writer.device:
                        writer.deps.append(reader)
                    writer.wait_sends += [t.tag for t in remote]
                    writer.deps += [t.node for t in remote if t.node in at]  # the send exists
                elif rd.device == writer.device:
                    rd.deps.append(w)
                else:
                    for t in remote:
                        t.after.append(w)
    for ins in instrs:
        ins.deps = sorted(set(ins.deps))
        ins.wait_sends = sorted(set(ins.wait_sends))
        for tag in ins.wait_sends:
            if ins.node in tlist[tag].after:
                t = tlist[tag]
                raise PlanError(f"node {nodes[t.node].name!r} is read on device {t.dst} both before "
                                f"and after {ins.name!r} writes it; place its readers with the writer")
    for t in tlist.values():
        t.after = sorted(set(t.after))

    specs = {t.node: value_spec(nodes[t.node]) for t in tlist.values()}
    return Program(instrs, [tlist[k] for k in sorted(tlist)], feeds, state, outputs, devices,
                   device, specs, plan.priority is None, moved)


def value_spec(node: fx.Node) -> Any:
    """What a receiver must allocate for a node's value: a tree whose tensor leaves are
    ``("tensor", shape, dtype, stride)`` and whose other leaves are constants."""
    def spec(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(int(d) for d in v.shape), v.dtype, tuple(int(s) for s in v.stride()))
        if isinstance(v, (tuple, list)):
            return (type(v).__name__, [spec(x) for x in v])
        return ("const", v)
    return spec(node.meta.get("val"))
