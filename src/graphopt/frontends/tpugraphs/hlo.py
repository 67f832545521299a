"""XLA HLO modules to :class:`~graphopt.ir.Graph`: :func:`hlo_module_to_graph`.

Two views of a module (``view`` argument)
-----------------------------------------
``"program"`` (default): the program as it runs. Nodes are the instructions of the
entry computation, named as in HLO, with their XLA opcode as op type.

- ``while``, ``conditional`` and ``call`` bodies are *inlined*: their instructions
  become nodes named ``<call site>/<instruction>``; a body's ``parameter`` stands for
  the caller's operand (no node), and the caller node (zero cost, no new buffer)
  consumes the roots. Loop bodies count once: trip counts are not in the proto.
- ``fusion`` computations are *summarized*: the fusion is one node (one kernel)
  whose FLOPs are the sum over its fused instructions and whose bytes are only its
  operands and outputs, like the simulator's fused kernels.
- scalar computations passed to ``reduce``, ``reduce-window``, ``sort``, ``scatter``,
  ``select-and-scatter``, ``map``, ``all-reduce`` ... are not nodes: the caller's
  cost formula already counts them.

``"tpugraphs"``: the node set of the TpuGraphs encoder: every instruction of every
computation, in proto order, so node ``i`` is TpuGraphs node ``i`` and
``config_index_to_node`` indexes the graph directly. Edges go from operand to user
and from each called computation's root to its caller. Costs are per instruction as
if unfused, and callers of computations carry no FLOPs of their own; use this view
for learned models that need the TpuGraphs numbering, not for simulation.

Costs from shapes
-----------------
FLOPs and bytes come from :func:`graphopt.ir.formulas.op_cost` on the operand and
result shapes (tuples flattened), with three XLA-specific formulas: ``dot`` uses the
contracting dimensions of ``dot_dimension_numbers`` (field 30 of XLA's public
``HloInstructionProto``; when absent or inconsistent with the shapes, the contracted
size is estimated from the operand and result sizes), ``convolution`` uses
``kernel_output_feature_dimension`` of ``convolution_dimension_numbers`` (field 16;
fallback: the kernel's last dimension, TensorFlow's HWIO), and ``reduce-window``
multiplies the window size (field 15). Entry parameters and constants hold
persistent bytes (they live for the whole program); views (``bitcast``,
``get-tuple-element``, ``tuple``, ``reshape`` ...) own no buffer. A dimension of size 0
is stored as 1 in :attr:`Graph.shape` (which allows only positive sizes); its bytes
and FLOPs stay 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from graphopt.errors import GraphError, GraphFormatError
from graphopt.frontends.tpugraphs._wire import parse
from graphopt.frontends.tpugraphs._xla import Arr, array_leaves, shape_dtype, xla_cost
from graphopt.ir.graph import Graph, GraphBuilder
from graphopt.ir.ops import op_class

__all__ = ["MAX_PROGRAM_OPS", "hlo_module_to_graph"]

#: The most nodes the program view makes: it copies a called computation at each call
#: site, so a file of a few computations calling the next twice asks for 2^depth.
MAX_PROGRAM_OPS = 1_000_000

# Opcodes whose called computations run as part of the program (inlined in the
# program view) and the kernel whose computation is summarized into one node.
_CONTROL_FLOW = frozenset({"while", "conditional", "call"})
_FUSION = "fusion"


class _Comp:
    """A computation with its instructions indexed by id."""

    def __init__(self, proto, where: str):
        self.proto, self.name, self.id = proto, str(proto.name), int(proto.id)
        self.where = f"{where}, computation {self.name!r}"
        self.instrs = list(proto.instructions)
        self.by_id: dict[int, Any] = {}
        if not self.instrs:
            raise GraphFormatError(f"{self.where}: has no instructions")
        for ins in self.instrs:
            iid = int(ins.id)
            if iid in self.by_id:
                raise GraphFormatError(f"{self.where}: instructions {self.by_id[iid].name!r} and "
                                       f"{ins.name!r} share id {iid}")
            if not ins.opcode:
                raise GraphFormatError(f"{self.where}, instruction {ins.name!r}: no opcode")
            self.by_id[iid] = ins
        self.root_id = int(proto.root_id) if int(proto.root_id) in self.by_id \
            else int(self.instrs[-1].id)


class _HloConverter:
    """Builds one Graph from one HloModuleProto."""

    def __init__(self, module, view: str, source: str, name: str | None):
        if view not in ("program", "tpugraphs"):
            raise ValueError(f"view must be 'program' or 'tpugraphs', got {view!r}")
        self.view, self.source = view, source
        self.mname = str(module.name) or "hlo_module"
        where = f"{source}: module {self.mname!r}"
        self.where = where
        if not len(module.computations):
            raise GraphFormatError(f"{where}: has no computations")
        self.comps: dict[int, _Comp] = {}
        self.flat: list[tuple[int, int]] = []  # TpuGraphs node index → (comp id, instr id)
        for c in module.computations:
            comp = _Comp(c, where)
            if comp.id in self.comps:
                raise GraphFormatError(f"{where}: computations {self.comps[comp.id].name!r} and "
                                       f"{comp.name!r} share id {comp.id}")
            self.comps[comp.id] = comp
            self.flat += [(comp.id, int(i.id)) for i in comp.instrs]
        entry = self.comps.get(int(module.entry_computation_id))
        if entry is None or (module.entry_computation_name and
                             entry.name != module.entry_computation_name):
            named = [c for c in self.comps.values() if c.name == module.entry_computation_name]
            entry = named[0] if named else entry
        if entry is None:
            raise GraphFormatError(f"{where}: entry computation (id {module.entry_computation_id}, "
                                   f"name {module.entry_computation_name!r}) not found")
        self.entry = entry
        self.b = GraphBuilder(name or self.mname, meta={
            "format": "xla-hlo", "source": source, "view": view, "hlo_module": self.mname,
            "entry_computation": entry.name, "num_computations": len(self.comps),
            "num_instructions": len(self.flat)})
        self.node_of: dict[tuple[int, int], int] = {}  # (comp, instr) → first node running it
        self._inserted: list[str] = []  # node names in insertion order
        self._leaf_cache: dict[tuple[int, int], list[Arr]] = {}
        self._fusion_flops: dict[int, float] = {}
        self._folded: set[int] = set()  # computations mark_folded has walked

    # -- helpers ----------------------------------------------------------------------
    def leaves(self, comp: _Comp, ins) -> list[Arr]:
        key = (comp.id, int(ins.id))
        if key not in self._leaf_cache:
            self._leaf_cache[key] = array_leaves(ins.shape, f"{comp.where}, instruction {ins.name!r}")
        return self._leaf_cache[key]

    def called(self, comp: _Comp, ins) -> list[_Comp]:
        out = []
        for cid in ins.called_computation_ids:
            if int(cid) not in self.comps:
                raise GraphFormatError(f"{comp.where}, instruction {ins.name!r}: calls computation "
                                       f"id {int(cid)}, which is not in the module")
            out.append(self.comps[int(cid)])
        return out

    def operands(self, comp: _Comp, ins) -> list[Any]:
        out = []
        for oid in ins.operand_ids:
            if int(oid) not in comp.by_id:
                raise GraphFormatError(f"{comp.where}, instruction {ins.name!r}: operand id "
                                       f"{int(oid)} is not an instruction of this computation")
            out.append(comp.by_id[int(oid)])
        return out

    def add(self, comp: _Comp, ins, name: str, module: str, flops: float, read: float,
            written: float, out_bytes: float, persistent: float) -> int:
        leaves = self.leaves(comp, ins)
        shape, dtype = shape_dtype(ins.shape, leaves)
        name = self.b.unique_name(name)
        i = self.b.add_node(name, str(ins.opcode), shape=shape, dtype=dtype,
                            flops=flops, bytes_read=read, bytes_written=written,
                            out_bytes=out_bytes, persistent_bytes=persistent, module=module)
        self._inserted.append(name)
        self.node_of.setdefault((comp.id, int(ins.id)), i)
        return i

    def fusion_flops(self, comp: _Comp, stack: tuple[int, ...]) -> float:
        """FLOPs of every instruction of a fused computation (nested fusions included)."""
        if comp.id in self._fusion_flops:
            return self._fusion_flops[comp.id]
        if comp.id in stack:
            raise GraphFormatError(f"{comp.where}: calls itself (a cycle of computations)")
        total = 0.0
        for ins in comp.instrs:
            op = str(ins.opcode)
            if op == _FUSION:
                total += sum(self.fusion_flops(c, (*stack, comp.id)) for c in self.called(comp, ins))
                continue
            ins_leaves = [a for o in self.operands(comp, ins) for a in self.leaves(comp, o)]
            total += xla_cost(op, ins_leaves, self.leaves(comp, ins), ins)[0]
        self._fusion_flops[comp.id] = total
        return total

    def mark_folded(self, comp: _Comp, node: int, stack: tuple[int, ...] = ()) -> None:
        """Map every instruction of ``comp`` (and what it calls) to ``node``, unless an
        earlier node has them (a computation is walked once, not once per caller)."""
        if comp.id in stack or comp.id in self._folded:
            return
        self._folded.add(comp.id)
        for ins in comp.instrs:
            self.node_of.setdefault((comp.id, int(ins.id)), node)
            for c in self.called(comp, ins):
                self.mark_folded(c, node, (*stack, comp.id))

    # -- program view -----------------------------------------------------------------
    def program_size(self, comp: _Comp, sizes: dict[int, int], stack: tuple[int, ...] = ()) -> int:
        """At most how many nodes :meth:`expand` makes for ``comp``: its instructions and,
        at each control-flow call, the callee's (``sizes`` memoizes per computation)."""
        if comp.id in stack:
            raise GraphFormatError(f"{comp.where}: calls itself (a cycle of computations)")
        if comp.id not in sizes:
            sizes[comp.id] = len(comp.instrs) + sum(
                self.program_size(c, sizes, (*stack, comp.id))
                for ins in comp.instrs if str(ins.opcode) in _CONTROL_FLOW
                for c in self.called(comp, ins))
        return sizes[comp.id]

    def expand(self, comp: _Comp, prefix: str, module: str, args: list[tuple[int, float]] | None,
               stack: tuple[int, ...]) -> tuple[int, float]:
        """Add the nodes of ``comp``; return (node, bytes) of its root.

        ``args[k]`` is the (node, bytes) standing for parameter k (None: the entry,
        whose parameters are nodes)."""
        if comp.id in stack:
            raise GraphFormatError(f"{comp.where}: calls itself (a cycle of computations)")
        stack = (*stack, comp.id)
        val: dict[int, tuple[int, float]] = {}
        for ins in comp.instrs:
            op, iid = str(ins.opcode), int(ins.id)
            where = f"{comp.where}, instruction {ins.name!r}"
            leaves = self.leaves(comp, ins)
            nbytes = float(sum(a.nbytes for a in leaves))
            name = f"{prefix}{ins.name}"
            if op == "parameter" and args is not None:
                k = int(ins.parameter_number)
                if not 0 <= k < len(args):
                    raise GraphFormatError(f"{where}: parameter number {k}, but the caller passes "
                                           f"{len(args)} operands")
                val[iid] = args[k]
                self.node_of.setdefault((comp.id, iid), args[k][0])
                continue
            ops = self.operands(comp, ins)
            for o in ops:
                if int(o.id) not in val:
                    raise GraphFormatError(f"{where}: uses {o.name!r} before it is defined "
                                           "(instructions must be in dependency order, as XLA "
                                           "writes them)")
            inputs = [val[int(o.id)] for o in ops]
            in_leaves = [a for o in ops for a in self.leaves(comp, o)]
            callees = self.called(comp, ins)
            if op in _CONTROL_FLOW and callees:
                roots = []
                for j, c in enumerate(callees):
                    cargs = inputs[1 + j:2 + j] if op == "conditional" else inputs
                    roots.append(self.expand(c, f"{name}/", f"{module}/{c.name}", cargs, stack))
                node = self.add(comp, ins, name, module, 0.0, 0.0, 0.0, 0.0, 0.0)
                for src, eb in roots:
                    self.b.add_edge(src, node, eb)
                if op == "conditional" and inputs:
                    self.b.add_edge(inputs[0][0], node, inputs[0][1])
            elif op == _FUSION:
                flops = sum(self.fusion_flops(c, stack) for c in callees)
                read = float(sum(a.nbytes for a in in_leaves))
                node = self.add(comp, ins, name, module, flops, read, nbytes, nbytes, 0.0)
                for c in callees:
                    self.mark_folded(c, node, stack)
                self._edges(inputs, node)
            else:
                cls = op_class(op)
                persistent = nbytes if op in ("parameter", "constant") else 0.0
                out_b = 0.0 if cls == "view" or persistent else nbytes
                if cls == "input" and not persistent:
                    out_b = nbytes  # iota, rng state ...: a fresh buffer
                flops, rd, wr = xla_cost(op, in_leaves, leaves, ins)
                node = self.add(comp, ins, name, module, flops, rd, wr, out_b, persistent)
                for c in callees:  # to_apply computations: folded into the caller's cost
                    self.mark_folded(c, node, stack)
                if op == "get-tuple-element":  # takes one element, not the whole tuple
                    inputs = [(src, min(eb, nbytes)) for src, eb in inputs]
                self._edges(inputs, node)
            val[iid] = (node, nbytes)
        if comp.root_id not in val:
            raise GraphFormatError(f"{comp.where}: root id {comp.root_id} not found")
        return val[comp.root_id]

    def _edges(self, inputs: Iterable[tuple[int, float]], node: int) -> None:
        for src, eb in inputs:
            if src != node:
                self.b.add_edge(src, node, eb)

    # -- TpuGraphs view ---------------------------------------------------------------
    def flat_graph(self) -> None:
        module_of = {c.id: c.name for c in self.comps.values()}
        for cid, iid in self.flat:
            comp = self.comps[cid]
            ins = comp.by_id[iid]
            op = str(ins.opcode)
            leaves = self.leaves(comp, ins)
            nbytes = float(sum(a.nbytes for a in leaves))
            in_leaves = [a for o in self.operands(comp, ins) for a in self.leaves(comp, o)]
            if ins.called_computation_ids and (op in _CONTROL_FLOW or op == _FUSION):
                flops = 0.0
                rd, wr = (float(sum(a.nbytes for a in in_leaves)), nbytes) if op == _FUSION \
                    else (0.0, 0.0)
            else:
                flops, rd, wr = xla_cost(op, in_leaves, leaves, ins)
            persistent = nbytes if op == "constant" or (op == "parameter" and comp is self.entry) \
                else 0.0
            out_b = 0.0 if op_class(op) == "view" or persistent or op in _CONTROL_FLOW else nbytes
            name = str(ins.name) if not self.dup_names else f"{comp.name}/{ins.name}"
            self.add(comp, ins, name, module_of[cid], flops, rd, wr, out_b, persistent)
        for cid, iid in self.flat:
            comp = self.comps[cid]
            ins = comp.by_id[iid]
            me = self.node_of[(cid, iid)]
            for o in self.operands(comp, ins):
                ob = float(sum(a.nbytes for a in self.leaves(comp, o)))
                src = self.node_of[(cid, int(o.id))]
                if src != me:
                    self.b.add_edge(src, me, ob)
            for c in self.called(comp, ins):
                root = c.by_id[c.root_id]
                rb = float(sum(a.nbytes for a in self.leaves(c, root)))
                src = self.node_of[(c.id, c.root_id)]
                if src != me:
                    self.b.add_edge(src, me, rb)

    def build(self) -> Graph:
        try:
            if self.view == "program":
                size = self.program_size(self.entry, {})
                if size > MAX_PROGRAM_OPS:
                    raise GraphFormatError(f"{self.where}: inlining its calls makes {size:,} ops, "
                                           f"more than {MAX_PROGRAM_OPS:,} (graphopt.frontends."
                                           "tpugraphs.hlo.MAX_PROGRAM_OPS); view='tpugraphs' "
                                           "has one node per instruction")
                self.expand(self.entry, "", self.entry.name, None, ())
            else:
                names = [str(self.comps[c].by_id[i].name) for c, i in self.flat]
                self.dup_names = len(set(names)) != len(names)
                self.flat_graph()
            g = self.b.build()
        except GraphError as err:
            raise GraphError(f"{self.where}: {err}") from err
        # The builder sorts nodes topologically; map insertion indices to graph indices.
        final = [g.index[n] for n in self._inserted]
        self.node_of = {k: final[v] for k, v in self.node_of.items()}
        return g

    def node_of_flat(self, k: int) -> int:
        return self.node_of.get(self.flat[k], -1)


