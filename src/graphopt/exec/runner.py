"""Running instructions: the op call, seeded randomness, values in and out of transfers.

One device's work is the same whether it runs in this process (one device, or the
reference) or in a worker process: :func:`run_op` calls an op, :func:`pack` and
:func:`unpack` turn a value into the tensors a transfer carries and back.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from graphopt.exec.program import Instr, Program, Ref, refs, resolve_target

__all__ = ["issue_order", "materialize", "pack", "run_op", "run_inprocess", "unpack"]

_TARGETS: dict[str, Callable] = {}


def materialize(x: Any, values: dict[int, Any]) -> Any:
    """``x`` with every :class:`Ref` replaced by its value."""
    return fx.node.map_aggregate(x, lambda v: values[v.node] if isinstance(v, Ref) else v)


def run_op(ins: Instr, values: dict[int, Any], seed: int, device: torch.device | None = None) -> Any:
    """Run one instruction on ``values``; random ops draw from a generator seeded by
    ``(seed, node)``, so every placement and order draws the same numbers. ``device``
    replaces the device arguments the trace recorded (factory ops on a GPU)."""
    fn = _TARGETS.get(ins.target)
    if fn is None:
        fn = _TARGETS[ins.target] = resolve_target(ins.target)
    args, kwargs = materialize(ins.args, values), materialize(ins.kwargs, values)
    if device is not None:
        args, kwargs = fx.node.map_aggregate((args, kwargs), lambda v: device
                                             if isinstance(v, torch.device) else v)
    if ins.rng:
        torch.manual_seed((seed * 1_000_003 + ins.node) % (2**63))
    return fn(*args, **kwargs)


def pack(value: Any) -> list[torch.Tensor]:
    """The non-empty tensors of a value, contiguous, in tree order."""
    out: list[torch.Tensor] = []
    fx.node.map_aggregate(value, lambda v: out.append(v.contiguous())
                          if isinstance(v, torch.Tensor) and v.numel() else v)
    return out


def empty_like_spec(spec: Any, device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """Receive buffers for a value of ``spec`` (:func:`~graphopt.exec.program.value_spec`)."""
    out: list[torch.Tensor] = []

    def walk(s: Any) -> None:
        kind = s[0]
        if kind == "tensor" and _numel(s[1]):
            out.append(torch.empty(s[1], dtype=s[2], device=device))
        elif kind in ("tuple", "list"):
            for x in s[1]:
                walk(x)
    walk(spec)
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def unpack(spec: Any, tensors: list[torch.Tensor], device: torch.device | str = "cpu") -> Any:
    """Rebuild a value of ``spec`` from the tensors :func:`pack` sent, with the sender's
    strides where they describe a dense tensor (kernels may choose by stride)."""
    it = iter(tensors)

    def walk(s: Any) -> Any:
        kind = s[0]
        if kind == "tensor":
            shape, dtype, stride = s[1], s[2], s[3]
            if not _numel(shape):
                return torch.empty(shape, dtype=dtype, device=device)
            t = next(it)
            if t.stride() != stride and _dense(shape, stride):
                t = torch.empty_strided(shape, stride, dtype=dtype, device=device).copy_(t)
            return t
        if kind in ("tuple", "list"):
            items = [walk(x) for x in s[1]]
            return tuple(items) if kind == "tuple" else items
        return s[1]
    return walk(spec)


def _dense(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Strides of a non-overlapping tensor that covers its storage exactly."""
    expected = 1
    for size, st in sorted(((d, s) for d, s in zip(shape, stride) if d != 1), key=lambda x: x[1]):
        if st != expected:
            return False
        expected *= size
    return True


def issue_order(prog: Program) -> list[tuple[str, int]]:
    """One global order of instructions and transfers that every device's priorities
    allow: a list schedule where each device takes its highest-priority ready op (ties:
    FX order) and a transfer goes as soon as its value exists.

    Returns ``("op", instr position)`` and ``("send", transfer tag)`` items.
    """
    waiting = [len(ins.deps) + len(ins.recvs) for ins in prog.instrs]
    users: dict[int, list[int]] = {}
    for k, ins in enumerate(prog.instrs):
        for d in ins.deps:
            users.setdefault(d, []).append(k)
    recv_users: dict[int, list[int]] = {}
    for k, ins in enumerate(prog.instrs):
        for tag in ins.recvs:
            recv_users.setdefault(tag, []).append(k)
    sends_of: dict[int, list[int]] = {}
    blocked = {t.tag: len(t.after) for t in prog.transfers}
    after_of: dict[int, list[int]] = {}
    for t in prog.transfers:
        sends_of.setdefault(t.node, []).append(t.tag)
        for w in t.after:
            after_of.setdefault(w, []).append(t.tag)
    exists: set[int] = set(prog.feeds)
    seq = iter(range(1 << 62))  # readiness order, the tie-break of a plan without priorities

    def key(k: int) -> tuple[float, int, int]:
        return (-prog.instrs[k].priority, next(seq) if prog.fifo else prog.instrs[k].node, k)

    ready = [key(k) for k, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order: list[tuple[str, int]] = []

    def send(tag: int) -> None:
        order.append(("send", tag))
        for k in recv_users.get(tag, ()):
            waiting[k] -= 1
            if not waiting[k]:
                heapq.heappush(ready, key(k))

    for node in sorted(exists):
        for tag in sends_of.get(node, ()):
            if not blocked[tag]:
                send(tag)
    while ready:
        k = heapq.heappop(ready)[2]
        node = prog.instrs[k].node
        order.append(("op", k))
        exists.add(node)
        for u in users.get(node, ()):
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, key(u))
        for tag in sends_of.get(node, ()):
            if not blocked[tag]:
                send(tag)
        for tag in after_of.get(node, ()):
            blocked[tag] -= 1
            if not blocked[tag] and prog.transfers[tag].node in exists:
                send(tag)
    if len([o for o in order if o[0] == "op"]) != len(prog.instrs):
        raise RuntimeError("the program's dependencies form a cycle")  # compile_program's bug
    return order


