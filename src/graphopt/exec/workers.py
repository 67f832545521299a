"""CPU devices as worker processes: one process per device, pinned to its own cores,
tensors sent between them with ``torch.distributed`` (gloo) point-to-point messages.

Each worker runs its device's ops as the simulator does: among its ops whose inputs
are present it starts the one with the highest priority (ties: FX order), and posts
the sends of a value as soon as the value exists. Every receive of a step is posted
when the step starts, into buffers allocated once, so a send never waits for its
receiver to get there.

Why it cannot deadlock: a worker blocks only when none of its ops is ready, and then
it polls all its pending receives rather than waiting on one. Every dependency points
forward in FX order (data edges, and the in-place orderings of
:mod:`graphopt.exec.program`), so the pending op with the smallest FX index over all
workers has every input produced and sent: it becomes ready, and the step advances.
A worker that dies, or a step that makes no progress for ``timeout`` seconds, raises
:class:`~graphopt.errors.ExecutionError` in the parent; it never hangs.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch

from graphopt.errors import ExecutionError
from graphopt.exec.program import Program, Transfer, refs
from graphopt.exec.runner import AllocationPeak, empty_like_spec, one_line, pack, run_op, unpack

#: Seconds a worker's op loop may hold the GIL while its receiving thread waits for it.
_SWITCH_INTERVAL = 1e-4
#: Threads per worker that wait for arriving values.
_RECEIVERS = 4

__all__ = ["CPUWorkers", "device_cores", "host_cores"]


def _cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def host_cores() -> int:
    """How many cores this process may run on (its affinity, not the machine's count)."""
    return len(_cores())


def device_cores(devices: int) -> list[set[int]]:
    """The cores of each device: this process's cores split evenly (shared when there
    are more devices than cores)."""
    cores = _cores()
    if devices >= len(cores):
        return [{cores[d % len(cores)]} for d in range(devices)]
    k = len(cores) // devices
    return [set(cores[d * k:(d + 1) * k]) for d in range(devices)]


#: Each worker is a process that imports torch (a few hundred MB): a cluster file of a
#: thousand devices must not start a thousand of them.
MAX_WORKERS = 64


class CPUWorkers:
    """A pool of worker processes, one per CPU device, that runs compiled programs.

    Parameters
    ----------
    devices : int
        Number of devices (worker processes), 1 to :data:`MAX_WORKERS`.
    timeout : float
        Seconds a step may go without progress (and start-up may take) before the
        pool is torn down with an :class:`ExecutionError`.

    Examples
    --------
    >>> with CPUWorkers(2) as pool:        # doctest: +SKIP
    ...     pool.load(program)
    ...     outputs, events = pool.step(seed=0)
    """

    def __init__(self, devices: int, timeout: float = 120.0):
        import torch.multiprocessing as mp

        if not 1 <= devices <= MAX_WORKERS:
            raise ExecutionError(f"{devices} CPU devices: graphopt.exec runs 1 to {MAX_WORKERS} "
                                 "worker processes (one per device)")
        self.devices = devices
        self.timeout = timeout
        self._loaded: dict[int, tuple[Program, bool]] = {}  # key -> (program, replicated)
        self._next_key = 0
        self._dir = tempfile.TemporaryDirectory(prefix="graphopt-exec-")
        ctx = mp.get_context("spawn")
        self._conns, self._procs = [], []
        cores = device_cores(devices)
        for rank in range(devices):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(rank, devices, os.path.join(self._dir.name, "store"),
                                                  child, sorted(cores[rank]), timeout, os.getpid()),
                            daemon=True, name=f"graphopt-device-{rank}")
            with _sigint_ignored():  # from its first instruction: the parent handles Ctrl-C
                p.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(p)
        self._gather("start")

    # -- talking to the workers --------------------------------------------------------
    def _gather(self, what: str) -> list[Any]:
        out: list[Any] = [None] * self.devices
        waiting = set(range(self.devices))
        # the commonest cause: spawn runs the main script again in each worker
        hint = ("; a script that starts workers must do so under `if __name__ == '__main__':` "
                "(they are spawned, and import the script)") if what == "start" else ""
        deadline = time.monotonic() + self.timeout
        while waiting:
            for r in list(waiting):
                conn = self._conns[r]
                if conn.poll(0.01):
                    try:
                        status, payload = conn.recv()
                    except (EOFError, OSError):
                        self._fail(f"device {r}'s worker died during {what}{hint}")
                    if status == "error":
                        self._fail(f"device {r} failed during {what}: {payload}")
                    out[r] = payload
                    waiting.discard(r)
                elif not self._procs[r].is_alive():
                    self._fail(f"device {r}'s worker died during {what} "
                               f"(exit code {self._procs[r].exitcode}){hint}")
            if time.monotonic() > deadline:
                self._fail(f"device(s) {sorted(waiting)} made no progress for {self.timeout:g} s "
                           f"during {what}")
        return out

    def _send(self, r: int, msg: Any) -> None:
        try:
            self._conns[r].send(msg)
        except (BrokenPipeError, OSError):
            self._fail(f"device {r}'s worker died")

    def _fail(self, message: str) -> None:
        self.close(force=True)
        raise ExecutionError(message)

    # -- the API -----------------------------------------------------------------------
    def load(self, prog: Program, replicate: bool = False) -> None:
        """Hand each worker its device's share of ``prog`` (and its state and inputs).

        The pool holds several programs at once (each with its own state), so that
        plans can run in turns (:func:`graphopt.exec.api.measure_plans`); loading one
        it holds starts it again from its initial state. :meth:`step` runs the last
        one loaded unless told which; :meth:`unload` frees one.

        With ``replicate``, every worker gets device 0's share of a program that runs
        on device 0 alone, and runs it independently of the others: the program's ops as
        they run while every core computes (:func:`graphopt.exec.calibrate.shared_slowdown`).
        """
        if prog.devices != self.devices:
            raise ExecutionError(f"the program is compiled for {prog.devices} devices; the pool "
                                 f"has {self.devices}")
        if replicate and (prog.transfers or max(prog.placement) > 0):
            raise ExecutionError("only a program on device 0 alone can be replicated")
        key = self._key(prog, replicate)
        if key is None:
            key, self._next_key = self._next_key, self._next_key + 1
        self._loaded.pop(key, None)
        for r in range(self.devices):
            self._send(r, ("load", (key, _share(prog, 0 if replicate else r))))
        self._gather("load")
        self._loaded[key] = (prog, replicate)

    def holds(self, prog: Program) -> bool:
        """Whether ``prog`` is loaded (not replicated) and can :meth:`step`."""
        return self._key(prog, False) is not None

    def unload(self, prog: Program) -> None:
        """Free ``prog``'s share and state on every worker (nothing if not loaded)."""
        for replicate in (False, True):
            key = self._key(prog, replicate)
            if key is not None:
                del self._loaded[key]
                for r in range(self.devices):
                    self._send(r, ("unload", key))
                self._gather("unload")

    def _key(self, prog: Program | None, replicate: bool) -> int | None:
        if prog is None:  # the last one loaded
            if not self._loaded:
                raise ExecutionError("no program is loaded")
            return next(reversed(self._loaded))
        return next((k for k, (p, r) in self._loaded.items() if p is prog and r == replicate), None)

    def step(self, seed: int = 0, prog: Program | None = None, replicate: bool = False,
             idle: tuple[int, float] | None = None) -> tuple[Any, list[list[tuple]]]:
        """Run one step of ``prog`` (default: the last program loaded; ``replicate``: its
        replicated load) on every device; return the outputs (gathered here) and each
        device's events ``(kind, name, start, end, extra)`` on the shared monotonic clock.
        ``idle = (every, seconds)``: each device sleeps ``seconds`` before every
        ``every``-th op it runs, as if it waited for a value
        (:func:`graphopt.exec.calibrate.wake_cost` times what that costs its ops)."""
        key = self._key(prog, replicate)
        if key is None:
            raise ExecutionError("the program is not loaded in this pool")
        for r in range(self.devices):
            self._send(r, ("step", (key, seed, idle, False)))
        results = self._gather("a step")
        values: dict[int, Any] = {}
        for outs, _, _ in results:
            values.update(outs)
        return values, [ev for _, ev, _ in results]

    def peak_memory(self, seed: int = 0, prog: Program | None = None) -> list[int]:
        """Run one step of ``prog`` (default: the last program loaded) and return each
        device's peak memory in it, bytes: what the worker held when the step began (its
        state, inputs and receive buffers) plus the highest running total of the CPU
        allocator's events during the step (:class:`~graphopt.exec.runner.AllocationPeak`).
        The step is profiled, so it runs slower than :meth:`step`; it updates the state."""
        key = self._key(prog, False)
        if key is None:
            raise ExecutionError("the program is not loaded in this pool")
        for r in range(self.devices):
            self._send(r, ("step", (key, seed, None, True)))
        return [peak for _, _, peak in self._gather("a step measuring memory")]

    def pingpong(self, sizes: list[int], repeats: int = 40) -> dict[int, float]:
        """Lower-quartile one-way seconds of a message of each size (bytes) from device 0 to
        device 1 and back, halved: what the simulator's link latency and bandwidth model."""
        if self.devices < 2:
            raise ExecutionError("measuring a link needs two devices")
        for r in range(self.devices):
            self._send(r, ("pingpong", (list(sizes), repeats)))
        return self._gather("measuring links")[0]

    def transfer_cpu(self, nbytes: int = 8 << 20, messages: int = 60,
                     repeats: int = 5) -> tuple[float, float]:
        """Seconds of a core's time per byte and per message that a worker spends sending
        or receiving (gloo copies messages through sockets on the workers' own cores):
        device 0 runs a chain of matmuls alone, while device 1 sends it ``nbytes`` in 16
        messages at once or ``messages`` messages of 1 KiB one at a time (spread over the
        chain, as the engine sends values between ops), and while it sends them to device
        1 the same way; the chain's extra time over the bytes (large messages) and over
        the messages (small ones, less their bytes), medians over ``repeats`` rounds of
        both directions (0 where below 0)."""
        if self.devices < 2:
            raise ExecutionError("measuring transfers needs two devices")
        for r in range(self.devices):
            self._send(r, ("transfer_cpu", (nbytes, messages, repeats)))
        return self._gather("measuring transfers")[0]

    def state(self, prog: Program | None = None) -> dict[int, torch.Tensor]:
        """The state tensors (parameters and buffers) of ``prog`` (default: the last
        program loaded) as the devices hold them now."""
        key = self._key(prog, False)
        if key is None:
            raise ExecutionError("the program is not loaded in this pool")
        for r in range(self.devices):
            self._send(r, ("state", key))
        out: dict[int, torch.Tensor] = {}
        for part in self._gather("reading state"):
            out.update(part)
        return out

    def close(self, force: bool = False) -> None:
        for r, p in enumerate(getattr(self, "_procs", [])):
            if p.is_alive() and not force:
                try:
                    self._conns[r].send(("close", None))
                except (BrokenPipeError, OSError):
                    pass
        for p in getattr(self, "_procs", []):
            p.join(timeout=0 if force else 5)
            if p.is_alive():
                p.kill()
                p.join()
        self._procs = []
        self._loaded = {}  # a closed pool holds nothing: unloading from it does nothing
        if hasattr(self, "_dir"):
            self._dir.cleanup()

    def __enter__(self) -> CPUWorkers:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        # interrupted: the workers may be inside a collective and not read "close"
        self.close(force=kind is not None and issubclass(kind, KeyboardInterrupt))

    def __del__(self) -> None:
        if getattr(self, "_procs", None):
            self.close(force=True)