def hlo_module_to_graph(module: bytes | Any, *, view: str = "program", name: str | None = None,
                        source: str = "<bytes>") -> Graph:
    """Convert one XLA ``HloModuleProto`` to a :class:`~graphopt.ir.Graph`.

    Parameters
    ----------
    module : bytes or message
        A serialized ``HloModuleProto``, or one decoded by this module.
    view : {"program", "tpugraphs"}
        ``"program"``: the entry computation with control flow inlined and fusions
        summarized; ``"tpugraphs"``: every instruction of every computation in proto
        order (TpuGraphs' node numbering). See the module docstring.
    name : str, optional
        Graph name; default the module's name.
    source : str
        What to call the input in error messages (a file name).

    Returns
    -------
    Graph
        Op types are XLA opcode names; ``graph.meta`` records the module name, entry
        computation, view and the module's computation and instruction counts.

    Raises
    ------
    GraphFormatError
        The bytes do not decode, or the module is inconsistent: no entry computation,
        an operand or called computation id that does not exist, duplicate ids, a use
        before definition, a computation calling itself, a negative dimension.
    ImportError
        The ``protobuf`` package is missing.

    Notes
    -----
    O(instructions + operands) for the TpuGraphs view; the program view copies a called
    computation at each call site, up to :data:`MAX_PROGRAM_OPS` nodes. Not checked: that
    shapes agree with the opcode's semantics (an ``add`` of mismatched shapes is taken as
    given), layouts, and the instruction fields not declared in the schema (metadata,
    literals, sharding).

    Examples
    --------
    >>> from graphopt.data import tpugraphs_dir
    >>> from graphopt.frontends.tpugraphs import load_tuning_data
    >>> g = load_tuning_data(tpugraphs_dir() / "op_tuning_data.pb")[0].module  # doctest: +SKIP
    >>> g.op.tolist()  # doctest: +SKIP
    ['parameter', 'parameter', 'fusion']
    """
    if isinstance(module, (bytes, bytearray, memoryview)):
        module = parse("HloModuleProto", bytes(module), source)
    return _HloConverter(module, view, source, name).build()
