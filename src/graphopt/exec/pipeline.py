"""Pipeline plans run for real: ``torch.distributed.pipelining`` on K CPU processes.

Each chunk of a :class:`~graphopt.sim.pipeline.PipelinePlan` is a run of consecutive
blocks of a model (:class:`~graphopt.frontends.model.Model`: a ``pipe:`` model's layers, a
``transformers`` stack's layers, a user's ``ModuleList``), cut from the model itself by
``torch.distributed.pipelining``'s tracer (``pipeline()`` with the plan's ``split_spec``:
a split at the beginning of each chunk's first block) and built as the stage of its rank
(chunk ``c`` of ``K·V`` on rank ``c mod K``, one chunk a rank but with the interleaved
schedule); dropout is off (the model in eval mode) so that the split model's loss can be
checked against the unsplit one's. The processes talk over gloo
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
import operator
import dataclasses
import os
import socket
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from graphopt.errors import ExecutionError, GraphoptError, UsageError
from graphopt.exec.runner import AllocationPeak
from graphopt.frontends.model import Model
from graphopt.frontends.source import Source
from graphopt.frontends.torch import first_line
from graphopt.hardware import Cluster
from graphopt.sim import Problem
from graphopt.sim.pipeline import LayerCosts, PipelinePlan, layer_costs, op_layers

__all__ = ["LayerProfile", "PipelineMeasure", "Stopped", "cut", "measure_pipelines",
           "pipeline_available", "pipeline_model", "pipeline_problem", "pipeline_script",
           "profile_layers", "reference_loss", "runtime_overhead", "sendable", "split_spec",
           "stage_cluster", "trace_microbatch"]


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


def pipeline_model(source: str, seed: int = 0) -> Model:
    """The model ``source`` names, with at least two blocks to split at (one-line errors
    otherwise: a source with no PyTorch model, a model with no blocks)."""
    model = Source.parse(source).model(seed)
    model.require_blocks(1)
    return model


def split_spec(model: Model, bounds) -> dict[str, str]:
    """``torch.distributed.pipelining``'s ``split_spec`` of a plan's bounds: a split at the
    beginning of every chunk's first block but the first's.

    >>> from graphopt.zoo.pipeline import build_pipeline_model
    >>> split_spec(build_pipeline_model("mlp:layers=3,hidden=4,batch=2"), (0, 2, 4))
    {'2': 'beginning'}
    """
    return dict.fromkeys((model.blocks[b] for b in bounds[1:-1]), "beginning")


def trace_microbatch(model: Model, microbatches: int):
    """The traced training step (forward, loss, backward, SGD update) of one microbatch
    of ``model``."""
    from graphopt.frontends.torch import trace_program

    model.check_microbatches(microbatches)
    x, y = model.microbatch(microbatches)
    return trace_program(model.module, x, training=True,
                         loss=lambda out: model.loss_of(out, y), name=model.name)


def pipeline_problem(model: Model, microbatches: int, cluster: Cluster,
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
    try:
        layer = op_layers(traced.graph, model.blocks)
    except ValueError as err:
        raise GraphoptError(f"{model.name}: {err}") from None
    costs = layer_costs(prob, forward_ops(traced), layer)
    if profile:
        prof = profile_layers(model, microbatches)
        d = prob.num_devices
        costs = dataclasses.replace(costs, time=np.repeat(prof.time[:, None], d, 1),
                                    update=np.repeat(prof.update[:, None], d, 1),
                                    activations=prof.saved)
    return prob, costs


@dataclass(frozen=True)
class LayerProfile:
    """Each block of a model measured on one microbatch (:func:`profile_layers`).

    Attributes
    ----------
    time, update : float64 (L,)
        Seconds of its forward and backward, and of its SGD update (once per step).
    saved : float64 (L,)
        Bytes autograd keeps from its forward for its backward: the tensors its ops save
        (each storage once, in the first block that saves it; parameters not counted).
    """

    time: np.ndarray
    update: np.ndarray
    saved: np.ndarray


def _unit_params(model: Model, first_unit: dict[nn.Module, int]) -> list[list[torch.nn.Parameter]]:
    """The parameters of each block; one outside every block goes with the block that
    runs when its module is first called (embeddings with the first, a head with the last)."""
    owner = {}
    for mod in model.module.modules():
        for p in mod.parameters(recurse=False):
            owner.setdefault(p, mod)
    units: list[list] = [[] for _ in model.blocks]
    seen = set()
    for k, block in enumerate(model.layers):
        for p in block.parameters():
            if p not in seen:
                seen.add(p)
                units[k].append(p)
    last = len(units) - 1
    for p in model.module.parameters():
        if p not in seen:
            seen.add(p)
            units[min(first_unit.get(owner[p], last), last)].append(p)
    return units


def profile_layers(model: Model, microbatches: int, reps: int = 5,
                   threads: int = 1) -> LayerProfile:
    """Each block of ``model`` on one microbatch, measured in this process with ``threads``
    intra-op threads, as a stage's process runs it.

    One whole training step of the microbatch, timed at the blocks' edges: a block's
    forward runs from its first op to the next block's (the first from the step's start,
    the last to the loss), its backward from the gradient of the next block's input to
    the gradient of its own (the last from the loss, the first to the end of the
    backward), each block's SGD update apart: the median of ``reps`` rounds after one
    untimed. In the untimed round, what autograd saves for the backward
    (``saved_tensors_hooks``) and which block each module outside the blocks runs in.
    """
    model.check_microbatches(microbatches)
    x, y = model.microbatch(microbatches)
    L = len(model.blocks)
    params = {p.untyped_storage().data_ptr() for p in model.module.parameters()}
    seen: set[int] = set()
    saved = np.zeros(L)
    unit = [0]
    fwd_at = np.zeros(L + 1)
    bwd_at = np.zeros(L + 1)
    first_unit: dict[nn.Module, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            saved[unit[0]] += t.untyped_storage().nbytes()
        return t

    def enter(k: int):
        def hook(mod, args, kwargs) -> None:
            unit[0] = k
            fwd_at[k] = time.perf_counter()
            if k == 0:
                return
            # the block's hidden state: its gradient is whole once the block's backward is done
            for t in (*args, *kwargs.values()):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(lambda g, k=k: bwd_at.__setitem__(k, time.perf_counter()))
                    break
        return hook

    handles = [b.register_forward_pre_hook(enter(k), with_kwargs=True)
               for k, b in enumerate(model.layers)]
    rounds = np.zeros((reps, L))
    updates = np.zeros((reps, L))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    opts: list = []
    try:
        for r in range(-1, reps):
            watch = contextlib.ExitStack()
            if r < 0:
                watch.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t))
                watch.enter_context(torch.nn.modules.module.register_module_forward_pre_hook(
                    lambda mod, args: None if mod in first_unit else
                    first_unit.__setitem__(mod, unit[0])))
            with watch:
                unit[0] = 0
                t0 = time.perf_counter()
                loss = model.loss_of(model.module(*x), y)
                fwd_at[L] = time.perf_counter()
            fwd_at[0] = t0
            bwd_at[1:L] = np.nan
            bwd_at[L] = time.perf_counter()
            loss.backward()
            bwd_at[0] = time.perf_counter()
            for k in range(L - 1, 0, -1):  # a block whose input needs no gradient: none of its own
                if np.isnan(bwd_at[k]):
                    bwd_at[k] = bwd_at[k + 1]
            if r < 0:
                opts = [torch.optim.SGD(ps, lr=0.0) if ps else None
                        for ps in _unit_params(model, first_unit)]
            u = np.zeros(L)
            for k, opt in enumerate(opts):
                if opt is not None:
                    t1 = time.perf_counter()
                    opt.step()
                    u[k] = time.perf_counter() - t1
            model.module.zero_grad()
            if r >= 0:
                rounds[r] = np.diff(fwd_at) + (bwd_at[:-1] - bwd_at[1:])
                updates[r] = u
    finally:
        torch.set_num_threads(before)
        for h in handles:
            h.remove()
    return LayerProfile(np.median(rounds, axis=0), np.median(updates, axis=0), saved)


def reference_loss(model: Model, microbatches: int) -> float:
    """The unsplit model's loss on the batch cut into ``microbatches`` (dropout off): the
    mean of the microbatches' losses, as the pipeline's first step computes it."""
    was = model.module.training
    model.module.eval()
    try:
        with torch.no_grad():
            losses = [float(model.loss_of(model.module(*x), y)) for x, y in
                      (model.microbatch(microbatches, i) for i in range(microbatches))]
    finally:
        model.module.train(was)
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


def _orphan_proof() -> None:
    """A worker that ends with its parent (a SIGKILL when it dies, Linux), and leaves
    Ctrl-C to it: the parent stops the workers and keeps what was finished."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's timeout still bounds it
        pass


