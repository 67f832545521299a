"""Calibrating the simulator on this machine's devices: measured links, per-op dispatch,
and the time of every op of a program as the engine runs it.

The simulator predicts a plan from a cluster file and per-op costs. Here both are
measured on the devices :mod:`graphopt.exec` runs on (worker processes pinned to
their cores), never fitted to the plans a benchmark reports:

- links: latency through the engine (a chain of tiny ops that changes device every
  few ops: step time less the ops, per change), bandwidth from ping-pong between two
  workers (the extra time of a 4 MiB message over a 4-byte one);
- dispatch: the engine's own cost per op outside the op (its ready queue, its
  bookkeeping), from a chain of tiny ops on one worker: (step - sum of op times) / ops;
  :func:`engine_problem` measures a program's own the same way, on its own ops;
- compute: each op of a program timed on one worker as the engine runs it, kept as a
  :class:`~graphopt.cost.profile.Profile` by op signature;
- sharing: the workers share this machine's caches, memory bandwidth and (with more
  workers than cores) cores, so an op may run slower while the others compute too: a
  program on one worker alone, then on every worker at once; the cluster's
  ``shared_slowdown`` is its ops' time together over alone. :func:`calibrate` measures
  a generic chain of small ops; :func:`engine_problem` a program's own ops;
- transfers' host work: gloo moves a message through a socket, copied by the cores of
  both workers, so a worker computes slower while it sends or receives: a chain of
  matmuls on one worker alone, then while it receives and while it sends 8 MiB in 16
  messages at once, and 60 messages of 1 KiB one at a time, spread over the chain as
  the engine sends values between ops; the extra time per byte is the devices'
  ``transfer_cpu_gbps``, per small message (less its bytes) ``transfer_cpu_us``;
- waking: a worker that waits for a value finds its caches colder when it resumes (on
  this shared machine 15-40 us more op time after sleeps of 30 us to 1 ms, 60-150 us
  after 3 ms, 180-500 us after 10-30 ms), so the ops after a wait run slower than the
  profile says: a program on one worker, then with sleeps of each length of
  :data:`WAKE_SLEEPS` spread over the step; the gaps the sleeps made and the extra op
  time per sleep are the devices' ``wake_cost_us`` pairs (:func:`wake_cost`;
  :func:`calibrate` on its stages of matmuls and elementwise ops, :func:`engine_problem`
  on a program's own ops).
"""

from __future__ import annotations

import datetime
import os
import statistics
import time

import numpy as np
import torch

from graphopt.cost.profile import Profile, _signatures
from graphopt.errors import UsageError
from graphopt.exec.program import compile_program
from graphopt.exec.workers import CPUWorkers, device_cores
from graphopt.frontends.torch import TracedProgram, trace_program
from graphopt.hardware.cluster import CALIBRATED_KIND, Calibration, Cluster
from graphopt.sim.plan import Plan
from graphopt.sim.problem import Problem

__all__ = ["DEVICE_KIND", "WAKE_SLEEPS", "calibrate", "engine_problem", "profile_program",
           "shared_slowdown", "wake_cost"]

#: Sleeps :func:`wake_cost` times a program's ops after: a decade or so apart, from about
#: the shortest wait between two ops to the longest that fits a step several times.
WAKE_SLEEPS = (3e-5, 3e-4, 3e-3, 1e-2)

#: The device kind of calibrated CPU workers; profiles of programs use it too.
DEVICE_KIND = CALIBRATED_KIND
_SIZES = (4, 4 << 10, 64 << 10, 512 << 10, 4 << 20)


class _Chain(torch.nn.Module):
    """``ops`` tiny additions in a row: each costs the engine its dispatch and little else."""

    def __init__(self, ops: int):
        super().__init__()
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.ops):
            x = x + 1
        return x


class _Stages(torch.nn.Module):
    """A chain of about ``ops`` ops in stages ``sigmoid(x @ w + b) * x``: the kinds and
    sizes of a small recurrent model's ops (a matrix product and three elementwise ops
    on a 64 x 256 batch)."""

    def __init__(self, ops: int, width: int = 256):
        super().__init__()
        self.stages = max(1, ops // 4)
        self.w = torch.nn.Parameter(torch.randn(width, width) / width**0.5)
        self.b = torch.nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.stages):
            x = torch.sigmoid(x @ self.w + self.b) * x
        return x


def shared_slowdown(traced: TracedProgram, pool: CPUWorkers, rounds: int = 5) -> float:
    """How much slower ``traced`` runs on a worker of ``pool`` while every worker runs it
    than while one runs it alone: per round, the sum of its op times on worker 0 with
    the program replicated on every worker over the sum alone; the median over rounds.

    The workers share the machine's caches and memory bandwidth, so the figure depends
    on the ops' sizes: measured on a program's own ops, it is that program's. Alone and
    together alternate, so that a load from outside that comes and goes weighs on both.
    A figure below 1 is noise (the workers never help each other): 1.
    """
    return _alone_and_together(traced, pool, rounds)[1]


