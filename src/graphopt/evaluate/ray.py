"""Evaluation on Ray: batches of plans simulated by a pool of Ray actors, on one machine
or a cluster (the ``ray`` extra).

:class:`RayEvaluator` is a :class:`~graphopt.evaluate.local.LocalEvaluator` in everything but
where a batch is simulated: the budget, the objective, the best plan and the history are
its base class's, so every method runs on it unchanged and returns the same plan for the
same seed (the simulator is deterministic, and a batch is split into contiguous parts
whose results are put back in order).

- A :class:`SimulatorPool` holds the actors. Each :class:`~graphopt.sim.Problem` goes
  to the object store once (``ray.put``) and each actor fetches it once, at its first
  batch of that problem; a batch then carries only the plans.
- Faults: the actors are created with ``max_restarts=-1, max_task_retries=-1``, so when a
  worker process dies Ray starts the actor again and re-runs the part of the batch it
  held; the new actor fetches its problems again. The result is the same, nothing is
  lost. Ray does the recovery: graphopt schedules nothing itself.
- :func:`ray_backend` starts (or joins, with ``address``) Ray, makes a pool and makes it
  the backend of every evaluator built by a method (:func:`~graphopt.evaluate.backend.use_evaluator`).
- :func:`map_tasks` runs independent jobs (benchmark rows) as Ray tasks, gathered in order.

This module imports ray; nothing imports it but the commands given ``--backend ray``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import ray
from ray.exceptions import RayTaskError

from graphopt.evaluate.backend import use_evaluator
from graphopt.evaluate.local import LocalEvaluator
from graphopt.errors import GraphoptError, UsageError
from graphopt.sim import BatchResult, Problem, simulate_batch

__all__ = ["RayEvaluator", "SimulatorPool", "map_tasks", "ray_backend", "ray_session"]


@ray.remote
class _Simulator:
    """One worker of a :class:`SimulatorPool`: simulates parts of batches of the problems
    it has fetched, each once."""

    def __init__(self, threads: int) -> None:
        import numba

        from graphopt.sim import ensure_compiled

        # its share of the node's cores, not all of them
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
        ensure_compiled()
        self._problems: dict[str, Problem] = {}

    def simulate(self, key: str, problem: list, placements: np.ndarray,
                 priorities: np.ndarray | None, fusion: np.ndarray | None) -> BatchResult:
        # ``problem`` is [ObjectRef]: wrapped in a list, Ray passes the reference instead
        # of the value, so the Problem is fetched only on an actor's first batch of it.
        # Arrays from Ray's object store are read-only, a type numba compiles anew (a
        # minute): the problem and the plans are copied into writable arrays.
        if key not in self._problems:
            self._problems[key] = copy.deepcopy(ray.get(problem[0]))
        return simulate_batch(self._problems[key], *(None if a is None else np.array(a)
                                                     for a in (placements, priorities, fusion)))

    def pid(self) -> int:
        """The actor's process id (tests kill it to check recovery)."""
        return os.getpid()