def _share(prog: Program, rank: int) -> dict:
    """What device ``rank`` needs of ``prog``: plain data, cheap to send."""
    return {
        "instrs": prog.local(rank),
        "sends": [t for t in prog.transfers if t.src == rank],
        "recvs": [t for t in prog.transfers if t.dst == rank],
        "specs": {t.node: prog.specs[t.node] for t in prog.transfers if t.dst == rank},
        # copies: tensors cross processes in shared memory, and the worker updates them
        "feeds": {n: v.clone() if isinstance(v, torch.Tensor) else v
                  for n, (d, v) in prog.feeds.items() if d == rank},
        "state": [n for n in prog.state if prog.feeds[n][0] == rank],
        "outputs": sorted({n for n in refs(prog.outputs) if prog.placement[n] == rank}),
        "fifo": prog.fifo,
    }


# -- the worker process ---------------------------------------------------------------------
@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while a worker is started: a spawned process inherits the ignored
    disposition across ``exec``, and Python then installs no ``KeyboardInterrupt`` handler,
    so a Ctrl-C at the terminal (sent to the whole process group) reaches the parent
    alone, which closes its workers; none prints a traceback of where it was (importing
    torch, inside a collective). Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _die_with_parent(parent: int) -> None:
    """Have the kernel end this worker (quietly, by SIGTERM) when its parent dies, however
    it dies (Linux only); a parent already gone ends it now."""
    for sig in (signal.SIGTERM, signal.SIGHUP):  # their default: end without a word
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        pr_set_pdeathsig = 1  # linux/prctl.h
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