def _alone_and_together(traced: TracedProgram, pool: CPUWorkers,
                        rounds: int) -> tuple[dict[str, list[float]], float, float]:
    """Every op's times on worker 0 alone, one per round, :func:`shared_slowdown`'s
    figure from the same rounds, and the engine's median time per op alone
    (:func:`_engine_time_per_op`)."""
    prog = compile_program(traced, None, pool.devices)
    for replicate in (False, True):
        pool.load(prog, replicate=replicate)
        pool.step(0, prog, replicate)  # warms the allocator and the op cache
    times: dict[str, list[float]] = {}
    ratios, engine = [], []
    for _ in range(rounds):
        sums = []
        for replicate in (False, True):
            events = pool.step(1, prog, replicate)[1][0]
            ops = [(name, end - start) for kind, name, start, end, _ in events if kind == "op"]
            sums.append(sum(t for _, t in ops))
            if not replicate:
                engine.append(_engine_time_per_op(events))
                for name, t in ops:
                    times.setdefault(name, []).append(t)
        ratios.append(sums[1] / max(sums[0], 1e-12))
    pool.unload(prog)
    return times, max(1.0, statistics.median(ratios)), statistics.median(engine)


def wake_cost(traced: TracedProgram, pool: CPUWorkers, rounds: int = 5,
              idle_per_step: float = 0.05) -> tuple[tuple[float, float], ...]:
    """How much longer ``traced``'s ops take on a worker of ``pool`` after it waited than
    when it ran without pause: ``(idle, extra)`` pairs in seconds, a ``Device.wake_cost``.

    Per round, the program runs on worker 0 without pause, then once per sleep of
    :data:`WAKE_SLEEPS` with sleeps of that length spread evenly over its ops (every 20th
    op at most, and no more than ``idle_per_step`` seconds of sleep in a step, so that
    the longest still fits several times). A pair is the median over rounds of the
    gaps before the ops that followed a sleep (a sleep overshoots: 30 us asked took
    about 96 us here) and of the step's extra op time per sleep. A longer wait never
    costs less than a shorter one (what it evicts, a shorter one evicts in part): the
    extras are made non-decreasing, and 0 where noise gives less than nothing.

    Examples
    --------
    >>> with CPUWorkers(2) as pool:                          # doctest: +SKIP
    ...     cluster = cluster.with_wake_cost(wake_cost(traced, pool))
    """
    prog = compile_program(traced, None, pool.devices)
    pool.load(prog)
    try:
        pool.step(0, prog)  # warms the allocator and the op cache
        ops = sum(1 for e in pool.step(1, prog)[1][0] if e[0] == "op")
        if not ops:
            return ()
        every = [max(1, ops // max(1, min(ops // 20, int(idle_per_step / t)))) for t in WAKE_SLEEPS]
        idle: list[list[float]] = [[] for _ in WAKE_SLEEPS]
        extra: list[list[float]] = [[] for _ in WAKE_SLEEPS]
        for _ in range(rounds):
            base = _op_seconds(pool.step(1, prog)[1][0])
            for i, t in enumerate(WAKE_SLEEPS):
                events = pool.step(1, prog, idle=(every[i], t))[1][0]
                step_start = next(e[2] for e in events if e[0] == "step")
                spans = [(e[2], e[3]) for e in events if e[0] == "op"]
                after = range(every[i] - 1, len(spans), every[i])  # the ops a sleep preceded
                idle[i] += [spans[k][0] - (spans[k - 1][1] if k else step_start) for k in after]
                extra[i].append((_op_seconds(events) - base) / len(after))
    finally:
        pool.unload(prog)
    extras = np.maximum.accumulate(np.maximum([statistics.median(x) for x in extra], 0.0))
    pairs: list[tuple[float, float]] = []
    for i, c in zip([statistics.median(x) for x in idle], extras.tolist()):
        if not pairs or i > pairs[-1][0]:  # idle times must increase (they are decades apart)
            pairs.append((i, c))
    return tuple(pairs)


def _op_seconds(events: list[tuple]) -> float:
    """The sum of the op times in one worker's events."""
    return sum(e[3] - e[2] for e in events if e[0] == "op")


def _engine_time_per_op(events: list[tuple]) -> float:
    """The engine's own time per op in one worker's step that ran every op alone: the
    step's span less its ops' times, per op (its ready queue and bookkeeping)."""
    ops = sum(1 for e in events if e[0] == "op")
    step = next(e for e in events if e[0] == "step")
    return (step[3] - step[2] - _op_seconds(events)) / max(ops, 1)


def _bandwidth(pingpong: dict[int, float]) -> float:
    """The extra bytes of the largest message over its extra time. A least-squares
    slope swings with one noisy size on a shared machine; the end points do not."""
    small, large = min(pingpong), max(pingpong)
    return (large - small) / max(pingpong[large] - pingpong[small], 1e-9)


def _rates(threads: int) -> tuple[float, float]:
    """FLOP/s of a float32 matmul and bytes/s of a copy, with a worker's thread count."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        x = torch.randn(4 << 20)
        mm, cp = [], []
        for _ in range(7):
            start = time.perf_counter()
            a @ b
            mm.append(time.perf_counter() - start)
            start = time.perf_counter()
            x.clone()
            cp.append(time.perf_counter() - start)
        return 2 * 512**3 / statistics.median(mm), 2 * x.numel() * 4 / statistics.median(cp)
    finally:
        torch.set_num_threads(before)


#: Ops between two device changes of the chain that measures latency through the engine.
_HOP_EVERY = 8


def _hop_latency(pool: CPUWorkers, chain: TracedProgram, steps: int) -> float:
    """Seconds a value takes from one device to the next through the engine: the same
    chain of tiny ops moving between devices 0 and 1 every :data:`_HOP_EVERY` ops,
    step time less the ops' own time, per hop.

    It holds what a ping-pong of bare messages leaves out and a plan pays at every
    device change: the receiving thread, the hand-over to the worker's loop, and waking
    a core that idled while it waited (on a virtual machine, tens to hundreds of us).
    """
    n = chain.graph.num_nodes
    place = np.array([(i // _HOP_EVERY) % 2 for i in range(n)])
    prog = compile_program(chain, Plan(placement=place), pool.devices)
    pool.load(prog)
    per_hop = []
    for step in range(steps + 1):
        _, events = pool.step(step)
        spans = [e for ev in events for e in ev if e[0] == "step"]
        busy = sum(e[3] - e[2] for ev in events for e in ev if e[0] == "op")
        if step:
            span = max(e[3] for e in spans) - min(e[2] for e in spans)
            per_hop.append((span - busy) / len(prog.transfers))
    pool.unload(prog)
    return statistics.median(per_hop)


def calibrate(devices: int = 2, timeout: float = 120.0, chain_ops: int = 300,
              steps: int = 7) -> Cluster:
    """Measure ``devices`` CPU workers of this machine: links, the engine's dispatch,
    compute rates, and how much the workers slow each other down (the module's
    docstring says how). ``chain_ops`` is the length of each measured chain of ops.

    Returns the cluster of those workers, what was measured as its
    :attr:`~graphopt.hardware.Cluster.calibration`.

    Examples
    --------
    >>> cluster = calibrate(2)                          # doctest: +SKIP
    >>> save_cluster(cluster, "cluster.toml")           # doctest: +SKIP
    """
    if devices < 1:
        raise UsageError(f"--devices cpu:{devices}: expected at least one device")
    chain = trace_program(_Chain(chain_ops).eval(), (torch.zeros(1),), training=False)
    with CPUWorkers(devices, timeout=timeout) as pool:
        pingpong = pool.pingpong(list(_SIZES)) if devices > 1 else {}
        pool.load(compile_program(chain, None, devices))
        # the first step warms the allocator and the op cache
        per_op = [_engine_time_per_op(pool.step(step)[1][0]) for step in range(steps + 1)][1:]
        slowdown, wake = 1.0, ()
        if devices > 1:
            stages = trace_program(_Stages(chain_ops).eval(), (torch.randn(64, 256),), training=False)
            slowdown = shared_slowdown(stages, pool, steps)
            wake = wake_cost(stages, pool, steps)
        latency = _hop_latency(pool, chain, steps) if devices > 1 else 0.0
        xcpu, xmsg = pool.transfer_cpu() if devices > 1 else (0.0, 0.0)
    bandwidth = _bandwidth(pingpong) if pingpong else float("inf")
    threads = len(device_cores(devices)[0])
    flops, copy = _rates(threads)
    cal = Calibration(devices, threads, latency, bandwidth, statistics.median(per_op), flops, copy,
                      pingpong, slowdown, xcpu, xmsg, wake, datetime.date.today().isoformat())
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / devices
    return cal.cluster(memory, _meta(cal))


def _meta(cal: Calibration) -> dict:
    """A calibrated cluster's description and sources: what was measured, and how."""
    sizes = ", ".join(f"{s} B: {t * 1e6:.1f} us" for s, t in sorted(cal.pingpong.items()))
    return {"description": f"This machine as graphopt.exec runs it: {cal.devices} worker "
                           f"process(es), {cal.cores_per_device} core(s) each",
            "sources": [
                f"graphopt calibrate, {cal.date}: latency through the engine from a chain of "
                f"tiny ops changing device every {_HOP_EVERY} ops; bandwidth from ping-pong "
                f"between two workers ({sizes}); dispatch from a chain of tiny ops on one worker "
                "(graphopt run and optimize measure each program's own); a float32 matmul and "
                "a copy for ops without a measured profile; shared_slowdown from a chain of "
                "small ops on one worker alone, then on every worker at once (graphopt run and "
                "optimize measure each program's own); transfer_cpu_gbps and transfer_cpu_us "
                "from a chain of matmuls on one worker alone, then while it sends or receives "
                "large messages at once and small ones one at a time; wake_cost_us from the "
                "shared_slowdown program on one worker, without pause and with sleeps of 30 us "
                "to 10 ms (graphopt run and optimize measure each program's own)"]}


def profile_program(traced: TracedProgram, devices: int = 2, steps: int = 5,
                    timeout: float = 120.0, pool: CPUWorkers | None = None) -> Profile:
    """The time of every op of ``traced`` as the engine runs it on one worker (of a pool
    of ``devices``, so it has a worker's cores), the mean over ``steps`` after a warm-up
    and over the ops of one signature, as a profile of device kind :data:`DEVICE_KIND`."""
    return _profile(traced, _run_alone(traced, devices, steps, timeout, pool)[0])


def _run_alone(traced: TracedProgram, devices: int, steps: int, timeout: float,
               pool: CPUWorkers | None) -> tuple[dict[str, list[float]], float]:
    """Every op's times on one worker over ``steps`` steps after a warm-up, and the
    engine's median time per op (:func:`_engine_time_per_op`)."""
    prog = compile_program(traced, None, devices)
    own = pool is None
    pool = pool or CPUWorkers(devices, timeout=timeout)
    try:
        pool.load(prog)
        times: dict[str, list[float]] = {}
        engine = []
        for step in range(steps + 1):
            _, events = pool.step(step)
            if step:
                engine.append(_engine_time_per_op(events[0]))
                for kind, name, start, end, _ in events[0]:
                    if kind == "op":
                        times.setdefault(name, []).append(end - start)
    finally:
        if own:
            pool.close()
        else:
            pool.unload(prog)
    return times, statistics.median(engine)


def _profile(traced: TracedProgram, times: dict[str, list[float]]) -> Profile:
    """The profile of ``traced`` from each FX op's measured times on one worker."""
    graph = traced.graph
    index = graph.index
    by_signature: dict = {}
    signatures = _signatures(graph)
    # Means, not medians: the simulator sums op times, and op times are skewed right (a
    # cold cache, an interrupt), so medians undercount the sum. Measured on GNMT-2 at CPU
    # size (a scratch script): the median over ops of a signature of each op's median
    # came to 101 ms a step, the means to 125 ms, and the ops of later steps took 117-123 ms.
    for fx_name, samples in times.items():
        node = index.get(traced.ir_names.get(fx_name, ""))
        if node is not None:
            by_signature.setdefault(signatures[node], []).append(statistics.fmean(samples))
    entries = {sig: statistics.fmean(v) for sig, v in by_signature.items()}
    return Profile(DEVICE_KIND, entries, {"source": graph.name, "how": "graphopt.exec, one worker"})


def engine_problem(traced: TracedProgram, cluster: Cluster, pool: CPUWorkers | None = None) -> Problem:
    """The simulator's problem for ``traced`` as ``graphopt.exec`` runs it on a cluster
    ``graphopt calibrate`` measured: every op's time on one worker as the engine runs it
    (:func:`profile_program`), the engine's own time per op in the same steps as the
    devices' dispatch (in place of the calibration's chain of tiny ops: a program's ops
    have more inputs and readers to keep, 2-3 us an op against the chain's 1.5 on this
    machine), with several workers the program's own :func:`shared_slowdown` (its steps
    alone time the ops too) and :func:`wake_cost`, and no fusion (the engine runs op by
    op; kernels of one op, so a plan's fusion changes nothing). Commands reach it through
    :func:`graphopt.exec.api.program_problem`, which calls it for a calibrated cluster.

    Examples
    --------
    >>> prob = engine_problem(traced, load_cluster("cluster.toml"))  # doctest: +SKIP
    >>> simulate(prob, plan).step_time                               # doctest: +SKIP
    """
    devices = cluster.num_devices
    slowdown = wake = None
    own = pool is None
    pool = pool or CPUWorkers(devices)
    try:
        if devices > 1:  # the steps alone time the ops and are the slowdown's reference
            times, slowdown, engine = _alone_and_together(traced, pool, rounds=5)
            wake = wake_cost(traced, pool)
        else:
            times, engine = _run_alone(traced, devices, 5, 120.0, pool)
    finally:
        if own:
            pool.close()
    return Problem(traced.graph, cluster.with_program_figures(engine, slowdown, wake),
                   profile=_profile(traced, times), max_fusion_size=1)
