"""Running instructions: the op call, seeded randomness, values in and out of transfers.

One device's work is the same whether it runs in this process (one device, or the
reference) or in a worker process: :func:`run_op` calls an op, :func:`pack` and
:func:`unpack` turn a value into the tensors a transfer carries and back.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import fx

from graphopt.errors import ExecutionError
from graphopt.exec.program import Instr, Program, Ref, Transfer, refs, resolve_target

__all__ = ["AllocationPeak", "allocation_peak", "held_bytes", "issue_order", "pack_copies", "materialize",
           "pack", "run_op", "run_inprocess", "unpack"]

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
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # torch's message alone does not say which op of the program failed
        raise ExecutionError(f"op {ins.name!r} ({ins.target}) on device {ins.device}: "
                             f"{one_line(err)}") from err


def held_bytes(*values: Any) -> int:
    """Bytes of the distinct storages the tensors in ``values`` (any nesting) hold: what
    a device has allocated for them, views and aliases counted once."""
    seen: dict[int, int] = {}

    def add(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.device.type == "cpu":
            s = v.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
        return v

    torch.utils._pytree.tree_map(add, list(values))
    return sum(seen.values())


def allocation_peak(records: list[tuple[int, int]],
                    window: tuple[int, int] | None = None) -> int:
    """Highest running total of allocator records, 0 at least.

    Parameters
    ----------
    records : list of (int, int)
        ``(time, bytes)`` of each allocation (bytes positive) and free (negative), sorted
        by time, as :attr:`AllocationPeak.records` holds them.
    window : (int, int), optional
        ``(start, end)`` on the records' clock (the profiler's nanoseconds,
        :attr:`AllocationPeak.marks`): the records with ``start <= time < end`` alone,
        their total starting at 0 at ``start``.

    Returns
    -------
    int
        The peak, in bytes; 0 where nothing is allocated (or only freed).

    Examples
    --------
    >>> allocation_peak([(0, 100), (1, 50), (2, -100), (3, 20)])
    150
    >>> allocation_peak([(0, 100), (1, 50), (2, -100), (3, 20)], window=(2, 4))
    0
    """
    total = top = 0
    for t, n in records:
        if window is not None and not window[0] <= t < window[1]:
            continue
        total += n
        top = max(top, total)
    return top


class AllocationPeak:
    """A device's peak memory over a region of code, from the CPU allocator's events.

    ``peak`` = the bytes held when the region starts (:func:`held_bytes` of ``held``:
    state, inputs, receive buffers) plus the highest running total of the bytes
    allocated and freed in it (:func:`allocation_peak`), read from PyTorch's profiler
    memory records, one per allocation and free, so that a peak reached inside an op
    (its workspace) counts. The allocator's own rounding and glibc's headers are not in
    them: the bytes are what tensors asked for. Frees of tensors allocated before the
    region are not reported by the profiler; the caller keeps those alive (``held``).

    After the region, ``records`` holds its ``(ns, bytes)`` allocator records sorted by
    time and ``marks`` the start (ns, same clock) of each ``record_function`` label
    entered in it, by name (one of a label that repeats), so that a caller can take the
    peak of a part of the region between two labels of its own:
    ``allocation_peak(m.records, (m.marks[a], m.marks[b]))``.

    Examples
    --------
    >>> m = AllocationPeak([])
    >>> with m:
    ...     x = torch.empty(1000)
    ...     del x
    ...     y = torch.empty(10)
    >>> m.peak
    4000
    """

    def __init__(self, held: Any = ()):
        self.held = held_bytes(held)
        self.peak = self.held
        self.records: list[tuple[int, int]] = []
        self.marks: dict[str, int] = {}
        self._prof: Any = None

    def __enter__(self) -> AllocationPeak:
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _quiet_stderr():
            self._prof.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with _quiet_stderr():
            self._prof.stop()
        cpu = torch.autograd.DeviceType.CPU
        # kineto's events, not prof.events(): those sum an op's records into its own net
        # bytes at its start (a peak inside the op lost) and time in us from the trace start
        events = self._prof.profiler.kineto_results.events()
        self.records = sorted(((e.start_ns(), e.nbytes()) for e in events
                               if e.name() == "[memory]" and e.device_type() == cpu),
                              key=lambda r: r[0])
        self.marks = {e.name(): e.start_ns() for e in events if e.is_user_annotation()}
        self.peak = self.held + allocation_peak(self.records)
        self._prof = None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The process's stderr (file descriptor 2) to the null device: kineto writes a
    ``USDT: ... profiler_start`` and a ``profiler_stop`` line there at every start and
    stop of a profiler, two lines of noise per measured step in ``graphopt run``."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def one_line(err: BaseException) -> str:
    """``Kind: first line of the message`` of an exception."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