class _ParentGone(BaseException):
    """The parent closed its end of the pipe: the worker ends without a word."""


def _reply(conn: Any, msg: Any) -> None:
    try:
        conn.send(msg)
    except (BrokenPipeError, EOFError, OSError):
        raise _ParentGone from None


def _keep_freed_memory() -> None:
    """Have glibc keep the blocks a worker frees for its next allocations.

    By default glibc maps a large block (from 128 KiB, a threshold it raises as blocks
    are freed) straight from the kernel and unmaps it when freed, and returns the top of
    its heap once 128 KiB are free: the next tensor of that size then faults in every
    page afresh. How often that happens depended on the plan: RNNLM-2's gradient sums
    (4 MiB each) took twice their profiled time in one plan's steps, 65 ms against 33
    (docs/execution.md). With blocks up to 32 MiB (glibc's largest threshold) taken from
    the heap and 1 GiB of free heap kept, a worker reuses its memory as a caching
    allocator does; its footprint stays at its peak. Nothing changes where the library is
    not glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 1 << 30)


def _worker(rank: int, world: int, store: str, conn: Any, cores: list[int], timeout: float,
            parent: int | None = None) -> None:
    if parent is not None:
        _die_with_parent(parent)
    try:
        _serve(rank, world, store, conn, cores, timeout)
    except _ParentGone:  # the parent ended (interrupted, killed): nobody to report to
        pass


def _serve(rank: int, world: int, store: str, conn: Any, cores: list[int], timeout: float) -> None:
    try:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)
        _keep_freed_memory()
        torch.set_num_threads(len(cores))
        # The thread that reports arrived values needs the GIL, which the op loop holds
        # between ops; at Python's default switch interval (5 ms) an arrival waited that
        # long to be seen, far longer than the transfer itself.
        sys.setswitchinterval(_SWITCH_INTERVAL)
        import torch.distributed as dist

        import graphopt.frontends.torch  # noqa: F401  (registers graphopt's update ops)

        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout))
        _reply(conn, ("ok", None))
    except Exception:
        _reply(conn, ("error", traceback.format_exc(limit=3).strip().splitlines()[-1]))
        return
    loaded: dict[int, _Device] = {}
    while True:
        try:
            cmd, arg = conn.recv()
        except (EOFError, OSError):
            break
        try:
            if cmd == "close":
                break
            if cmd == "load":
                key, share = arg
                loaded.pop(key, None)  # free the old state first
                loaded[key] = _Device(rank, share, timeout)
                _reply(conn, ("ok", None))
            elif cmd == "unload":
                loaded.pop(arg, None)
                _reply(conn, ("ok", None))
            elif cmd == "step":
                key, seed, idle, memory = arg
                _reply(conn, ("ok", loaded[key].step(seed, idle, memory)))
            elif cmd == "pingpong":
                _reply(conn, ("ok", _pingpong(rank, *arg)))
            elif cmd == "transfer_cpu":
                _reply(conn, ("ok", _transfer_cpu(rank, *arg)))
            elif cmd == "state":
                device = loaded[arg]
                _reply(conn, ("ok", {n: device.values[n].clone() for n in device.share["state"]}))
        except Exception as err:  # reported to the parent as one line, naming the op
            _reply(conn, ("error", one_line(err)))
    try:
        dist.destroy_process_group()
    except Exception:  # the group may already be broken by a dead peer
        pass


class _Device:
    """One device's state between steps: its ops, its tensors, its receive buffers."""

    def __init__(self, rank: int, share: dict, timeout: float):
        self.rank = rank
        self.share = share
        self.timeout = timeout
        self.instrs = share["instrs"]
        self.values: dict[int, Any] = dict(share["feeds"])
        self.buffers = {t.tag: empty_like_spec(share["specs"][t.node]) for t in share["recvs"]}
        self.local_users: dict[int, list[int]] = {}
        self.recv_users: dict[int, list[int]] = {}
        for k, ins in enumerate(self.instrs):
            for d in ins.deps:
                self.local_users.setdefault(d, []).append(k)
            for tag in ins.recvs:
                self.recv_users.setdefault(tag, []).append(k)
        self.incoming = {t.tag: t for t in share["recvs"]}
        # Receives are awaited in the order their sends can be posted: by the FX index of
        # the last op the send waits for (the value's producer, or a writer it follows).
        # That is about the order they arrive in, so one late value seldom holds back
        # the report of those behind it; and every op a send waits for comes before,
        # in FX order, every consumer of a value queued behind it, so no wait can close
        # a cycle.
        self.recv_order = sorted(self.incoming, key=lambda tag: (
            max([self.incoming[tag].node, *self.incoming[tag].after]), tag))
        self.sends_of: dict[int, list[Transfer]] = {}
        self.after_of: dict[int, list[Transfer]] = {}
        for t in share["sends"]:
            self.sends_of.setdefault(t.node, []).append(t)
            for w in t.after:
                self.after_of.setdefault(w, []).append(t)
        # A value is dropped once its last local reader ran and its sends were posted (a
        # posted send holds its own reference), as the simulator frees memory; state,
        # inputs and outputs stay.
        self.reads = [sorted(set(refs((ins.args, ins.kwargs)))) for ins in self.instrs]
        self.uses: dict[int, int] = {}
        for nodes in self.reads:
            for n in nodes:
                self.uses[n] = self.uses.get(n, 0) + 1
        for t in share["sends"]:
            self.uses[t.node] = self.uses.get(t.node, 0) + 1
        self.keep = set(share["feeds"]) | set(share["outputs"])

    def step(self, seed: int, idle: tuple[int, float] | None = None, memory: bool = False
             ) -> tuple[dict[int, Any], list[tuple], int | None]:
        """Outputs, events, and with ``memory`` the step's peak memory (bytes)."""
        import torch.distributed as dist

        instrs, events = self.instrs, []
        uses = dict(self.uses)
        waiting = [len(ins.deps) + len(ins.recvs) for ins in instrs]
        blocked = {t.tag: len(t.after) for t in self.share["sends"]}
        sent: dict[int, Any] = {}  # tag -> (works, tensors) of posted sends
        exists = set(self.share["feeds"])
        # The step's receives are posted, and their threads started, before the barrier
        # that starts the step: set-up that a training loop does ahead of its step, and
        # that on a worker of one core took 0.5 ms, at times 4 ms, at the step's start.
        recvs = {t.tag: [dist.irecv(b, src=t.src, tag=t.tag) for b in self.buffers[t.tag]]
                 for t in self.share["recvs"]}
        arrived: queue.SimpleQueue = queue.SimpleQueue()
        order, lock = iter(self.recv_order), threading.Lock()
        for _ in range(min(_RECEIVERS, len(recvs))):
            threading.Thread(target=_receive, args=(recvs, order, lock, arrived), daemon=True).start()
        meter = AllocationPeak([self.values, self.buffers]) if memory else None
        dist.barrier()
        if meter is not None:
            meter.__enter__()
        start = time.perf_counter()
        seq = iter(range(1 << 62))  # readiness order, the tie-break of a plan without priorities
        fifo = self.share["fifo"]

        def key(k: int) -> tuple[float, int, int]:
            return (-instrs[k].priority, next(seq) if fifo else instrs[k].node, k)

        ready = [key(k) for k, w in enumerate(waiting) if not w]
        heapq.heapify(ready)

        def release(node: int) -> None:
            uses[node] -= 1
            if not uses[node] and node not in self.keep:
                del self.values[node]

        def post(t: Transfer) -> None:
            tensors = pack(self.values[t.node])
            sent[t.tag] = ([dist.isend(x, dst=t.dst, tag=t.tag) for x in tensors], tensors)
            release(t.node)

        def receive(tag: int | None, when: Any) -> None:
            if tag is None:
                raise when
            t = self.incoming[tag]
            self.values[t.node] = unpack(self.share["specs"][t.node], self.buffers[tag])
            events.append(("recv", t.name, when, when, (tag, t.src)))
            for u in self.recv_users.get(tag, ()):
                waiting[u] -= 1
                if not waiting[u]:
                    heapq.heappush(ready, key(u))

        for node in sorted(exists):
            for t in self.sends_of.get(node, ()):
                if not blocked[t.tag]:
                    post(t)
        done = 0
        while done < len(instrs):
            while not arrived.empty():
                receive(*arrived.get_nowait())
            if not ready:
                try:
                    receive(*arrived.get(timeout=self.timeout))
                except queue.Empty:
                    raise TimeoutError(f"no input arrived for {self.timeout:g} s") from None
                continue
            k = heapq.heappop(ready)[2]
            ins = instrs[k]
            node = ins.node
            for tag in ins.wait_sends:  # an in-place write waits for sends of the old value
                _wait_once(sent[tag][0])
            if idle and done % idle[0] == idle[0] - 1:
                time.sleep(idle[1])
            t0 = time.perf_counter()
            self.values[node] = run_op(ins, self.values, seed)
            events.append(("op", ins.name, t0, time.perf_counter(), None))
            done += 1
            exists.add(node)
            for p in self.reads[k]:
                release(p)
            if node not in uses and node not in self.keep:  # nobody reads it
                del self.values[node]
            for u in self.local_users.get(node, ()):
                waiting[u] -= 1
                if not waiting[u]:
                    heapq.heappush(ready, key(u))
            for t in self.sends_of.get(node, ()):
                if not blocked[t.tag]:
                    post(t)
            for t in self.after_of.get(node, ()):
                blocked[t.tag] -= 1
                if not blocked[t.tag] and t.node in exists:
                    post(t)
        for works, _ in sent.values():
            _wait_once(works)
        end = time.perf_counter()
        if meter is not None:
            meter.__exit__()
        events.append(("step", "step", start, end, None))
        outs = {n: _clone(self.values[n]) for n in self.share["outputs"]}
        self.values = {n: self.values[n] for n in self.share["feeds"]}  # state was updated in place
        return outs, events, meter and meter.peak