def _worker(rank: int, world: int, port: int, spec: str, seed: int, plans: list[dict],
            steps: int, warmup: int, threads: int, queue) -> None:
    _orphan_proof()
    try:
        _work(rank, world, port, spec, seed, plans, steps, warmup, threads, queue)
    except BaseException as err:  # noqa: BLE001 - reported to the parent, one message
        queue.put(("error", rank, first_line(err), traceback.format_exc()))
        raise SystemExit(1) from None


def sendable(pipe):
    """``pipe`` (what ``torch.distributed.pipelining.pipeline`` returns) made to send only
    contiguous tensors between stages, which gloo requires: each stage returns its
    outputs contiguous, and receive buffers are made contiguous (torch copies the traced
    value's strides: an expanded mask, a transposed view). Returns ``pipe``."""
    from torch.distributed.pipelining import stage

    def make(meta, device):
        return torch.empty(meta.shape, dtype=meta.dtype, device=device)

    stage._make_tensor_from_meta = make
    for _, sub in pipe.split_gm.named_children():
        if isinstance(sub, torch.fx.GraphModule):
            out = next(iter(sub.graph.find_nodes(op="output")))
            with sub.graph.inserting_before(out):
                out.args = torch.fx.node.map_aggregate(out.args, lambda n, g=sub.graph: _contiguous(g, n))
            sub.recompile()
    return pipe


