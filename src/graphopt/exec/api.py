"""``apply``: a plan of a traced PyTorch program, ready to run for real."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphopt.errors import BadFileError, ExecutionError, UsageError
from graphopt.exec.program import Program, compile_program
from graphopt.exec.runner import AllocationPeak, materialize, pack_copies, run_inprocess
from graphopt.exec.workers import CPUWorkers
from graphopt.frontends.source import Source
from graphopt.frontends.torch import TracedProgram, trace_program
from graphopt._files import atomic_write
from graphopt.hardware import Cluster
from graphopt.sim import Plan, Problem

__all__ = ["PlacedProgram", "StepResult", "apply", "apply_traced", "default_cluster", "measure_plans",
           "parse_devices", "program_problem", "save_trace", "simulated_peak_memory", "trace_source"]


def trace_source(spec: str) -> TracedProgram:
    """The PyTorch program a graph source names (:meth:`Source.program`): the training
    step of a model (``zoo:NAME``, ``zoo:NAME-quick`` at CPU size, ``hf:MODEL_TYPE``,
    ``pipe:NAME``, ``py:FILE.py:FACTORY``) or a ``torch.export`` file's forward program.

    The program and its IR graph come from one trace, so a plan made for
    ``graphopt optimize SOURCE`` fits it node for node.
    """
    source = Source.parse(spec)
    if not source.runs:
        raise UsageError(f"graph {spec!r}: only PyTorch programs run for real: zoo:NAME (e.g. "
                         "zoo:rnnlm-2-quick), hf:MODEL_TYPE, pipe:NAME, py:FILE.py:FACTORY "
                         "or a torch.export .pt2 file")
    return source.program()


#: The op times ``graphopt optimize --out DIR`` timed a program with on a calibrated
#: cluster, kept beside its plans (a profile file whose ``meta`` also holds the program's
#: own dispatch, shared slowdown and wake costs, the graph's fingerprint and the
#: calibration): ``graphopt run --plan DIR/METHOD/plan.json`` reuses them, so that one plan
#: gets one prediction (timing again on a busy machine gave 9.2 ms against 7.35).
PROGRAM_TIMING = "program_timing.json"


def save_program_timing(prob: Problem, traced: TracedProgram, cluster: Cluster,
                        path: str | os.PathLike) -> Path:
    """Write what :func:`program_problem` timed ``traced`` with on the calibrated
    ``cluster`` (``prob``) to ``path``, for :func:`load_program_timing`."""
    from graphopt.cost.profile import Profile
    from graphopt.hardware.cluster import CALIBRATED_KIND

    d = prob.cluster.devices
    host = next((x for x in d if x.host), None)
    profile = getattr(prob, "profile", None)
    if not (profile is None or isinstance(profile, Profile)):  # several: not engine_problem's
        raise BadFileError("a program timing holds one profile")
    meta = {"how": "graphopt.exec, one worker", "program_timing": {
        "graph": {"name": traced.graph.name, "fingerprint": traced.graph.fingerprint()},
        "calibration": _calibration_key(cluster), "profile": profile is not None,
        "dispatch": d[0].dispatch_overhead,
        "shared_slowdown": host.shared_slowdown if host is not None else None,
        "wake_cost": [list(w) for w in d[0].wake_cost]}}
    if profile is None:
        profile = Profile(CALIBRATED_KIND, {})
    return Profile(profile.device_kind, profile.entries, {**profile.meta, **meta}).save(path)


def load_program_timing(path: str | os.PathLike, traced: TracedProgram,
                        cluster: Cluster) -> Problem | None:
    """The problem :func:`save_program_timing` kept in ``path``, or None where there is
    none, or it was timed for another graph (fingerprint) or calibration."""
    from graphopt.cost.profile import Profile

    if not Path(path).is_file():
        return None
    profile = Profile.load(path)
    kept = profile.meta.get("program_timing")
    try:
        if kept["graph"]["fingerprint"] != traced.graph.fingerprint() or \
                kept["calibration"] != _calibration_key(cluster):
            return None
        wake = tuple((float(i), float(c)) for i, c in kept["wake_cost"])
        figures = float(kept["dispatch"]), kept["shared_slowdown"], wake
        if figures[1] is not None:
            figures = figures[0], float(figures[1]), wake
        numbers = [figures[0], *([figures[1]] if figures[1] is not None else []),
                   *(x for w in wake for x in w)]
        if not all(math.isfinite(x) and x >= 0 for x in numbers):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise BadFileError(f"{path}: not a program timing written by graphopt optimize "
                           "(remove it to time the program again)") from None
    return Problem(traced.graph, cluster.with_program_figures(*figures),
                   profile=profile if kept.get("profile") else None, max_fusion_size=1)


def _calibration_key(cluster: Cluster):
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(cluster.calibration))) if cluster.calibration else None


def program_problem(traced: TracedProgram, cluster: Cluster, pool: CPUWorkers | None = None) -> Problem:
    """The simulator's problem for a traced program on ``cluster``: the one entry point of
    ``graphopt run`` and ``graphopt optimize`` (with ``--measure`` or a program source).

    A calibrated cluster (``cluster.calibration``, from ``graphopt calibrate``) is this
    machine's CPU workers: the program is first run on them to time every op as the
    engine runs it, and its own dispatch, shared slowdown and wake costs
    (:func:`graphopt.exec.calibrate.engine_problem`; seconds to minutes, on ``pool`` when
    given). Any other cluster prices the ops by its roofline, as ``Problem(graph, cluster)``.

    Examples
    --------
    >>> prob = program_problem(trace_source("zoo:rnnlm-2-quick"), load_cluster("cpu:2"))  # doctest: +SKIP
    """
    if cluster.calibration is None:
        return Problem(traced.graph, cluster)
    from graphopt.exec import calibrate  # the module's attribute, so that tests may stand in for it

    return calibrate.engine_problem(traced, cluster, pool)


def simulated_peak_memory(prob: Problem, plan: Plan, devices: str, traced: TracedProgram):
    """The simulator's peak memory per device (bytes) for ``plan`` of ``traced`` as the
    engine runs it on ``devices``: no fusion (it runs op by op), and on CPU worker
    processes every transfer's tensors held for the whole step, with the copy a sender
    packs a strided value, or a value of several tensors, into
    (:meth:`Problem.with_step_buffers <graphopt.sim.Problem.with_step_buffers>`:
    receives are posted when the step starts, sends complete when it ends). What
    :meth:`PlacedProgram.peak_memory` measures stands beside it."""
    import numpy as np

    from graphopt.sim import simulate

    kind, count = parse_devices(devices)
    if kind == "cpu" and count > 1:
        index = {name: i for i, name in enumerate(traced.graph.names.tolist())}
        copies = np.zeros(prob.num_nodes)
        for n in traced.module.graph.nodes:
            if n.name in traced.ir_names and "val" in n.meta:
                copies[index[traced.ir_names[n.name]]] = pack_copies(n.meta["val"])
        prob = prob.with_step_buffers(copies)
    return simulate(prob, plan.replace(fusion=np.zeros(prob.num_nodes))).peak_memory


def parse_devices(spec: str) -> tuple[str, int]:
    """``"cpu:2"`` -> ``("cpu", 2)``; ``"cuda:4"`` -> ``("cuda", 4)``; ``"cpu"`` is one device.
    N is at most :data:`graphopt.exec.workers.MAX_WORKERS` for CPUs (each a process).

    >>> parse_devices("cpu:2")
    ('cpu', 2)
    """
    from graphopt.exec.workers import MAX_WORKERS

    kind, _, count = spec.partition(":")
    # ASCII digits only: str.isdigit() accepts '²', which int() refuses
    if kind not in ("cpu", "cuda") or (count and not (count.isascii() and count.isdigit())) \
            or not 1 <= int(count or 1) <= MAX_WORKERS:
        raise UsageError(f"--devices {spec!r}: expected cpu[:N] or cuda[:N] with N in "
                         f"1..{MAX_WORKERS}")
    n = int(count or 1)
    if kind == "cuda" and n > torch.cuda.device_count():
        raise UsageError(f"--devices {spec!r}: this machine has {torch.cuda.device_count()} CUDA "
                         "device(s)")
    return kind, n


#: The preset whose roofline stands for a GPU, by a part of its name (the H200 is an H100
#: chip with more memory bandwidth than the preset's).
_GPU_PRESETS = (("H100", "h100"), ("H200", "h100"), ("A100", "dgx-a100"), ("V100", "dgx1-v100"),
                ("P100", "p100"), ("K80", "k80"))


def default_cluster(kind: str, count: int) -> str:
    """The cluster a run on ``count`` devices of ``kind`` is simulated on when none is
    given: the ``cpu`` preset, or the preset of this machine's GPU.

    >>> default_cluster("cpu", 2)
    'cpu:2'
    """
    if kind == "cpu":
        return f"cpu:{count}"
    name = torch.cuda.get_device_name(0)
    for part, preset in _GPU_PRESETS:
        if part in name.upper():
            return f"{preset}:{count}"
    raise UsageError(f"--devices {kind}:{count}: no preset for {name!r}; give --cluster "
                     "(a preset or a cluster TOML file)")


@dataclass
class StepResult:
    """One step as it ran.

    Attributes
    ----------
    outputs : Any
        The program's outputs: ``(loss,)`` for a training step, the model's outputs
        for a forward program.
    seconds : float
        Wall time of the step, first op started to last op or transfer ended.
    events : list of tuple
        ``(kind, device, name, start, end)`` on the monotonic clock; kind is ``op``,
        ``recv`` (the arrival of a value on ``device``: start = end) or ``step``.
    """

    outputs: Any
    seconds: float
    events: list[tuple] = field(repr=False)


class PlacedProgram:
    """A traced program compiled for a plan and loaded on its devices.

    Call it to run one step. The devices keep the program's state (parameters,
    buffers, optimizer moments): each training step updates them in place, as a real
    placed training job does. Use it as a context manager, or call :meth:`close`.

    Several placed programs may share one ``pool`` of workers: it holds each of them,
    with its own state, until it is closed (:func:`measure_plans` runs them in turns).
    """

    def __init__(self, traced: TracedProgram, plan: Plan | None, devices: str = "cpu:1",
                 workers: bool | None = None, seed: int = 0, timeout: float = 120.0,
                 pool: CPUWorkers | None = None):
        self.traced = traced
        self.kind, self.devices = parse_devices(devices)
        self.program: Program = compile_program(traced, plan, self.devices)
        self.seed = seed
        self._steps = 0
        use_workers = (self.kind == "cpu" and self.devices > 1) if workers is None else workers
        if use_workers and self.kind != "cpu":
            raise ExecutionError("worker processes are CPU devices; CUDA devices run in this process")
        self._owns_pool = pool is None
        self._pool = (pool or CPUWorkers(self.devices, timeout=timeout)) if use_workers else None
        if self._pool is not None:
            self._pool.load(self.program)
            self._values = None
        else:
            self._values = {n: (d, v.clone() if isinstance(v, torch.Tensor) else v)
                            for n, (d, v) in self.program.feeds.items()}

    def __call__(self) -> StepResult:
        """Run one step (seeded: step ``k`` of seed ``s`` draws the same random numbers on
        every placement)."""
        seed = self.seed * 1_000_003 + self._steps
        self._steps += 1
        if self._pool is not None:
            if not self._pool.holds(self.program):
                self._pool.load(self.program)
            values, per_device = self._pool.step(seed, self.program)
            outputs = materialize(self.program.outputs, values)
        else:
            per_device = [[] for _ in range(self.devices)]
            devs = ([torch.device("cuda", d) for d in range(self.devices)]
                    if self.kind == "cuda" else None)
            outputs, table = run_inprocess(self.program, seed, self._values, devs, per_device)
            self._values = {n: (d, table[n]) for n, (d, _) in self._values.items()}
        events = [(kind, d, name, start, end) for d, evs in enumerate(per_device)
                  for kind, name, start, end, _ in evs]
        ops = [e for e in events if e[0] in ("op", "step")]
        seconds = max(e[4] for e in ops) - min(e[3] for e in ops) if ops else 0.0
        return StepResult(outputs, seconds, events)

    def peak_memory(self) -> list[int]:
        """Run one step and return each device's peak memory in it (bytes), measured from
        the CPU allocator's events: the state, inputs and receive buffers the device held
        when the step began, plus the highest running total of what the step allocated
        and freed (:class:`~graphopt.exec.runner.AllocationPeak`). The step is profiled,
        so slower than a timed one; it is a training step like any other (it counts, and
        updates the state). On CPU: worker processes, or one device in this process. On
        CUDA devices: ``torch.cuda.max_memory_allocated`` of each over the step (CUDA
        values live until the step ends; not run on this project's machines, which have
        no GPU).

        Examples
        --------
        >>> with apply(torch.nn.Linear(4, 2), (torch.randn(3, 4),)) as step:
        ...     len(step.peak_memory())
        1
        """
        if self.kind == "cuda":
            for d in range(self.devices):
                torch.cuda.reset_peak_memory_stats(d)
            self()
            return [torch.cuda.max_memory_allocated(d) for d in range(self.devices)]
        if self._pool is None and self.devices > 1:
            raise ExecutionError(f"peak memory per device is measured on worker processes, or "
                                 f"one device in this process, not cpu:{self.devices} in this "
                                 "process")
        seed = self.seed * 1_000_003 + self._steps
        self._steps += 1
        if self._pool is not None:
            if not self._pool.holds(self.program):
                self._pool.load(self.program)
            return self._pool.peak_memory(seed, self.program)
        state = {n: v for n, (_, v) in self._values.items()}
        with AllocationPeak(state) as meter:
            _, table = run_inprocess(self.program, seed, self._values)
        self._values = {n: (d, table[n]) for n, (d, _) in self._values.items()}
        return [meter.peak]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The state tensors by qualified name, as the devices hold them now."""
        if self._pool is not None:
            values = self._pool.state(self.program)
        else:
            values = {n: v for n, (_, v) in self._values.items()}
        return {name: values[n].cpu() for n, name in self.program.state.items()}

    def measure(self, steps: int = 5, warmup: int = 1) -> dict:
        """Median and spread of the step time over ``steps`` steps after ``warmup``."""
        return measure_plans([self], steps=steps, warmup=warmup)[0]

    def close(self) -> None:
        """Stop the worker processes, or free the program in a pool that was given."""
        if self._pool is not None and self._owns_pool:
            self._pool.close()
        elif self._pool is not None:
            self._pool.unload(self.program)
        self._pool = None

    def __enter__(self) -> PlacedProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def measure_plans(placed: list[PlacedProgram], steps: int = 15, warmup: int = 1,
                  stop: Callable[[], bool] | None = None) -> list[dict]:
    """Step times of several placed programs, measured in turns: ``warmup`` steps of
    each, then ``steps`` rounds in which every program runs one step.

    A shared machine's speed drifts over seconds (other tenants, clocks): one plan
    measured twice, a few seconds apart, gave 180 and 210 ms a step here, more than
    most plans of a model differ. In turns, a drift weighs on every plan alike. The
    programs may share a pool: it holds them all.

    Returns, per program, the median, min and max over its timed steps, their number,
    and the step times. ``stop``, polled between rounds, ends the measuring early: the
    rounds done are returned (none: an empty list).

    Examples
    --------
    >>> with CPUWorkers(2) as pool:                                    # doctest: +SKIP
    ...     a = PlacedProgram(traced, plan_a, "cpu:2", pool=pool)
    ...     b = PlacedProgram(traced, plan_b, "cpu:2", pool=pool)
    ...     ta, tb = measure_plans([a, b], steps=15)
    """
    for p in placed:
        for _ in range(warmup):
            p()
    times: list[list[float]] = [[] for _ in placed]
    for _ in range(steps):
        if stop is not None and stop():
            break
        for i, p in enumerate(placed):
            times[i].append(p().seconds)
    if not times[0]:
        return []
    return [{"median": statistics.median(t), "min": min(t), "max": max(t), "steps": len(t), "times": t}
            for t in times]


