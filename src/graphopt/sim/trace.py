"""Chrome Trace Event Format export of a simulated timeline (opens in Perfetto and
chrome://tracing): one process per device, one track per link that carried a transfer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from graphopt.errors import UsageError
from graphopt._files import atomic_write
from graphopt.ir.ops import op_class
from graphopt.sim.problem import Problem, SimResult, Timeline

__all__ = ["chrome_trace", "kernel_ops", "require_timeline", "save_chrome_trace", "used_links"]

_US = 1e6  # trace timestamps are in microseconds


def require_timeline(result: SimResult) -> Timeline:
    """The result's timeline; :class:`GraphoptError` when it was simulated without one."""
    if result.timeline is None:
        raise UsageError("the result holds no timeline: simulate(..., timeline=True) first")
    return result.timeline


def used_links(tl: Timeline) -> list[tuple[int, int]]:
    """Directed links ``(src, dst)`` that carried at least one transfer, sorted."""
    pairs = np.unique(np.stack([tl.transfer_src, tl.transfer_dst], axis=1), axis=0)
    return [(int(s), int(d)) for s, d in pairs]


def kernel_ops(problem: Problem, tl: Timeline) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per kernel of ``tl``: the op that dominates it, and its ops.

    A fused kernel is named by its root (the node the timeline keeps), often a ``view``
    or a cheap elementwise op; what it does is told by the op that takes the longest
    alone on the kernel's device (``costs.time``, FLOPs and bytes priced by the cost
    model), which is what traces and Gantt charts show.

    Returns
    -------
    dominant : ndarray
        (K,) node index of each kernel's most expensive op.
    ops : list of ndarray
        Each kernel's node indices in topological order (a duplicated op appears in the
        kernel of its first consumer).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import Plan, simulate
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:1"))
    >>> tl = simulate(prob, Plan(), timeline=True).timeline
    >>> dominant, ops = kernel_ops(prob, tl)
    >>> bool(all(d in o for d, o in zip(dominant, ops)))
    True
    """
    n, k = problem.graph.num_nodes, len(tl.kernel)
    where = np.full(n, -1, dtype=np.int64)
    where[tl.kernel] = np.arange(k)
    node_kernel = where[tl.group]
    nodes = np.flatnonzero(node_kernel >= 0)
    kern = node_kernel[nodes]
    alone = problem.costs.time[nodes, tl.device[kern]]
    order = np.lexsort((nodes, -alone, kern))  # by kernel, most expensive first, then index
    first = np.searchsorted(kern[order], np.arange(k))
    dominant = nodes[order][first]
    by_kernel = np.argsort(kern, kind="stable")  # nodes ascend, so topological within one
    ops = np.split(nodes[by_kernel], np.searchsorted(kern[by_kernel], np.arange(1, k)))
    return dominant, ops


def chrome_trace(problem: Problem, result: SimResult) -> dict:
    """The timeline of ``result`` as a Chrome Trace Event Format dict.

    Each device is a process (``pid`` = device index) with one ``compute`` thread; the
    links that carried transfers are threads of one more process, ``links``. Every
    kernel and every transfer is a complete event (``"ph": "X"``, times in µs). A kernel
    is named by the op that dominates it (:func:`kernel_ops`); its args list its ``ops``
    and its ``root`` (the node that names it in the timeline and in transfers).

    Raises
    ------
    GraphoptError
        ``result`` was simulated without ``timeline=True``.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import Plan, simulate
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> r = simulate(prob, Plan(), timeline=True)
    >>> trace = chrome_trace(prob, r)
    >>> sum(e["ph"] == "X" for e in trace["traceEvents"]) == r.num_kernels
    True
    """
    tl = require_timeline(result)
    g, devices = problem.graph, problem.cluster.devices
    names, ops = g.names.tolist(), g.op.tolist()
    nd = link_pid = len(devices)  # the links process comes after the devices

    def meta(pid, tid, kind, **args):
        return {"ph": "M", "pid": pid, "tid": tid, "name": kind, "args": args}

    events = []
    for d, dev in enumerate(devices):
        events += [meta(d, 0, "process_name", name=dev.name),
                   meta(d, 0, "process_sort_index", sort_index=d),
                   meta(d, 0, "thread_name", name=f"{dev.name} compute")]
    links = used_links(tl)
    if links:
        events += [meta(link_pid, 0, "process_name", name="links"),
                   meta(link_pid, 0, "process_sort_index", sort_index=link_pid)]
    for s, d in links:
        events.append(meta(link_pid, s * nd + d, "thread_name",
                           name=f"{devices[s].name} -> {devices[d].name}"))

    size = np.bincount(tl.group, minlength=g.num_nodes)[tl.kernel].tolist()
    flops = np.bincount(tl.group, weights=g.flops, minlength=g.num_nodes)[tl.kernel].tolist()
    dominant, members = kernel_ops(problem, tl)
    for k, top, m, d, t0, t1, n, f in zip(tl.kernel.tolist(), dominant.tolist(), members,
                                          tl.device.tolist(), tl.start.tolist(), tl.end.tolist(),
                                          size, flops):
        op = ops[top]
        events.append({"ph": "X", "pid": d, "tid": 0, "name": names[top], "cat": op_class(op),
                       "ts": t0 * _US, "dur": (t1 - t0) * _US,
                       "args": {"op": op, "fused_ops": n, "flops": f, "device": devices[d].name,
                                "root": names[k], "ops": [names[i] for i in m.tolist()]}})
    for k, s, d, t0, t1, b in zip(tl.transfer_kernel.tolist(), tl.transfer_src.tolist(),
                                  tl.transfer_dst.tolist(), tl.transfer_start.tolist(),
                                  tl.transfer_end.tolist(), tl.transfer_bytes.tolist()):
        events.append({"ph": "X", "pid": link_pid, "tid": s * nd + d,
                       "name": f"{names[k]} -> {devices[d].name}", "cat": "transfer",
                       "ts": t0 * _US, "dur": (t1 - t0) * _US, "args": {"bytes": b}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "metadata": {"graph": g.name, "cluster": problem.cluster.name,
                         "step_time": result.step_time, "lower_bound": result.lower_bound,
                         "valid": bool(result.valid), "reason": result.reason}}


def save_chrome_trace(problem: Problem, result: SimResult, path: str | os.PathLike) -> Path:
    """Write :func:`chrome_trace` of ``result`` to ``path`` as JSON, atomically.

    Examples
    --------
    >>> import os, tempfile
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> from graphopt.sim import Plan, simulate
    >>> prob = Problem(mlp_training_graph(), load_cluster("dgx1-v100:2"))
    >>> p = save_chrome_trace(prob, simulate(prob, Plan(), timeline=True),
    ...                       os.path.join(tempfile.mkdtemp(), "step.trace.json"))
    >>> p.stat().st_size > 0
    True
    """
    text = json.dumps(chrome_trace(problem, result))
    atomic_write(path, lambda f: f.write(text.encode()))
    return Path(path)
