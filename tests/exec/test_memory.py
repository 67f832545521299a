"""Peak memory per device, measured from the CPU allocator's events, beside the simulator's."""

import warnings

import numpy as np
import pytest
import torch

from graphopt.exec.api import PlacedProgram, apply, simulated_peak_memory, trace_source
from graphopt.exec.runner import AllocationPeak, allocation_peak, held_bytes
from graphopt.exec.workers import CPUWorkers
from graphopt.hardware import load_cluster
from graphopt.sim import Plan, Problem


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))


def _region() -> None:
    a = torch.empty(1000)  # 4000
    b = torch.empty(500)  # 6000 <- peak
    del a
    c = torch.empty(250)  # 3000
    del b, c


def test_allocation_peak_of_known_allocations():
    state = torch.zeros(100)  # 400 bytes held when the region starts
    view = state[10:]  # the same storage: counted once
    with AllocationPeak([state, view, {"x": state}]) as m:
        _region()
    assert held_bytes(state, view) == 400
    assert m.held == 400 and m.peak == 400 + 6000


def test_windowed_peak_is_the_regions_own_and_ignores_records_outside():
    """One measurement for a whole step and for a part of it (a device map's call): the
    peak over a window of the records is the peak of the window's code profiled alone."""
    from torch.profiler import record_function

    with AllocationPeak() as alone:
        _region()
    with AllocationPeak() as whole:
        before = torch.empty(10_000)  # 40000, allocated before the window, held through it
        with record_function("begin"):
            pass
        _region()
        with record_function("end"):
            pass
        after = torch.empty(20_000)  # 80000, after the window
        del before, after
    window = (whole.marks["begin"], whole.marks["end"])
    assert alone.peak == allocation_peak(alone.records) == 6000
    assert allocation_peak(whole.records, window) == alone.peak
    assert whole.peak == allocation_peak(whole.records) == 40000 + 80000
    # a window's bounds: records at its start count, at its end do not
    recs = [(0, 7), (10, 100), (15, -100), (20, 50), (30, 1000)]
    assert allocation_peak(recs, (10, 30)) == 100 and allocation_peak(recs) == 1057
    assert allocation_peak([], (0, 1)) == 0 and allocation_peak([(0, -5)]) == 0


def test_one_device_peak_is_deterministic_and_covers_every_value():
    x = torch.randn(32, 64)
    peaks = []
    for _ in range(2):  # same model, seed and inputs: the same figure
        with apply(_mlp(), (x,), seed=3) as step:
            step()
            peaks.append(step.peak_memory())
            graph = step.traced.graph
    assert len(peaks[0]) == 1 and peaks[0] == peaks[1]
    # at least the state, and the state with the largest single value beside it
    assert peaks[0][0] >= graph.persistent_bytes.sum() + graph.out_bytes.max()


def test_one_device_measured_peak_is_the_simulated_one():
    """On one device the engine frees a value after its last reader, as the simulator
    does, and a view keeps its base: what the allocator saw is what the simulator adds up
    (up to the loss's and the inputs' few bytes)."""
    x = torch.randn(32, 64)
    with apply(_mlp(), (x,)) as step:
        step()
        measured = step.peak_memory()[0]
        prob = Problem(step.traced.graph, load_cluster("cpu:1"))
        simulated = simulated_peak_memory(prob, Plan(), "cpu:1", step.traced)[0]
    assert abs(simulated / measured - 1) < 0.02, (simulated, measured)


@pytest.fixture(scope="module")
def pool():
    with CPUWorkers(2, timeout=60) as p:
        yield p


def test_two_workers_measure_each_device_within_ten_percent(pool):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = trace_source("zoo:rnnlm-2-quick")
    g = traced.graph
    # every other module on the second device: many transfers both ways
    plan = Plan(placement=np.unique(g.module, return_inverse=True)[1] % 2)
    prob = Problem(g, load_cluster("cpu:2"))
    with PlacedProgram(traced, plan, "cpu:2", pool=pool) as placed:
        placed()
        measured = placed.peak_memory()
    simulated = simulated_peak_memory(prob, plan, "cpu:2", traced)
    assert len(measured) == 2 and all(m > 0 for m in measured)
    for d in range(2):
        on_d = plan.placement == d
        assert measured[d] >= g.persistent_bytes[on_d].sum() + g.out_bytes[on_d].max()
        assert abs(simulated[d] / measured[d] - 1) < 0.10, (d, simulated, measured)


def test_a_transformers_model_runs_and_its_constants_are_inputs():
    """hf: sources run for real; their traces keep tensor constants (get_attr nodes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = trace_source("hf:gpt2:n_layer=1,n_embd=32,n_head=2,vocab_size=100,seq=8,batch=2")
    assert any(n.op == "get_attr" for n in traced.module.graph.nodes)
    with PlacedProgram(traced, None, "cpu:1") as step:
        loss = step().outputs[0]
        assert torch.isfinite(loss)
        assert len(step.peak_memory()) == 1


def test_measuring_prints_no_profiler_noise_and_leaves_stderr_working(capfd):
    import sys

    with AllocationPeak([]) as m:
        x = torch.empty(256)
        del x
    print("after", file=sys.stderr)
    err = capfd.readouterr().err
    assert m.peak == 1024 and "USDT" not in err and "after" in err
