"""Measured per-op profiles: time each distinct op of a graph on the local machine.

A :class:`Profile` maps an op's *signature* — ``(op, dtype, in_shapes, out_shape)``,
the input shapes being the output shapes of its predecessors in
``graph.predecessors(i)`` order — to the median seconds a proxy kernel of that op took
on one device kind. :func:`graphopt.cost.op_costs` uses it in place of the roofline
for the nodes it covers (docs/design.md §2). Nodes with equal signatures share one entry,
so a profile measured on one graph also prices the same ops in another.

The proxy of an op is a PyTorch kernel of its op class built from its shapes (a
matmul of its inputs, a convolution, the elementwise function of that name, ...),
not the op itself: graphs carry shapes, not the code that made them.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import math
import operator
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphopt.errors import GraphoptError, ProfileError
from graphopt.ir import Graph
from graphopt._files import atomic_write, read_json
from graphopt.ir.ops import op_class

if TYPE_CHECKING:
    import torch

__all__ = ["FORMAT", "VERSION", "Profile", "profile_graph", "usable_device"]

FORMAT = "graphopt.profile"
VERSION = 1

Shape = tuple[int, ...]
#: ``(op, dtype, in_shapes, out_shape)`` of a node.
Signature = tuple[str, str, tuple[Shape, ...], Shape]

_FREE = frozenset({"view", "input"})
_DTYPE_ALIASES = {"f64": "float64", "f32": "float32", "tfloat32": "float32", "f16": "float16",
                  "bf16": "bfloat16", "s64": "int64", "s32": "int32", "s16": "int16",
                  "s8": "int8", "u8": "uint8", "pred": "bool", "c64": "complex64",
                  "c128": "complex128"}
_KERNEL_ERRORS = (RuntimeError, TypeError, ValueError, NotImplementedError)


def _signatures(graph: Graph) -> list[Signature]:
    """The signature of every node of ``graph``, in node order."""
    return [(str(graph.op[i]), str(graph.dtype[i]),
             tuple(graph.shape_of(int(j)) for j in graph.predecessors(i)), graph.shape_of(i))
            for i in range(graph.num_nodes)]


@dataclasses.dataclass
class Profile:
    """Measured seconds of op signatures on one device kind.

    Parameters
    ----------
    device_kind : str
        The :attr:`graphopt.hardware.Device.kind` the times apply to.
    entries : dict
        Signature ``(op, dtype, in_shapes, out_shape)`` (shapes as tuples of int) →
        seconds.
    meta : dict
        Where and how it was measured: host, torch version, device name, repeats, date,
        how many signatures were measured out of how many.

    Examples
    --------
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> g = mlp_training_graph(layers=1, hidden=8, batch=4)
    >>> p = Profile("Xeon-8280", {("relu", "float32", ((4, 8),), (4, 8)): 2e-6})
    >>> float(p.lookup(g)[g.index["layers.0.relu"]])
    2e-06
    """

    device_kind: str
    entries: dict[Signature, float]
    meta: dict = dataclasses.field(default_factory=dict)

    def lookup(self, graph: Graph) -> np.ndarray:
        """Measured seconds of every node of ``graph`` (float64, (N,)), NaN where not covered."""
        return np.array([self.entries.get(s, np.nan) for s in _signatures(graph)],
                        dtype=np.float64)

    def for_kind(self, kind: str) -> Profile:
        """A copy that applies to devices of ``kind`` (e.g. a preset's device kind).

        >>> Profile("cpu:AMD EPYC", {}).for_kind("Xeon-8280").meta["measured_on"]
        'cpu:AMD EPYC'
        """
        return Profile(kind, dict(self.entries), {**self.meta, "measured_on": self.device_kind})

    def save(self, path: str | os.PathLike) -> Path:
        """Write the profile as JSON to ``path`` (atomically) and return the path.

        >>> import tempfile, os
        >>> p = Profile("k", {("relu", "float32", ((4,),), (4,)): 1e-6})
        >>> Profile.load(p.save(os.path.join(tempfile.mkdtemp(), "p.json"))) == p
        True
        """
        path = Path(path)
        doc = {"format": FORMAT, "version": VERSION, "device_kind": self.device_kind,
               "meta": self.meta,
               "entries": [{"op": op, "dtype": dt, "in_shapes": [list(s) for s in ins],
                            "out_shape": list(out), "seconds": sec}
                           for (op, dt, ins, out), sec in self.entries.items()]}
        text = json.dumps(doc, indent=1)
        atomic_write(path, lambda f: f.write(text.encode()))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        """Read and validate a profile written by :meth:`save`.

        Raises
        ------
        ProfileError
            The file cannot be read, is not JSON, has another format tag or version, a
            key is missing, or an entry has a bad shape or a negative or non-finite time.
            The message names the file and, for an entry, its index.
        """
        doc = read_json(path, ProfileError)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise ProfileError(f"profile {path}: format is {got!r}; expected {FORMAT!r}")
        if type(doc.get("version")) is not int or doc.get("version") != VERSION:
            raise ProfileError(f"profile {path}: version {doc.get('version')!r} is not "
                               f"supported (expected {VERSION})")
        for key, typ in (("device_kind", str), ("entries", list)):
            if not isinstance(doc.get(key), typ):
                raise ProfileError(f"profile {path}: {key!r} is missing or not a "
                                   f"{typ.__name__}")
        meta = doc.get("meta", {})
        if not isinstance(meta, dict):
            raise ProfileError(f"profile {path}: 'meta' is not an object")
        entries: dict[Signature, float] = {}
        for k, e in enumerate(doc["entries"]):
            sig, sec = _parse_entry(e, f"profile {path}: entry {k}")
            if sig in entries:
                raise ProfileError(f"profile {path}: entry {k} repeats signature {sig}")
            entries[sig] = sec
        return cls(doc["device_kind"], entries, meta)


def _parse_entry(e, where: str) -> tuple[Signature, float]:
    if not isinstance(e, dict):
        raise ProfileError(f"{where}: expected an object, got {type(e).__name__}")
    missing = [k for k in ("op", "dtype", "in_shapes", "out_shape", "seconds") if k not in e]
    if missing:
        raise ProfileError(f"{where}: missing key(s) {', '.join(missing)}")
    for k in ("op", "dtype"):
        if not isinstance(e[k], str):
            raise ProfileError(f"{where}: {k} is {e[k]!r}; expected a string")
    sec = e["seconds"]
    if isinstance(sec, bool) or not isinstance(sec, (int, float)) or not math.isfinite(sec) \
            or sec < 0:
        raise ProfileError(f"{where}: seconds is {sec!r}; expected a finite number >= 0")
    if not isinstance(e["in_shapes"], list):
        raise ProfileError(f"{where}: in_shapes is {e['in_shapes']!r}; expected a list of shapes")
    ins = tuple(_parse_shape(s, f"{where}: in_shapes[{j}]") for j, s in enumerate(e["in_shapes"]))
    return (e["op"], e["dtype"], ins, _parse_shape(e["out_shape"], f"{where}: out_shape")), \
        float(sec)


def _parse_shape(s, where: str) -> Shape:
    if not isinstance(s, list) or not all(type(d) is int and d > 0 for d in s):
        raise ProfileError(f"{where} is {s!r}; expected a list of positive integers")
    return tuple(s)


# -- measuring ---------------------------------------------------------------------------
def profile_graph(graph: Graph, device: str | torch.device = "cpu", repeats: int = 10,
                  warmup: int = 2, max_ops: int | None = None, time_limit: float | None = None,
                  progress: bool = True) -> Profile:
    """Time every distinct op signature of ``graph`` on the local ``device`` with PyTorch.

    Each signature (views and inputs excepted: they cost nothing) runs a proxy kernel of
    its op class built from its shapes and dtype, ``warmup`` times untimed and then
    ``repeats`` times timed one by one with :func:`time.perf_counter` (synchronizing an
    accelerator around each run); the median is kept. A kernel the dtype does not
    support on the device is measured in float32. Input tensors come from a local
    generator seeded 0, so no global random state is touched.

    Parameters
    ----------
    graph : Graph
    device : str or torch.device
        Where to measure, e.g. ``"cpu"`` or ``"cuda:0"``.
    repeats, warmup : int
        Timed and untimed runs per signature.
    max_ops : int, optional
        Measure at most this many signatures.
    time_limit : float, optional
        Stop after this many seconds (past it by one kernel run at most): no new
        signature starts, and the one running keeps the median of the repeats it timed
        (``meta["repeats_cut"]`` counts such signatures, 0 or 1).
    progress : bool
        Show a progress bar.

    Returns
    -------
    Profile
        ``device_kind`` names the local device (``"cpu:<model>"`` or the CUDA device
        name); use :meth:`Profile.for_kind` to apply it to a cluster's device kind.
        ``meta["measured"]`` and ``meta["signatures"]`` tell how many of the graph's
        signatures were measured; ``meta["too_large"]`` how many were left to the roofline
        because their tensors would take more than half the device's memory.

    Raises
    ------
    ProfileError
        ``device`` is not a device PyTorch can use here (unknown, or CUDA without it).

    Examples
    --------
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> p = profile_graph(mlp_training_graph(layers=1, hidden=8, batch=4), repeats=1,
    ...                   progress=False)
    >>> p.meta["measured"] == p.meta["signatures"] == len(p.entries)
    True
    """
    import torch
    from rich.progress import Progress

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    dev = usable_device(device)
    sync: Callable[[], None] = ((lambda: torch.accelerator.synchronize(dev))
                                if dev.type != "cpu" else (lambda: None))
    todo: dict[Signature, float] = {}  # signature -> FLOPs of its first node
    for i, sig in enumerate(_signatures(graph)):
        if op_class(sig[0]) not in _FREE:
            todo.setdefault(sig, float(graph.flops[i]))
    n_todo = len(todo) if max_ops is None else min(len(todo), max_ops)
    entries: dict[Signature, float] = {}
    fallbacks = too_large = cut = 0
    room = _memory(dev) // 2  # a graph file says how large its ops are: never allocate all of it
    start = time.perf_counter()
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task(f"profiling {graph.name}", total=n_todo)
        for sig, flops in itertools.islice(todo.items(), n_todo):
            if time_limit is not None and time.perf_counter() - start > time_limit:
                break
            itemsize = max(_torch_dtype(sig[1]).itemsize, 4)  # float32 is the fallback
            if (sum(map(_numel, sig[2])) + _numel(sig[3])) * itemsize > room:
                too_large += 1
                bar.advance(task)
                continue
            try:
                fn = _kernel(sig, flops, _torch_dtype(sig[1]), dev)
                fn()
            except _KERNEL_ERRORS:
                fn = _kernel(sig, flops, torch.float32, dev)
                fallbacks += 1
            deadline = None if time_limit is None else start + time_limit
            for _ in range(warmup):
                if deadline is not None and time.perf_counter() > deadline:
                    break
                fn()
            times = []
            for _ in range(repeats):  # at least one timed run, then until the deadline
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                times.append(time.perf_counter() - t0)
                if deadline is not None and t0 + times[-1] > deadline:
                    cut += 1
                    break
            entries[sig] = statistics.median(times)
            bar.advance(task)
    meta = {"host": platform.node(), "torch": torch.__version__, "device": str(dev),
            "device_name": _device_name(dev), "repeats": repeats, "warmup": warmup,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "graph": graph.name, "measured": len(entries), "signatures": len(todo),
            "float32_fallbacks": fallbacks, "too_large": too_large, "repeats_cut": cut,
            "seconds_spent": round(time.perf_counter() - start, 3)}
    kind = f"cpu:{meta['device_name']}" if dev.type == "cpu" else meta["device_name"]
    return Profile(kind, entries, meta)


def usable_device(device: str | torch.device, error: type[GraphoptError] = ProfileError,
                  label: str = "device") -> torch.device:
    """``device`` as a torch device, after allocating on it once, so that an unknown or
    absent device fails here, not in the middle of a run.

    Raises
    ------
    GraphoptError
        (``error``) One line: ``label``, the name and torch's reason.

    Examples
    --------
    >>> usable_device("cpu")
    device(type='cpu')
    >>> usable_device("bogus")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    graphopt.errors.ProfileError: device 'bogus': not a usable PyTorch device here (...)
    """
    import torch

    try:
        dev = torch.device(device)
        torch.empty(1, device=dev)
    except (RuntimeError, AssertionError) as err:
        raise error(f"{label} {str(device)!r}: not a usable PyTorch device here "
                    f"({str(err).splitlines()[0][:120]})") from None
    if dev.type == "meta":  # it allocates, but its tensors hold no data and nothing runs
        raise error(f"{label} {str(device)!r}: not a usable PyTorch device here (meta tensors "
                    "hold no data)")
    return dev


def _device_name(dev: torch.device) -> str:
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type != "cpu":
        return dev.type
    if platform.processor():
        return platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown"


def _torch_dtype(name: str) -> torch.dtype:
    import torch

    name = name.replace("torch.", "")
    dt = getattr(torch, _DTYPE_ALIASES.get(name, name), None)
    return dt if isinstance(dt, torch.dtype) else torch.float32


def _memory(dev: torch.device) -> int:
    """Bytes of memory of ``dev``: the GPU's, or this machine's for anything else."""
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _kernel(sig: Signature, flops: float, dtype: torch.dtype, dev: torch.device) -> Callable:
    """A no-argument function running the proxy kernel of ``sig``; its tensors are built now."""
    import torch
    import torch.nn.functional as F

    op, _, ins, out = sig
    gen = torch.Generator(dev).manual_seed(0)

    def t(shape: Shape) -> torch.Tensor:
        shape = tuple(shape) or (1,)
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(shape, generator=gen, dtype=dtype, device=dev)
        return torch.randint(0, 2, shape, generator=gen, dtype=dtype, device=dev)

    cls = op_class(op)
    if cls == "matmul":
        for a, b in itertools.permutations([s for s in ins if len(s) >= 2], 2):
            try:
                batch = np.broadcast_shapes(a[:-2], b[:-2])
            except ValueError:
                continue
            if a[-1] == b[-2] and _numel(batch) * a[-2] * b[-1] == _numel(out):
                x, y = t(a), t(b)
                return lambda: torch.matmul(x, y)
        return _gemm(out, flops, t)
    if cls == "conv":
        for x, w in itertools.permutations([s for s in ins if len(s) == 4], 2):
            if len(out) != 4 or x[0] != out[0] or w[0] != out[1] or x[1] % w[1] \
                    or not math.isclose(2 * _numel(out) * _numel(w[1:]), flops, rel_tol=0.1):
                continue
            sp = [_stride_pad(x[d], w[d], out[d]) for d in (2, 3)]
            if None not in sp:
                xt, wt, groups = t(x), t(w), x[1] // w[1]
                stride, pad = (sp[0][0], sp[1][0]), (sp[0][1], sp[1][1])
                return lambda: F.conv2d(xt, wt, stride=stride, padding=pad, groups=groups)
        return _gemm(out, flops, t)
    if cls == "elementwise":
        args = [t(out) for _ in range(max(len(ins), 1))]
        for fn in (getattr(torch, op, None), getattr(F, op, None)):
            if callable(fn):
                try:
                    fn(*args)
                except _KERNEL_ERRORS:
                    continue
                return lambda: fn(*args)
        a, b = args[0], args[-1]
        return lambda: torch.add(a, b)
    if cls == "reduction":
        x, m = t(ins[0] if ins else out), max(_numel(out), 1)
        if x.numel() % m:
            return lambda: x.sum()
        lead = m in itertools.accumulate(x.shape, operator.mul)
        y, dim = (x.reshape(m, -1), 1) if lead else (x.reshape(-1, m), 0)
        return lambda: y.sum(dim)
    if cls == "softmax":
        x = t(out)
        return lambda: torch.softmax(x, -1)
    if cls == "norm":
        x = t(out)
        return lambda: F.layer_norm(x, x.shape[-1:])
    if cls == "embedding":
        d = out[-1] if out else 1
        rows = max(_numel(out) // d, 1)
        table = t(next((s for s in ins if len(s) == 2 and s[-1] == d), (rows, d)))
        idx = torch.randint(0, table.shape[0], (rows,), generator=gen, device=dev)
        return lambda: torch.index_select(table, 0, idx)
    if cls == "data_movement" and len(out) >= 2:
        x = t(out)
        return lambda: x.transpose(-1, -2).contiguous()
    if cls == "pool" and len(out) == 4:
        src = next((s for s in ins if len(s) == 4 and s[2] >= out[2] and s[3] >= out[3]), None)
        if src is not None:
            x, k = t(src), (src[2] // out[2], src[3] // out[3])
            return lambda: F.max_pool2d(x, k)
    x = t(out)
    return lambda: x.clone()


def _gemm(out: Shape, flops: float, t: Callable) -> Callable:
    """An ``(m, k) @ (k, n)`` product of ``flops`` FLOPs whose ``m * n`` output has the size
    of ``out``, split between leading and trailing dimensions where ``m + n`` (and so the
    operands) is smallest."""
    import torch

    size = max(_numel(out), 1)
    m = min([1, *itertools.accumulate(out, operator.mul)], key=lambda m: m + size // m)
    k = max(round(flops / (2 * size)), 1)
    x, y = t((m, k)), t((k, size // m))
    return lambda: torch.mm(x, y)


def _stride_pad(size: int, k: int, o: int) -> tuple[int, int] | None:
    """A (stride, padding) taking a dimension of ``size`` to ``o`` with kernel ``k``:
    the largest stride (patchify and strided 1x1 convolutions first), then the least
    padding."""
    for s in range(max(k, 2), 0, -1):
        for p in range(k):
            if size + 2 * p >= k and (size + 2 * p - k) // s + 1 == o:
                return s, p
    return None