#: A packed value's tensors start at multiples of this many bytes, so that the receiver
#: can view each part of the buffer as its dtype.
_ALIGN = 16


def pack(value: Any) -> list[torch.Tensor]:
    """What a transfer of ``value`` sends: its one non-empty tensor, contiguous, or its
    several (in tree order) copied into one buffer of bytes, so that a transfer is one
    message whatever the value (a message costs each worker tens of us, more than
    copying a few hundred KiB: docs/simulator.md); ``[]`` if it holds none."""
    leaves: list[torch.Tensor] = []
    fx.node.map_aggregate(value, lambda v: leaves.append(v)
                          if isinstance(v, torch.Tensor) and v.numel() else v)
    if len(leaves) < 2:
        return [t.contiguous() for t in leaves]
    parts = _parts([(t.shape, t.dtype) for t in leaves])
    buf = torch.empty(parts[-1][0], dtype=torch.uint8)
    for t, (start, _) in zip(leaves, parts):
        _view(buf, start, t.shape, t.dtype).copy_(t)
    return [buf]


def pack_copies(value: Any) -> int:
    """Bytes :func:`pack` copies to send ``value`` (real or fake tensors): its tensors when
    it holds several (packed into one buffer), its one tensor when that is not contiguous,
    else none (the tensor itself is sent).

    >>> x = torch.zeros(4, 2)
    >>> pack_copies(x), pack_copies(x.t()), pack_copies((torch.zeros(3), torch.zeros(1)))
    (0, 32, 16)
    """
    leaves: list[torch.Tensor] = []
    fx.node.map_aggregate(value, lambda v: leaves.append(v)
                          if isinstance(v, torch.Tensor) and v.numel() else v)
    if len(leaves) == 1 and leaves[0].is_contiguous():
        return 0
    return sum(t.numel() * t.element_size() for t in leaves)


