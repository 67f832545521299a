"""Device maps run for real: the memory each device of an accelerate ``device_map`` holds,
measured on this machine's CPU.

A map's devices need not exist here: each device's share of one inference forward is
measured as its modules run, in one process on the CPU, and added up as
accelerate's ``dispatch_model`` would hold it (:func:`~graphopt.exec.export.execution_device`):

- the **weights** (parameters and buffers, each tensor once per device) of the modules
  mapped to a device, for the whole forward, where they are stored;
- on the device that runs them, for each call of a mapped module, the bytes of the
  tensors it is called with (accelerate copies them there), plus the highest running
  total of what the call allocates and frees (PyTorch's profiler memory records, one per
  allocation and free, between the call's start and end:
  :func:`~graphopt.exec.runner.allocation_peak`), where a module stored on ``"cpu"``
  or ``"disk"`` but run on the main device counts each submodule's own weights as
  allocated for that submodule's call, as accelerate loads them; the device's figure
  is the highest over its calls.

What it does not measure: tensors a device keeps between two calls of its modules other
than their arguments (a skip connection that passes over a module of another device),
the allocator's overheads and fragmentation, and copies accelerate makes beyond the
arguments (the output moved back to the caller's device).
"""

from __future__ import annotations

import torch
from torch import nn

from graphopt.exec.export import Device, device_order, execution_device
from graphopt.exec.runner import AllocationPeak, allocation_peak

__all__ = ["measure_map_memory", "tensor_bytes"]

_MARK = "graphopt-map"


def tensor_bytes(tensors) -> int:
    """Bytes of the storages of ``tensors`` (an iterable, nested lists, tuples and dicts
    looked into), each storage once."""
    seen: dict[int, int] = {}

    def visit(x) -> None:
        if isinstance(x, torch.Tensor):
            st = x.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif isinstance(x, dict):
            for y in x.values():
                visit(y)

    visit(list(tensors))
    return int(sum(seen.values()))


def _weights(model: nn.Module, key: str) -> list[torch.Tensor]:
    """The parameters and buffers a map entry holds: a module's (all of them), or one
    tensor named by its qualified name."""
    try:
        mod = model.get_submodule(key)
    except AttributeError:
        owner, _, name = key.rpartition(".")
        try:
            return [getattr(model.get_submodule(owner), name)]
        except AttributeError:
            raise ValueError(f"device map entry {key!r}: {type(model).__name__} has no such "
                             "module, parameter or buffer") from None
    return [*mod.parameters(), *mod.buffers()]


def measure_map_memory(model: nn.Module, args: tuple, device_map: dict[str, Device],
                       kwargs: dict | None = None) -> dict[Device, int]:
    """Peak bytes on each device of ``device_map`` for one forward of ``model`` on
    ``args`` under ``torch.no_grad``, measured as the module docstring says.

    Parameters
    ----------
    model : nn.Module
        On the CPU, not dispatched (its modules are called as they are).
    args : tuple
        Its positional inputs; ``kwargs`` the others.
    device_map : dict
        ``{module path or parameter name: device}``, as accelerate takes it.

    Returns
    -------
    dict
        ``{device: bytes}`` in accelerate's order (GPUs, ``"cpu"``, ``"disk"``).

    Raises
    ------
    ValueError
        An entry of the map names nothing in ``model``.

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    >>> mem = measure_map_memory(net, (torch.randn(8, 64),), {"0": 0, "1": 1})
    >>> mem[0] >= 64 * 65 * 4 and mem[1] >= 64 * 65 * 4
    True
    """
    from torch.profiler import record_function

    run = execution_device(device_map)
    devices = device_order(list(device_map.values()) + list(run.values()))
    resident = dict.fromkeys(devices, 0)
    seen: dict[Device, set[int]] = {d: set() for d in devices}
    for key, dev in device_map.items():
        for t in _weights(model, key):
            if t.data_ptr() not in seen[dev]:
                seen[dev].add(t.data_ptr())
                resident[dev] += t.numel() * t.element_size()
    names = {n for n, _ in model.named_modules()}
    calls: list[tuple[str, int]] = []  # (entry, bytes of its arguments), in call order

    def mark(text: str) -> None:
        with record_function(f"{_MARK}:{text}"):  # empty: it only stamps a time
            pass

    def before(key: str):
        def hook(module, a, kw) -> None:
            mark(f"{len(calls)}:begin")
            calls.append((key, tensor_bytes([a, kw])))
        return hook

    def after(key: str):
        def hook(module, a, kw, out) -> None:
            mark(f"{len(calls) - 1}:end")
        return hook

    loads: list[int] = []  # bytes accelerate loads for each call of an offloaded submodule
    open_loads: list[int] = []  # the calls begun and not ended (a submodule's children)

    def load(size: int, end: bool):
        def hook(module, *_) -> None:
            if not end:
                open_loads.append(len(loads))
                loads.append(size)
            mark(f"load{open_loads.pop() if end else open_loads[-1]}:{'end' if end else 'begin'}")
        return hook

    handles = []
    for key, dev in device_map.items():  # stored off where it runs: loaded per submodule
        if run[dev] == dev or key not in names:
            continue
        for sub in model.get_submodule(key).modules():
            size = sum(t.numel() * t.element_size() for t in
                       [*sub.parameters(recurse=False), *sub.buffers(recurse=False)]
                       if t.data_ptr() not in seen[run[dev]])  # a tied one is there already
            if size:
                handles.append(sub.register_forward_pre_hook(load(size, False)))
                handles.append(sub.register_forward_hook(load(size, True)))
    for key in device_map:
        try:
            mods = [model.get_submodule(key)]
        except AttributeError:  # a parameter mapped by name: no call of its own
            continue
        while any(isinstance(m, (nn.ModuleList, nn.ModuleDict)) for m in mods):
            mods = [c for m in mods for c in (m.children() if isinstance(
                m, (nn.ModuleList, nn.ModuleDict)) else [m])]  # containers are never called
        # a call's begin mark comes first (prepend) and its end mark after the load hooks':
        # the window of an offloaded module's call holds the load of its own weights
        for mod in mods:
            handles.append(mod.register_forward_pre_hook(before(key), with_kwargs=True,
                                                         prepend=True))
            handles.append(mod.register_forward_hook(after(key), with_kwargs=True))
    try:
        with AllocationPeak() as meter, torch.no_grad():
            model(*args, **(kwargs or {}))
    finally:
        for h in handles:
            h.remove()
    stamps = meter.marks  # the records' clock (ns), so a call's window needs no conversion
    records = list(meter.records)
    for i, size in enumerate(loads):  # a load as an allocation from its call's start to end
        records += [(stamps[f"{_MARK}:load{i}:begin"], size),
                    (stamps[f"{_MARK}:load{i}:end"], -size)]
    records.sort(key=lambda r: r[0])
    working = dict.fromkeys(devices, 0)
    for k, (key, arg_bytes) in enumerate(calls):
        home = device_map[key]
        window = (stamps[f"{_MARK}:{k}:begin"], stamps[f"{_MARK}:{k}:end"])
        used = arg_bytes + allocation_peak(records, window)
        working[run[home]] = max(working[run[home]], used)
    return {d: int(resident[d] + working[d]) for d in devices}