class SimulatorPool:
    """A pool of Ray actors that simulate batches of plans, split across them.

    Parameters
    ----------
    workers : int, optional
        Actors in the pool; default one per ``threads`` CPUs the Ray cluster has.
    threads : int
        numba threads of each actor (the CPUs it works on).

    Ray must be initialized (:func:`ray_backend` does it). The pool's actors live until
    :meth:`close`.

    Examples
    --------
    Starting Ray takes seconds, so the examples of this module are not run as doctests;
    ``tests/evaluate/test_ray.py`` runs the same on one Ray for the module.

    >>> import ray
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> _ = ray.init(num_cpus=2)  # doctest: +SKIP
    >>> pool = SimulatorPool(workers=2)  # doctest: +SKIP
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> zeros = np.zeros((4, prob.num_nodes), dtype=int)
    >>> bool((pool.simulate(prob, zeros).step_time ==  # doctest: +SKIP
    ...       simulate_batch(prob, zeros).step_time).all())
    True
    """

    def __init__(self, workers: int | None = None, threads: int = 1) -> None:
        if workers is None:
            workers = max(int(ray.cluster_resources().get("CPU", 1)) // threads, 1)
        if workers < 1 or threads < 1:
            raise UsageError(f"a Ray pool needs at least one worker and one thread each; "
                             f"got {workers} worker(s) of {threads} thread(s)")
        self.threads = threads
        # Ray's default for actors: a CPU to place one, none held while it lives, so an
        # idle pool blocks no task; SPREAD puts the actors on as many nodes as it can
        self.actors = [_Simulator.options(max_restarts=-1, max_task_retries=-1,
                                          scheduling_strategy="SPREAD").remote(threads)
                       for _ in range(workers)]
        self._sent: dict[int, tuple[Problem, str, list]] = {}

    @property
    def workers(self) -> int:
        """Actors in the pool."""
        return len(self.actors)

    def send(self, problem: Problem) -> tuple[str, list]:
        """Put ``problem`` in Ray's object store, once per problem (later calls return the
        same key and reference)."""
        sent = self._sent.get(id(problem))
        if sent is None:
            # the problem is kept with its entry so that its id is never reused
            sent = self._sent[id(problem)] = (problem, uuid.uuid4().hex, [ray.put(problem)])
        return sent[1], sent[2]

    def simulate(self, problem: Problem, placements: np.ndarray,
                 priorities: np.ndarray | None = None,
                 fusion: np.ndarray | None = None) -> BatchResult:
        """:func:`simulate_batch` of ``problem`` on the pool: the rows split into as many
        contiguous parts as there are actors (at most one part a row), results in order."""
        key, ref = self.send(problem)
        bounds = np.linspace(0, len(placements), min(self.workers, len(placements)) + 1)
        bounds = bounds.round().astype(int)
        parts = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        futures = [actor.simulate.remote(key, ref, placements[s],
                                         None if priorities is None else priorities[s],
                                         None if fusion is None else fusion[s])
                   for actor, s in zip(self.actors, parts)]
        try:
            results = ray.get(futures)
        except RayTaskError as err:
            # an error of the simulator (a plan out of range) is raised as such, not wrapped
            if isinstance(err.cause, GraphoptError):
                raise err.cause from None
            raise
        # concatenate also copies a single part: arrays from Ray are read-only
        return BatchResult(*(np.concatenate([getattr(r, f.name) for r in results])
                             for f in dataclasses.fields(BatchResult)))

    def close(self) -> None:
        """End the actors and drop the problems from the object store."""
        for actor in self.actors:
            ray.kill(actor)
        self.actors, self._sent = [], {}


@dataclass
class RayEvaluator(LocalEvaluator):
    """A :class:`~graphopt.evaluate.local.LocalEvaluator` whose batches are simulated by a
    :class:`SimulatorPool`: the same budget accounting, objective, best plan and history;
    the same results, row for row.

    Parameters
    ----------
    pool : SimulatorPool
        Where batches go. The evaluator's problem is sent to it at construction; the
        problems of ``evaluate(..., problem=...)`` (a trainer's corpus) at their first batch.

    Single plans (:meth:`simulate`, the full result) are simulated here: one plan gains
    nothing from a round trip.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> with ray_backend(workers=2, num_cpus=2) as pool:  # doctest: +SKIP
    ...     ev = RayEvaluator(prob, 8, pool=pool)
    ...     r = ev.evaluate(np.zeros((10, prob.num_nodes), dtype=int))
    ...     ev.evals, len(r.step_time)
    (8, 8)
    """

    pool: SimulatorPool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pool is None:
            raise UsageError("RayEvaluator needs a pool: RayEvaluator(problem, ..., "
                             "pool=SimulatorPool())")
        self.pool.send(self.problem)

    def _simulate_batch(self, problem: Problem, placements: np.ndarray,
                        priorities: np.ndarray | None, fusion: np.ndarray | None) -> BatchResult:
        return self.pool.simulate(problem, placements, priorities, fusion)


def _check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """Refuse a ``HOST:PORT`` or ``ray://HOST:PORT`` address where nothing listens: Ray
    itself would retry such an address for ever, printing a warning every few seconds.

    >>> _check_reachable("127.0.0.1:1")
    Traceback (most recent call last):
    graphopt.errors.UsageError: --address 127.0.0.1:1: no Ray cluster answers there (Connection refused)
    """
    if not address or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--address {address}: expected auto, HOST:PORT or "
                         "ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise UsageError(f"--address {address}: no Ray cluster answers there ({reason})"
                         ) from None


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Ray for the block: a local Ray started for it and stopped after it (no
    ``address``), or the cluster at ``address`` joined (``auto``, ``HOST:6379``,
    ``ray://HOST:10001``). Ray already initialized in this process is used as it is.

    Raises
    ------
    GraphoptError
        Ray could not be started or joined (the message names the address).
    """
    if ray.is_initialized():
        yield
        return
    _check_reachable(address)
    try:
        ray.init(address=address, num_cpus=None if address else num_cpus,
                 include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = f"--address {address}" if address else "a local Ray"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GraphoptError(f"{where}: could not start or join Ray: {first}") from None
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def ray_backend(address: str | None = None, workers: int | None = None, threads: int = 1,
                num_cpus: int | None = None) -> Iterator[SimulatorPool]:
    """Within this block every method's evaluator is a :class:`RayEvaluator` on one pool.

    Parameters
    ----------
    address : str, optional
        An existing cluster (:func:`ray_session`); default a local Ray for the block.
    workers, threads : int
        The pool's actors and the CPUs each takes (:class:`SimulatorPool`).
    num_cpus : int, optional
        CPUs of a local Ray (default all).

    Raises
    ------
    GraphoptError
        Ray could not be started or joined (the message names the address).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.optim import Budget, optimize
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> with ray_backend(workers=2, num_cpus=2):  # doctest: +SKIP
    ...     plan, stats = optimize(prob, "sa", budget=Budget(64))
    >>> (plan.placement == optimize(prob, "sa", budget=Budget(64))[0].placement).all()
    ... # doctest: +SKIP
    True
    """
    with ray_session(address, num_cpus):
        pool = SimulatorPool(workers, threads)
        try:
            with use_evaluator(functools.partial(RayEvaluator, pool=pool)):
                yield pool
        finally:
            pool.close()


def map_tasks(fn: Callable, jobs: Iterable[tuple], num_cpus: float = 1) -> Iterator:
    """``fn(*job)`` for each job as a Ray task, the results yielded in the jobs' order as
    they become available (each task takes ``num_cpus``; Ray places them on the cluster).

    Ray must be initialized. An exception in a task is raised here, unwrapped when it is
    a :class:`GraphoptError`.

    >>> jobs = [(2, 3), (3, 2)]
    >>> with ray_session(num_cpus=2):  # doctest: +SKIP
    ...     list(map_tasks(pow, jobs))
    [8, 9]
    """
    task = _in_task.options(num_cpus=num_cpus, max_retries=3)
    futures = [task.remote(fn, num_cpus, *job) for job in jobs]
    for f in futures:
        try:
            yield ray.get(f)
        except RayTaskError as err:
            if isinstance(err.cause, GraphoptError):
                raise err.cause from None
            raise


@ray.remote
def _in_task(fn: Callable, num_cpus: float, *args):
    """``fn(*args)`` with numba's threads limited to the task's CPUs (Ray limits OpenMP's
    and torch's, not numba's), so that tasks side by side do not oversubscribe a node."""
    import numba

    numba.set_num_threads(max(1, min(int(num_cpus), numba.config.NUMBA_NUM_THREADS)))
    return fn(*args)