def _pingpong(rank: int, sizes: list[int], repeats: int) -> dict[int, float] | None:
    import statistics

    import torch.distributed as dist

    if rank > 1:
        return None
    out = {}
    for size in sizes:
        buf = torch.zeros(max(size // 4, 1))
        times = []
        for _ in range(repeats + 2):  # two warm-up round trips
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, dst=1)
                dist.recv(buf, src=1)
            else:
                dist.recv(buf, src=0)
                dist.send(buf, dst=0)
            times.append((time.perf_counter() - t0) / 2)
        # the lower quartile: a shared machine's other work only ever adds time
        out[size] = statistics.quantiles(times[2:], n=4)[0]
    return out if rank == 0 else None


#: Steps of the chain of matmuls that the transfer measurements time (~50 ms in all).
_CHAIN = 60


def _transfer_cpu(rank: int, nbytes: int, messages: int, repeats: int
                  ) -> tuple[float, float] | None:
    import statistics

    import torch.distributed as dist

    # Devices 0 and 1 measure; any others only join the barriers and the broadcast.
    sets = {"large": [torch.zeros(nbytes // 4 // 16) for _ in range(16)],
            "small": [torch.zeros(256) for _ in range(messages)]}
    per_step = -(-messages // _CHAIN)
    x, w = torch.randn(256, 256), torch.randn(256, 256)
    pace = torch.zeros(1, dtype=torch.float64)  # seconds per step of device 0's chain alone
    extra: dict[str, list[float]] = {"large": [], "small": []}
    for _ in range(repeats + 1):  # one warm-up round
        for size, pieces in sets.items():
            # Small messages go one at a time, spread over the chain, as the engine posts a
            # value after the op that made it: each then pays the wake-ups and hand-overs
            # that a burst shares (2-3x the cost per message of a burst, measured here).
            spread = size == "small"
            chain = {}
            for mode in ("alone", "receive", "send"):
                dist.barrier()
                sender = {"alone": -1, "receive": 1, "send": 0}[mode]
                start = time.perf_counter()  # posting is the worker's work too
                works = []
                if rank < 2 and sender == 1 - rank:
                    works = [dist.irecv(p, src=1 - rank, tag=i) for i, p in enumerate(pieces)]
                elif rank < 2 and sender == rank and not spread:
                    works = [dist.isend(p, dst=1 - rank, tag=i) for i, p in enumerate(pieces)]
                if rank == 0:
                    y = x
                    for j in range(_CHAIN):  # longer than the transfers
                        y = torch.tanh(y @ w)
                        if sender == 0 and spread:
                            works += [dist.isend(pieces[i], dst=1, tag=i) for i in
                                      range(j * per_step, min((j + 1) * per_step, len(pieces)))]
                    chain[mode] = time.perf_counter() - start
                elif rank == 1 and sender == 1 and spread:
                    for i, p in enumerate(pieces):
                        works.append(dist.isend(p, dst=0, tag=i))
                        if (i + 1) % per_step == 0:
                            time.sleep(float(pace))
                _wait_once(works)
                if mode == "alone":
                    pace.fill_(chain["alone"] / _CHAIN if rank == 0 else 0.0)
                    dist.broadcast(pace, src=0)
            extra[size] += [chain[m] - chain["alone"] for m in ("receive", "send")] if rank == 0 else []
    if rank:
        return None
    per_byte = max(0.0, statistics.median(extra["large"][2:]) / nbytes)
    small = statistics.median(extra["small"][2:]) - per_byte * messages * 1024
    return per_byte, max(0.0, small / messages)


def _receive(recvs: dict[int, list], order: Iterator[int], lock: threading.Lock,
             arrived: queue.SimpleQueue) -> None:
    """Take the next receive of ``order`` (shared by the receiving threads), wait for it
    and report it. gloo's receives say they are complete only to ``wait``, so threads
    wait while the worker computes; with several, a value that comes late holds back
    the report of at most the values its thread would take next."""
    while True:
        with lock:
            tag = next(order, None)
        if tag is None:
            return
        try:
            for w in recvs[tag]:
                w.wait()
        except Exception as err:  # a dead peer or a timeout: handed to the worker's loop
            arrived.put((None, err))
            return
        arrived.put((tag, time.perf_counter()))


def _wait_once(works: list) -> None:
    """Wait for sends and forget them: gloo counts completions, so a second ``wait`` on
    a finished send blocks for a send that never comes."""
    while works:
        works.pop().wait()


def _clone(value: Any) -> Any:
    return torch.utils._pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, value)


