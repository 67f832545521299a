"""Pipeline plans run for real: ``torch.distributed.pipelining`` on K CPU processes.

Each chunk of a :class:`~graphopt.sim.pipeline.PipelinePlan` is a run of consecutive
layers of a ``pipe:`` model (:mod:`graphopt.zoo.pipeline`), given to a manual
``PipelineStage`` in the process of its rank (chunk ``c`` of ``K·V`` on rank ``c mod
K``, one chunk a rank but with the interleaved schedule); the processes talk over gloo
on a free localhost port and step under ``ScheduleGPipe``, ``Schedule1F1B`` or
``ScheduleInterleaved1F1B``, each rank updating its own parameters with SGD after the
schedule's step. Several plans of one model (one stage
count) run in the same processes, one step of each in turn, so that a machine whose
speed drifts weighs on all of them alike.

What is measured per plan: the step time (the slowest process's, from a barrier to the
end of the update, median over steps), the throughput (examples per second), the peak
memory of each stage (its parameters and optimizer state plus the highest running total
of what one profiled step allocates and frees, from PyTorch's profiler memory records:
:class:`~graphopt.exec.runner.AllocationPeak`), the CPU seconds each stage's process
spends in a step (``busy``), and the first step's loss, beside the unsplit model's on
the same microbatches.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import socket
import statistics
import time
import traceback
from dataclasses import dataclass

import numpy as np
import torch

from graphopt.errors import ExecutionError, GraphoptError
from graphopt.exec.runner import AllocationPeak
from graphopt.hardware import Cluster
from graphopt.sim import Problem
from graphopt.sim.pipeline import LayerCosts, PipelinePlan, layer_costs
from graphopt.zoo.pipeline import PipelineModel, build_pipeline_model

__all__ = ["LayerProfile", "PipelineMeasure", "check_microbatches", "measure_pipelines", "pipeline_available",
           "pipeline_problem", "profile_layers", "reference_loss",
           "runtime_overhead", "stage_cluster",
           "trace_microbatch"]


@dataclass
class PipelineMeasure:
    """One plan, measured.

    Attributes
    ----------
    plan : PipelinePlan
    step_times : list of float
        Seconds of each timed step (the slowest stage's).
    median : float
        Their median.
    throughput : float
        Examples per second at the median step.
    memory : list of int
        Peak bytes of each stage.
    loss : float
        The first step's loss, the mean over its microbatches.
    busy : list of float
        CPU seconds each stage's process spends in a step (median): its compute, sends
        and receives, without the time it waits. Beside the step it tells a stage that
        computes from one that waits (for a neighbour, or for a core).
    """

    plan: PipelinePlan
    step_times: list[float]
    median: float
    throughput: float
    memory: list[int]
    loss: float
    busy: list[float]


def pipeline_available() -> bool:
    """Whether this PyTorch has ``torch.distributed.pipelining`` and gloo."""
    try:
        import torch.distributed as dist
        from torch.distributed.pipelining import PipelineStage  # noqa: F401
    except ImportError:
        return False
    return dist.is_available() and dist.is_gloo_available()


def check_microbatches(model: PipelineModel, microbatches: int) -> None:
    """Refuse a microbatch count that does not divide the batch (one-line error)."""
    if microbatches < 1:
        raise GraphoptError(f"--microbatches {microbatches}: give at least 1")
    if model.batch % microbatches:
        raise GraphoptError(f"--microbatches {microbatches} does not divide {model.name}'s batch "
                            f"of {model.batch} (set its batch with ':batch=N')")


def trace_microbatch(model: PipelineModel, microbatches: int):
    """The traced training step (forward, loss, backward, SGD update) of one microbatch
    of ``model`` through ``nn.Sequential(*layers)``."""
    from graphopt.frontends.torch import trace_program

    check_microbatches(model, microbatches)
    size = model.batch // microbatches
    x, y = model.inputs[:size], model.target[:size]
    return trace_program(model.sequential(), (x,), training=True,
                         loss=lambda out: model.loss(out, y), name=model.name)


def pipeline_problem(model: PipelineModel, microbatches: int, cluster: Cluster,
                     profile: bool = False) -> tuple[Problem, LayerCosts]:
    """The simulator's problem of one microbatch's training step on ``cluster``, and the
    cost of each layer (:func:`~graphopt.sim.pipeline.layer_costs`).

    With ``profile``, each layer's compute and update times are measured on this machine
    (:func:`profile_layers`, the same on every device) instead of priced by the
    cluster's roofline, and the activations it keeps are what autograd saves; weights,
    workspaces and transfers still come from the graph.
    """
    from graphopt.exec.export import forward_ops

    traced = trace_microbatch(model, microbatches)
    prob = Problem(traced.graph, cluster)
    costs = layer_costs(prob, forward_ops(traced))
    if profile:
        prof = profile_layers(model, microbatches)
        d = prob.num_devices
        costs = dataclasses.replace(costs, time=np.repeat(prof.time[:, None], d, 1),
                                    update=np.repeat(prof.update[:, None], d, 1),
                                    activations=prof.saved)
    return prob, costs


@dataclass(frozen=True)
class LayerProfile:
    """Each layer of a ``pipe:`` model measured on one microbatch (:func:`profile_layers`).

    Attributes
    ----------
    time, update : float64 (L,)
        Seconds of its forward and backward, and of its SGD update (once per step).
    saved : float64 (L,)
        Bytes autograd keeps from its forward for its backward: the tensors its ops save
        (each storage once, in the first layer that saves it; parameters not counted).
    """

    time: np.ndarray
    update: np.ndarray
    saved: np.ndarray


def profile_layers(model: PipelineModel, microbatches: int, reps: int = 5,
                   threads: int = 1) -> LayerProfile:
    """Each layer of ``model`` on one microbatch, measured in this process with
    ``threads`` intra-op threads, as a stage's process runs it.

    Per layer, the forward of the microbatch's input to it and the backward of its output
    (the loss and its gradient with the last layer, as :func:`~graphopt.sim.pipeline.op_layers`
    puts them), each layer on a detached copy of its predecessor's output; and the SGD
    update of its parameters: the median of ``reps`` rounds after one untimed. In the
    untimed round, what autograd saves for the backward (``saved_tensors_hooks``).
    """
    check_microbatches(model, microbatches)
    size = model.batch // microbatches
    x, y = model.inputs[:size], model.target[:size]
    layers = model.layers
    opts = [torch.optim.SGD(list(layer.parameters()), lr=0.0) for layer in layers]
    params = {p.untyped_storage().data_ptr() for p in model.sequential().parameters()}
    seen: set[int] = set()
    saved = np.zeros(len(layers))
    layer_now = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            saved[layer_now[0]] += t.untyped_storage().nbytes()
        return t

    rounds = np.zeros((reps, len(layers)))
    updates = np.zeros((reps, len(layers)))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for r in range(-1, reps):
            ins, outs, fwd = [], [], np.zeros(len(layers))
            h = x
            for i, layer in enumerate(layers):
                h = h.detach().requires_grad_(h.is_floating_point())
                layer_now[0] = i
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if r < 0 \
                        else contextlib.nullcontext():
                    t0 = time.perf_counter()
                    out = layer(h)
                    if i == len(layers) - 1:
                        out = model.loss(out, y)
                    fwd[i] = time.perf_counter() - t0
                ins.append(h)
                outs.append(out)
                h = out
            grad = None
            for i in range(len(layers) - 1, -1, -1):
                t0 = time.perf_counter()
                outs[i].backward(grad)
                t = time.perf_counter() - t0
                grad = ins[i].grad
                t1 = time.perf_counter()
                opts[i].step()
                u = time.perf_counter() - t1
                opts[i].zero_grad()
                if r >= 0:
                    rounds[r, i], updates[r, i] = fwd[i] + t, u
    finally:
        torch.set_num_threads(before)
    return LayerProfile(np.median(rounds, axis=0), np.median(updates, axis=0), saved)


def reference_loss(model: PipelineModel, microbatches: int) -> float:
    """The unsplit model's loss on the batch cut into ``microbatches``: the mean of the
    microbatches' losses, as the pipeline's first step computes it."""
    net = model.sequential()
    with torch.no_grad():
        losses = [float(model.loss(net(x), y)) for x, y in
                  zip(model.inputs.tensor_split(microbatches), model.target.tensor_split(microbatches))]
    return float(np.mean(losses))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _schedule(name: str, stages: list, microbatches: int, loss_fn):
    """torch's schedule ``name`` over this rank's stages (one, but with interleaving)."""
    from torch.distributed.pipelining import (Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)

    if name == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_microbatches=microbatches, loss_fn=loss_fn)
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[name]
    return cls(stages[0], n_microbatches=microbatches, loss_fn=loss_fn)


def _worker(rank: int, world: int, port: int, spec: str, seed: int, plans: list[dict],
            steps: int, warmup: int, threads: int, queue) -> None:
    try:
        _work(rank, world, port, spec, seed, plans, steps, warmup, threads, queue)
    except BaseException as err:  # noqa: BLE001 - reported to the parent, one message
        queue.put(("error", rank, f"{type(err).__name__}: {err}", traceback.format_exc()))
        raise SystemExit(1) from None


def _work(rank, world, port, spec, seed, plans, steps, warmup, threads, queue) -> None:
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = build_pipeline_model(spec, seed)
        runs = []
        for p in plans:
            b, chunks = p["bounds"], len(p["bounds"]) - 1
            # this rank's chunks: rank, rank + K, ... (round-robin, as torch numbers stages)
            pieces = [copy.deepcopy(torch.nn.Sequential(*model.layers[b[c]:b[c + 1]]))
                      for c in range(rank, chunks, world)]
            stages = [PipelineStage(piece, c, chunks, torch.device("cpu"))
                      for piece, c in zip(pieces, range(rank, chunks, world))]
            sched = _schedule(p["schedule"], stages, p["microbatches"], model.loss)
            piece = torch.nn.ModuleList(pieces)
            opt = torch.optim.SGD(piece.parameters(), lr=1e-4)
            runs.append((piece, sched, opt))
        x, y = model.inputs, model.target
        times: list[list[float]] = [[] for _ in plans]
        busy: list[list[float]] = [[] for _ in plans]  # this process's CPU seconds a step
        first_loss = [float("nan")] * len(plans)

        def step(i: int) -> tuple[float, float]:
            piece, sched, opt = runs[i]
            losses: list = []
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            if world == 1:
                sched.step(x, target=y, losses=losses)
            elif rank == 0:
                sched.step(x)
            elif rank == world - 1:
                sched.step(target=y, losses=losses)
            else:
                sched.step()
            opt.step()
            opt.zero_grad()
            cpu = time.process_time() - c0
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if losses and np.isnan(first_loss[i]):
                first_loss[i] = float(torch.stack([v.detach() for v in losses]).mean())
            return float(dt), cpu

        for r in range(warmup + steps):
            for i in range(len(plans)):
                dt, cpu = step(i)
                if r >= warmup:
                    times[i].append(dt)
                    busy[i].append(cpu)
        memory = []
        for i, (piece, _, opt) in enumerate(runs):
            # the state is held through the step: counted at the start, its frees unseen
            with AllocationPeak([list(piece.parameters()), list(piece.buffers()), opt.state]) as meter:
                step(i)
            memory.append(meter.peak)
        queue.put(("ok", rank, times, memory, first_loss,
                   [statistics.median(b) for b in busy]))
    finally:
        dist.destroy_process_group()


def measure_pipelines(spec: str, plans: list[PipelinePlan], steps: int = 5, warmup: int = 1,
                      seed: int = 0, threads: int = 1,
                      timeout: float = 1800.0) -> list[PipelineMeasure]:
    """Run every plan of one model on ``K`` CPU processes (``K`` the plans' stage count),
    one step of each plan in turn, ``warmup`` untimed rounds first.

    Parameters
    ----------
    spec : str
        The ``pipe:`` model the plans split.
    plans : list of PipelinePlan
        All with the same number of stages.
    steps, warmup : int
        Timed and untimed rounds.
    seed : int
        Weights and batch (every process builds the same model).
    threads : int
        Intra-op threads per process.
    timeout : float
        Seconds the processes may take in all; then they are stopped.

    Raises
    ------
    GraphoptError
        No plan, plans of different stage counts, a plan's bounds not covering the
        model's layers, or a microbatch count that does not divide the batch.
    ExecutionError
        A process failed (its first line), or the processes ran past ``timeout``.
    """
    if not plans:
        raise GraphoptError("no pipeline plan to run")
    world = plans[0].stages
    model = build_pipeline_model(spec, seed)
    for p in plans:
        if p.stages != world:
            raise GraphoptError(f"plans of {world} and {p.stages} stages: run them apart")
        if p.bounds[-1] != len(model.layers):
            raise GraphoptError(f"plan bounds {list(p.bounds)} end at layer {p.bounds[-1]}; "
                                f"{spec} has {len(model.layers)} layers")
        check_microbatches(model, p.microbatches)
    if not pipeline_available():
        raise ExecutionError("this PyTorch has no torch.distributed.pipelining with gloo")
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    args = (world, _free_port(), spec, seed,
            [{"bounds": list(p.bounds), "schedule": p.schedule, "microbatches": p.microbatches}
             for p in plans], steps, warmup, threads, queue)
    failed = ""
    procs = mp.start_processes(_worker, args=args, nprocs=world, start_method="spawn", join=False)
    deadline = time.monotonic() + timeout
    msgs = []

    def drain() -> None:  # read as they come: a full pipe would block a worker's put
        while not queue.empty():
            msgs.append(queue.get())

    try:
        while not procs.join(timeout=0.5):
            drain()
            if time.monotonic() > deadline:
                failed = f": still running after {timeout:g} s, stopped"
                break
    except Exception as err:  # noqa: BLE001 - the worker's own message, if any, is in the queue
        failed = f": {str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__}"
    finally:
        for proc in procs.processes:  # only the processes this call started
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    drain()
    got = {}
    for msg in msgs:
        if msg[0] == "error":
            raise ExecutionError(f"pipeline stage {msg[1]} failed: {msg[2]}".splitlines()[0])
        got[msg[1]] = msg
    if len(got) != world:
        raise ExecutionError(f"pipeline processes ended without results from stages "
                             f"{sorted(set(range(world)) - set(got))}{failed}")
    out = []
    for i, p in enumerate(plans):
        ts = got[0][2][i]
        med = statistics.median(ts)
        out.append(PipelineMeasure(p, ts, med, model.batch / med,
                                   [got[r][3][i] for r in range(world)], got[world - 1][4][i],
                                   [got[r][5][i] for r in range(world)]))
    return out


def runtime_overhead(stages: int, microbatches: int, steps: int = 5, threads: int = 1) -> float:
    """Seconds ``torch.distributed.pipelining`` adds per stage and microbatch on this
    machine (per chunk with the interleaved schedule, the model charges it for every
    chunk's actions): the median step of a pipeline of ``stages`` one-unit linear
    layers, whose compute is nothing, over its ``M + K - 1`` slots (the model's bubble
    formula).

    What it holds: the schedule's bookkeeping per action, and each send's and receive's
    fixed cost over gloo, at the load the machine has when it is measured.
    """
    spec = f"pipe:mlp:layers={max(stages - 1, 1)},hidden=1,batch={microbatches},classes=2"
    model = build_pipeline_model(spec)
    plan = PipelinePlan(spec, tuple(int(b) for b in np.linspace(0, len(model.layers), stages + 1)),
                        "1f1b", microbatches, "overhead")
    m = measure_pipelines(spec, [plan], steps=steps, threads=threads)[0]
    return m.median / (microbatches + stages - 1)


def stage_cluster(cluster: Cluster, stages: int) -> Cluster:
    """``cluster`` with ``stages`` devices: its first ``stages``, or, where it has fewer,
    its first device repeated, joined all to all by its first link (the processes of
    one host a pipeline runs on are alike).

    >>> from graphopt.hardware import load_cluster
    >>> stage_cluster(load_cluster("cpu"), 4).num_devices
    4
    """
    import dataclasses

    from graphopt.hardware import topology

    if stages <= cluster.num_devices:
        return cluster.take(stages)
    dev = cluster.devices[0]
    devices = tuple(dataclasses.replace(dev, name=f"{dev.name.split(':')[0]}:{i}")
                    for i in range(stages))
    n = cluster.num_devices
    bw = float(cluster.bandwidth[0, 1]) if n > 1 else float("inf")
    lat = float(cluster.latency[0, 1]) if n > 1 else 0.0
    bandwidth, latency = topology.all_to_all(stages, bw, lat)
    return dataclasses.replace(cluster, name=f"{cluster.name}x{stages}", devices=devices,
                               bandwidth=bandwidth, latency=latency)