def run_inprocess(prog: Program, seed: int = 0, values: dict[int, Any] | None = None,
                  devices: list[torch.device] | None = None,
                  events: list[list[tuple]] | None = None) -> tuple[Any, dict[int, Any]]:
    """Run every device's work in this process, in :func:`issue_order`.

    On CPU all devices share this process (the reference, and one-device runs); with
    CUDA ``devices``, each device's ops go on its own stream and each transfer on a copy
    stream, ordered by events, so devices overlap as the host issues ahead.

    On CPU a value is dropped once its last reader on that device ran and its
    transfers from there were issued, as the worker processes and the simulator free
    memory. CUDA values live until the step ends: a tensor dropped while another
    stream still reads it could have its memory reused under that read.

    ``events``, one list per device, receives each op's ``("op", name, start, end,
    None)`` in the layout of :meth:`CPUWorkers.step <graphopt.exec.workers.CPUWorkers.step>`.

    Returns the program's outputs and the state: the value of every input (parameters,
    buffers, optimizer moments, updated in place) on its home device.
    """
    cuda = devices is not None and devices[0].type == "cuda"
    dev = devices or [torch.device("cpu")] * prog.devices
    local: list[dict[int, Any]] = [{} for _ in range(prog.devices)]
    for node, (d, v) in (values or prog.feeds).items():
        local[d][node] = v.to(dev[d]) if cuda and isinstance(v, torch.Tensor) else v
    streams = [torch.cuda.Stream(device=x) for x in dev] if cuda else None
    copy_streams: dict[tuple[int, int], Any] = {}
    ready_event: list[dict[int, Any]] = [{} for _ in range(prog.devices)]
    keep = set(prog.feeds) | set(refs(prog.outputs))
    uses: dict[tuple[int, int], int] = {}
    for ins in prog.instrs:
        for n in set(refs((ins.args, ins.kwargs))):
            uses[ins.device, n] = uses.get((ins.device, n), 0) + 1
    for t in prog.transfers:
        uses[t.src, t.node] = uses.get((t.src, t.node), 0) + 1

    def release(d: int, node: int) -> None:
        uses[d, node] -= 1
        if not cuda and not uses[d, node] and node not in keep:
            del local[d][node]

    def stamp(d: int, node: int) -> None:
        if cuda:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(dev[d]))
            ready_event[d][node] = ev

    for kind, k in issue_order(prog):
        if kind == "op":
            ins = prog.instrs[k]
            d = ins.device
            t0 = time.perf_counter()
            if cuda:
                with torch.cuda.stream(streams[d]):
                    for p in refs((ins.args, ins.kwargs)):
                        ev = ready_event[d].get(p)
                        if ev is not None:
                            streams[d].wait_event(ev)
                    local[d][ins.node] = run_op(ins, local[d], seed, dev[d])
                    stamp(d, ins.node)
            else:
                local[d][ins.node] = run_op(ins, local[d], seed)
            if events is not None:
                events[d].append(("op", ins.name, t0, time.perf_counter(), None))
            for p in set(refs((ins.args, ins.kwargs))):
                release(d, p)
            if not cuda and (d, ins.node) not in uses and ins.node not in keep:  # nobody reads it
                del local[d][ins.node]
        else:
            t = prog.transfers[k]
            value = local[t.src][t.node]
            if cuda:
                key = (t.src, t.dst)
                if key not in copy_streams:
                    copy_streams[key] = torch.cuda.Stream(device=dev[t.dst])
                s = copy_streams[key]
                ev = ready_event[t.src].get(t.node)
                with torch.cuda.stream(s):
                    if ev is not None:
                        s.wait_event(ev)
                    target = dev[t.dst]
                    moved = fx.node.map_aggregate(value, lambda v, to=target: v.to(to, non_blocking=True)
                                                  if isinstance(v, torch.Tensor) else v)
                    out = torch.cuda.Event()
                    out.record(s)
                ready_event[t.dst][t.node] = out
                local[t.dst][t.node] = moved
            else:  # a copy, so a later in-place write on the sender cannot reach it
                local[t.dst][t.node] = unpack(prog.specs[t.node], [x.clone() for x in pack(value)])
            release(t.src, t.node)
    if cuda:
        for x in dev:
            torch.cuda.synchronize(x)
    out = materialize(prog.outputs, {n: v for d in reversed(range(prog.devices))
                                     for n, v in local[d].items()})
    return out, {n: local[d][n] for n, (d, _) in prog.feeds.items()}