def _parts(leaves: list[tuple]) -> list[tuple[int, int]]:
    """Where each of ``leaves`` (shape, dtype) starts in a packed buffer, and its bytes;
    a last entry holds the buffer's size."""
    out, start = [], 0
    for shape, dtype in leaves:
        n = _numel(shape) * dtype.itemsize
        out.append((start, n))
        start += -(-n // _ALIGN) * _ALIGN
    return out + [(start, 0)]


def _view(buf: torch.Tensor, start: int, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    return buf[start:start + _numel(shape) * dtype.itemsize].view(dtype).view(shape)


def _leaves(spec: Any) -> list[tuple]:
    """(shape, dtype) of the non-empty tensors of ``spec``, in tree order."""
    if spec[0] == "tensor":
        return [(spec[1], spec[2])] if _numel(spec[1]) else []
    if spec[0] in ("tuple", "list"):
        return [leaf for x in spec[1] for leaf in _leaves(x)]
    return []


def empty_like_spec(spec: Any, device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """Receive buffers for a value of ``spec`` (:func:`~graphopt.exec.program.value_spec`),
    as :func:`pack` sends it."""
    leaves = _leaves(spec)
    if len(leaves) < 2:
        return [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in leaves]
    return [torch.empty(_parts(leaves)[-1][0], dtype=torch.uint8, device=device)]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def unpack(spec: Any, tensors: list[torch.Tensor], device: torch.device | str = "cpu") -> Any:
    """Rebuild a value of ``spec`` from what :func:`pack` sent (views of the received
    buffer), with the sender's strides where they describe a dense tensor (kernels may
    choose by stride)."""
    leaves = _leaves(spec)
    if len(leaves) < 2:
        it = iter(tensors)
    else:
        it = iter([_view(tensors[0], start, shape, dtype)
                   for (shape, dtype), (start, _) in zip(leaves, _parts(leaves))])

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


class _Streams:
    """The CUDA side of :func:`run_inprocess`: one stream per device, one copy stream per
    link, events for every dependency, and (``timed``) each op's span as the GPU ran it.

    The host issues ahead, so a device's stream waits only on events: the values it
    reads (made on another stream) and, before an op writes into a tensor, the copies
    that still read it (``Instr.wait_sends``): without that wait an in-place update
    (an optimizer step) could overwrite a parameter while a copy stream sends it.
    """

    def __init__(self, dev: list[torch.device], timed: bool):
        for x in dict.fromkeys(dev):
            torch.cuda.synchronize(x)
        self.dev, self.timed = dev, timed
        self.streams = [torch.cuda.Stream(device=x) for x in dev]
        self.copy_streams: dict[tuple[int, int], Any] = {}
        self.ready: list[dict[int, Any]] = [{} for _ in dev]  # device -> node -> event
        self.sent: dict[int, Any] = {}  # transfer tag -> its copy's event
        self.spans: list[tuple[int, str, str, Any, Any]] = []
        self.host0 = time.perf_counter()
        # Spans are read against one event per device, recorded once the device is idle.
        self.base = [self._event(s) for s in self.streams]

    def _event(self, stream: Any) -> Any:
        ev = torch.cuda.Event(enable_timing=self.timed)
        ev.record(stream)
        return ev

    def op(self, ins: Instr, values: dict[int, Any], seed: int) -> Any:
        d, s = ins.device, self.streams[ins.device]
        with torch.cuda.stream(s):
            for p in refs((ins.args, ins.kwargs)):
                if p in self.ready[d]:
                    s.wait_event(self.ready[d][p])
            for tag in ins.wait_sends:
                if tag in self.sent:
                    s.wait_event(self.sent[tag])
            start = self._event(s) if self.timed else None
            out = run_op(ins, values, seed, self.dev[d])
            self.ready[d][ins.node] = end = self._event(s)
        if self.timed:
            self.spans.append((d, "op", ins.name, start, end))
        return out

    def copy(self, t: Transfer, value: Any) -> Any:
        key = (t.src, t.dst)
        if key not in self.copy_streams:
            self.copy_streams[key] = torch.cuda.Stream(device=self.dev[t.dst])
        s = self.copy_streams[key]
        with torch.cuda.stream(s):
            if t.node in self.ready[t.src]:
                s.wait_event(self.ready[t.src][t.node])
            to = self.dev[t.dst]
            # copy=True: between streams of one GPU too, a transfer is a copy, so that a
            # later in-place write on either side cannot reach the other
            moved = fx.node.map_aggregate(value, lambda v: v.to(to, non_blocking=True, copy=True)
                                          if isinstance(v, torch.Tensor) else v)
            self.ready[t.dst][t.node] = self.sent[t.tag] = done = self._event(s)
        if self.timed:
            self.spans.append((t.dst, "recv", t.name, done, done))
        return moved

    def finish(self, events: list[list[tuple]] | None) -> None:
        """Wait for every device; turn the spans into host-clock events."""
        for x in dict.fromkeys(self.dev):
            torch.cuda.synchronize(x)
        end = time.perf_counter()
        if events is None:
            return
        for d, kind, name, a, b in self.spans:
            t0 = self.host0 + self.base[d].elapsed_time(a) / 1e3
            t1 = self.host0 + self.base[d].elapsed_time(b) / 1e3
            events[d].append((kind, name, t0, t1, None))
        # the step as the host saw it: issue, then waiting for the last kernel
        events[0].append(("step", "step", self.host0, end, None))


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
    if cuda:
        gpu = _Streams(dev, timed=events is not None)
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

    for kind, k in issue_order(prog):
        if kind == "op":
            ins = prog.instrs[k]
            d = ins.device
            if cuda:
                local[d][ins.node] = gpu.op(ins, local[d], seed)
            else:
                t0 = time.perf_counter()
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
                local[t.dst][t.node] = gpu.copy(t, value)
            else:  # a copy, so a later in-place write on the sender cannot reach it
                sent = pack(value)
                if len(_leaves(prog.specs[t.node])) < 2:  # the tensor itself, not a new buffer
                    sent = [x.clone() for x in sent]
                local[t.dst][t.node] = unpack(prog.specs[t.node], sent)
            release(t.src, t.node)
    if cuda:
        gpu.finish(events)
    out = materialize(prog.outputs, {n: v for d in reversed(range(prog.devices))
                                     for n, v in local[d].items()})
    return out, {n: local[d][n] for n, (d, _) in prog.feeds.items()}