def apply(model: torch.nn.Module, example_inputs: tuple, plan: Plan | None = None,
          devices: str = "cpu:1", training: bool = True, optimizer: str = "sgd",
          loss: Callable | None = None, **kwargs: Any) -> PlacedProgram:
    """Trace ``model`` and load its step, placed by ``plan``, on real devices.

    Parameters
    ----------
    model, example_inputs, training, optimizer, loss
        As :func:`graphopt.frontends.torch.from_torch`; ``plan`` is a plan of that
        graph (``apply(...).traced.graph``).
    plan : Plan, optional
        Default: every op on device 0, in FX order.
    devices : str
        ``cpu:N`` (N worker processes, each pinned to its share of this machine's
        cores; one device runs in this process) or ``cuda:N``.
    **kwargs
        ``workers``, ``seed``, ``timeout``, ``pool`` (a running :class:`CPUWorkers`
        to reuse) of :class:`PlacedProgram`.

    Examples
    --------
    >>> import torch
    >>> step = apply(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    >>> r = step()
    >>> r.outputs[0].shape, sorted(step.state_dict())
    (torch.Size([]), ['bias', 'weight'])
    """
    traced = trace_program(model, example_inputs, training, optimizer, loss)
    return PlacedProgram(traced, plan, devices, **kwargs)