def _contiguous(graph: torch.fx.Graph, node):
    if isinstance(node, torch.fx.Node) and isinstance(node.meta.get("val"), torch.Tensor):
        new = graph.call_method("contiguous", (node,))
        new.meta = dict(node.meta)
        return new
    return node


class _Relay(nn.Module):
    """The model, every input entering at the first stage and every output leaving the
    last: torch's schedules give the batch to stage 0 alone (an encoder-decoder's decoder
    ids, first read in a later stage, are copied at the start and sent on), and return the
    last stage's outputs alone (a T5 split at its decoder lost the encoder's output, a
    model output too: the loss differed by one term)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *inputs):
        out = self.module(*(x.clone() for x in inputs))
        return torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, out)


def cut(module: nn.Module, split_spec: dict[str, str], mb_args: tuple):
    """``torch.distributed.pipelining``'s ``pipeline()`` of ``module`` cut at
    ``split_spec`` (``{module name: "beginning"}``), traced on one microbatch ``mb_args``,
    made :func:`sendable`, every input entering at the first stage and every output
    leaving the last (:class:`_Relay`)."""
    from torch.distributed.pipelining import SplitPoint, pipeline

    spec = {"module." + name: SplitPoint[where.upper()] for name, where in split_spec.items()}
    return sendable(pipeline(_Relay(module), mb_args=tuple(mb_args), split_spec=spec))


def _refuse_skips(model: Model, top: torch.fx.GraphModule) -> None:
    """Refuse, in one line, a split where a stage sends a floating-point value past the
    next stage: torch's tracer frontend cannot run the backward of such a skip connection
    (it takes every float it sends to need a gradient). Llama-style rotary tables reach
    every layer, so those models split into 2 stages but not into 3 or more."""
    stages = [n for n in top.graph.nodes if n.op == "call_module"]
    index = {n: k for k, n in enumerate(stages)}
    for k, node in enumerate(stages):
        out = next(iter(getattr(top, node.target).graph.find_nodes(op="output"))).args[0]
        outs = out if isinstance(out, tuple | list) else (out,)
        for value in node.users:
            i = value.args[1] if value.target is operator.getitem else 0
            readers = {index[u] for u in (value.users if value.target is operator.getitem
                                          else (value,)) if u in index}
            val = outs[i].meta.get("val") if isinstance(outs[i], torch.fx.Node) else None
            if len(readers) > 1 and isinstance(val, torch.Tensor) and val.is_floating_point():
                raise ExecutionError(
                    f"{model.name}: stage {k} sends a value to stages {sorted(readers)}, past "
                    "the next one (a skip connection, e.g. rotary tables every layer reads); "
                    "torch.distributed.pipelining cannot run its backward: split into 2 stages")


def _stages(model: Model, bounds: list[int], microbatches: int, rank: int, world: int) -> list:
    """This rank's stages of a plan (chunks rank, rank + K, ..., as torch numbers them),
    cut from a copy of the model by the pipelining tracer."""
    chunks = len(bounds) - 1
    x, _ = model.microbatch(microbatches)
    pipe = cut(copy.deepcopy(model.module).eval(), split_spec(model, bounds), x)
    if pipe.num_stages != chunks:
        raise ExecutionError(f"{model.name}: the pipelining tracer cut {pipe.num_stages} "
                             f"stages, not {chunks} (a block that does not run in order)")
    _refuse_skips(model, pipe.split_gm)
    return [pipe.build_stage(c, torch.device("cpu")) for c in range(rank, chunks, world)]


def _work(rank, world, port, spec, seed, plans, steps, warmup, threads, queue) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = Source.parse(spec).model(seed)
        runs = []
        for p in plans:
            stages = _stages(model, p["bounds"], p["microbatches"], rank, world)
            sched = _schedule(p["schedule"], stages, p["microbatches"], model.loss_of)
            piece = torch.nn.ModuleList(s.submod for s in stages)
            opt = torch.optim.SGD(piece.parameters(), lr=1e-4)
            runs.append((piece, sched, opt))
        x = model.inputs
        # the schedule cuts a target for the loss on the last rank; a loss of the output
        # alone gets a stand-in
        y = model.target if model.target is not None else torch.zeros(model.batch)
        times: list[list[float]] = [[] for _ in plans]
        busy: list[list[float]] = [[] for _ in plans]  # this process's CPU seconds a step
        first_loss = [float("nan")] * len(plans)

        def step(i: int) -> tuple[float, float]:
            piece, sched, opt = runs[i]
            losses: list = []
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            if world == 1:
                sched.step(*x, target=y, losses=losses)
            elif rank == 0:
                sched.step(*x)
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


class Stopped(ExecutionError):
    """The measuring was stopped (:func:`measure_pipelines`' ``stop``) before it ended."""


def measure_pipelines(spec: str, plans: list[PipelinePlan], steps: int = 5, warmup: int = 1,
                      seed: int = 0, threads: int = 1, timeout: float = 1800.0,
                      stop: Callable[[], bool] | None = None) -> list[PipelineMeasure]:
    """Run every plan of one model on ``K`` CPU processes (``K`` the plans' stage count),
    one step of each plan in turn, ``warmup`` untimed rounds first.

    Parameters
    ----------
    spec : str
        The source of the model the plans split (:meth:`~graphopt.frontends.source.Source.model`).
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
    stop : callable, optional
        Polled twice a second; once it returns True the processes are stopped and
        :class:`Stopped` is raised (Ctrl-C under :func:`graphopt.evaluate.interrupt.stop_on_interrupt`).

    Raises
    ------
    GraphoptError
        No plan, plans of different stage counts, a plan's bounds not covering the
        model's layers, or a microbatch count that does not divide the batch.
    ExecutionError
        A process failed (its first line), or the processes ran past ``timeout``.
    """
    if not plans:
        raise UsageError("no pipeline plan to run")
    world = plans[0].stages
    model = pipeline_model(spec, seed)
    for p in plans:
        if p.stages != world:
            raise UsageError(f"plans of {world} and {p.stages} stages: run them apart")
        if p.bounds[-1] != len(model.blocks):
            raise UsageError(f"plan bounds {list(p.bounds)} end at block {p.bounds[-1]}; "
                             f"{spec} has {len(model.blocks)} blocks")
        model.check_microbatches(p.microbatches)
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
            if stop is not None and stop():
                failed = "stopped"
                break
    except Exception as err:  # noqa: BLE001 - the worker's own message, if any, is in the queue
        failed = f": {str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__}"
    finally:
        for proc in procs.processes:  # only the processes this call started
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
    if failed == "stopped":
        raise Stopped(f"measuring {spec} stopped before its {steps} steps ended")
    drain()
    got = {}
    for msg in msgs:
        if msg[0] == "error":
            # the first failure not caused by another stage's: a stage that dies resets
            # its neighbours' connections
            first = next((m for m in msgs if m[0] == "error" and "Connection reset" not in m[2]),
                         msg)
            raise ExecutionError(f"pipeline stage {first[1]} failed: {first[2]}".splitlines()[0])
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


def runtime_overhead(stages: int, microbatches: int, steps: int = 5, threads: int = 1,
                     stop: Callable[[], bool] | None = None) -> float:
    """Seconds ``torch.distributed.pipelining`` adds per stage and microbatch on this
    machine (per chunk with the interleaved schedule, the model charges it for every
    chunk's actions): the median step of a pipeline of ``stages`` one-unit linear
    layers, whose compute is nothing, over its ``M + K - 1`` slots (the model's bubble
    formula).

    What it holds: the schedule's bookkeeping per action, and each send's and receive's
    fixed cost over gloo, at the load the machine has when it is measured.
    """
    spec = f"pipe:mlp:layers={max(stages - 1, 1)},hidden=1,batch={microbatches},classes=2"
    model = pipeline_model(spec)
    plan = PipelinePlan(spec, tuple(int(b) for b in np.linspace(0, len(model.blocks), stages + 1)),
                        "1f1b", microbatches, "overhead")
    m = measure_pipelines(spec, [plan], steps=steps, threads=threads, stop=stop)[0]
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


_SCRIPT = '''"""{title}
Run: torchrun --standalone --nproc-per-node {stages} {name}  (CPU processes over gloo)"""
import torch
import torch.distributed as dist
from torch.distributed.pipelining import {schedule}

from graphopt.exec.pipeline import cut  # torch's pipeline(), on tensors gloo can send
from graphopt.frontends.source import Source

model = Source.parse({source!r}).model()  # yours: .module, .inputs, .target, .loss_of
split_spec = {split!r}
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
pipe = cut(model.module.eval(), split_spec, model.microbatch({microbatches})[0])
stages = [pipe.build_stage(c, torch.device("cpu")) for c in range(rank, pipe.num_stages, world)]
schedule = {schedule}({stages_arg}, n_microbatches={microbatches}, loss_fn=model.loss_of)
target = model.target if model.target is not None else torch.zeros(model.batch)
losses = []
args = model.inputs if rank == 0 else ()
schedule.step(*args, **(dict(target=target, losses=losses) if rank == world - 1 else {{}}))
if losses:
    print(f"loss {{torch.stack(losses).mean().item():.6f}}")
dist.destroy_process_group()
'''


def pipeline_script(plan: PipelinePlan, name: str = "pipeline_step.py") -> str:
    """A script that runs one step of ``plan`` on the plan's model with
    ``torch.distributed.pipelining`` (its ``pipeline()`` tracer cut at the plan's
    ``split_spec``, the plan's schedule and microbatches), printing the loss on the last
    rank: the plan as a user takes it away (``graphopt export --format pipeline``).
    Replace the model line with one's own module and batch to run it without graphopt's
    sources."""
    schedule = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
                "interleaved": "ScheduleInterleaved1F1B"}[plan.schedule]
    sizes = "/".join(str(b - a) for a, b in zip(plan.bounds, plan.bounds[1:]))
    return _SCRIPT.format(
        title=f"One training step of {plan.model} as graphopt's {plan.method or 'plan'} split "
              f"it: blocks {sizes}, {plan.schedule}, {plan.microbatches} microbatches.",
        stages=plan.stages, name=name, schedule=schedule, source=plan.model,
        split=plan.split_spec(), microbatches=plan.microbatches,
        stages_arg="stages" if plan.schedule == "interleaved" else "stages[0]")