def apply_traced(traced: TracedProgram, plan: Plan | None = None, devices: str = "cpu:1",
                 **kwargs: Any) -> PlacedProgram:
    """:func:`apply` for a program already traced (a zoo model, a ``.pt2`` file)."""
    return PlacedProgram(traced, plan, devices, **kwargs)


def save_trace(result: StepResult, path: str | os.PathLike, devices: int) -> Path:
    """A Chrome trace (Perfetto, chrome://tracing) of one real step: one row per device
    with its ops, one row per device for the transfers it received."""
    t0 = min((e[3] for e in result.events), default=0.0)
    produced = {name: end for kind, _, name, _, end in result.events if kind == "op"}
    out = []
    for kind, d, name, start, end in result.events:
        if kind == "step":
            continue
        if kind == "recv":  # from the end of the op that made the value to its arrival
            start = min(produced.get(name, end), end)
        tid = 0 if kind == "op" else 1
        out.append({"name": name if kind == "op" else f"recv {name}", "ph": "X", "pid": d,
                    "tid": tid, "ts": (start - t0) * 1e6, "dur": max(end - start, 0.0) * 1e6,
                    "cat": kind})
    for d in range(devices):
        out.append({"name": "process_name", "ph": "M", "pid": d, "args": {"name": f"device {d}"}})
        out.append({"name": "thread_name", "ph": "M", "pid": d, "tid": 0, "args": {"name": "ops"}})
        out.append({"name": "thread_name", "ph": "M", "pid": d, "tid": 1,
                    "args": {"name": "transfers in"}})
    text = json.dumps({"traceEvents": out, "displayTimeUnit": "ms"})
    atomic_write(path, lambda f: f.write(text.encode()))
    return Path(path)
