"""The placed-execution engine: numerics equal to the unplaced program, no deadlock for
any plan, clean failures."""

import os
import signal
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphopt.errors import ExecutionError, GraphoptError, PlanError
from graphopt.exec.api import PlacedProgram, apply, apply_traced, parse_devices, save_trace
from graphopt.exec.program import compile_program
from graphopt.exec.runner import run_inprocess
from graphopt.exec.workers import CPUWorkers, device_cores
from graphopt.frontends.torch import trace_program
from graphopt.sim import Plan
from graphopt.zoo.models import FAMILIES
from tests.zoo.test_models import TINY


def _traced(family: str):
    model, inputs = FAMILIES[family].make(**TINY[family])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trace_program(model, inputs, training=True)


def _fresh(prog):
    return {n: (d, v.clone() if isinstance(v, torch.Tensor) else v) for n, (d, v) in prog.feeds.items()}


def _reference(traced, seed=0, threads=None):
    """The unplaced program: every op on one device in FX order, with as many threads as
    a worker has (float sums associate by thread count, and batch norm over a batch of
    two magnifies that)."""
    prog = compile_program(traced, None, 1)
    before = torch.get_num_threads()
    torch.set_num_threads(threads or len(device_cores(2)[0]))
    try:
        out, values = run_inprocess(prog, seed, _fresh(prog))
    finally:
        torch.set_num_threads(before)
    return out, {prog.state[n]: values[n] for n in prog.state}


def _random_plan(graph, devices, seed):
    rng = np.random.default_rng(seed)
    return Plan(placement=rng.integers(0, devices, graph.num_nodes), priority=rng.random(graph.num_nodes))


def _assert_state_close(a: dict, b: dict, exact: bool):
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            # Workers use their own thread counts, so float sums may associate differently:
            # the error is measured against the tensor's scale.
            x, y = a[k].double(), b[k].double()
            assert float((x - y).abs().max()) <= 1e-4 * max(float(y.abs().max()), 1e-3), k


@pytest.fixture(scope="module")
def pool():
    with CPUWorkers(2, timeout=60) as p:
        yield p


@pytest.mark.parametrize("family", sorted(TINY))
def test_every_family_equals_the_unplaced_step(family, pool):
    traced = _traced(family)
    ref_out, ref_state = _reference(traced, seed=5, threads=torch.get_num_threads())
    # one device, the plan's own order: bitwise equal
    prog = compile_program(traced, _random_plan(traced.graph, 1, 0), 1)
    out, values = run_inprocess(prog, 5, _fresh(prog))
    assert torch.equal(out[0], ref_out[0])
    _assert_state_close({prog.state[n]: values[n] for n in prog.state}, ref_state, exact=True)
    ref_out, ref_state = _reference(traced, seed=5)
    # two worker processes, a random placement and order
    prog = compile_program(traced, _random_plan(traced.graph, 2, 1), 2)
    pool.load(prog)
    values, _ = pool.step(5)
    loss = values[prog.outputs[0].node]
    torch.testing.assert_close(loss, ref_out[0], rtol=1e-4, atol=1e-5)
    _assert_state_close({prog.state[n]: v for n, v in pool.state().items()}, ref_state, exact=False)


class _RNNLM(torch.nn.Module):
    def __init__(self, cell: str):
        super().__init__()
        self.rnn = getattr(torch.nn, cell)(8, 16, 2, batch_first=True)
        self.out = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.out(self.rnn(x)[0])


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_torch_rnn_modules_run_under_any_split(cell, pool):
    """nn.LSTM's and nn.GRU's backward write gate activations in place; a placement that
    splits a cell reads them on another device before and after the write, which one
    transfer cannot carry: those readers move to the writer, and the step is unchanged."""
    torch.manual_seed(0)
    traced = trace_program(_RNNLM(cell), (torch.randn(2, 5, 8),), training=True)
    ref_out, ref_state = _reference(traced, seed=3)
    prog = compile_program(traced, _random_plan(traced.graph, 2, 4), 2)
    pool.load(prog)
    values, _ = pool.step(3)
    torch.testing.assert_close(values[prog.outputs[0].node], ref_out[0], rtol=1e-4, atol=1e-5)
    _assert_state_close({prog.state[n]: v for n, v in pool.state().items()}, ref_state, exact=False)


def _transformer_encoder():
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), (torch.randn(2, 6, 16),)


def _graph_sage():
    from torch_geometric.nn.models import GraphSAGE

    edges = torch.randint(0, 12, (2, 40), generator=torch.Generator().manual_seed(0))
    return GraphSAGE(8, 16, num_layers=2, out_channels=4), (torch.randn(12, 8), edges)


@pytest.mark.parametrize("make", [_transformer_encoder, _graph_sage], ids=["TransformerEncoder", "GraphSAGE"])
def test_models_written_elsewhere_run_placed(make, pool):
    """Models written elsewhere: PyTorch's own transformer encoder, PyG's GraphSAGE."""
    torch.manual_seed(0)
    model, inputs = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = trace_program(model, inputs, training=True)
    ref_out, ref_state = _reference(traced, seed=0)
    with PlacedProgram(traced, _random_plan(traced.graph, 2, 7), "cpu:2", pool=pool) as placed:
        torch.testing.assert_close(placed().outputs[0], ref_out[0], rtol=1e-4, atol=1e-5)
        _assert_state_close(placed.state_dict(), ref_state, exact=False)
        assert pool.holds(placed.program)
    assert not pool.holds(placed.program)


class _MixedValues(torch.nn.Module):
    """Ops whose values hold several tensors of several dtypes: topk's values and int64
    indices, max pooling with its indices in the backward pass, bool masks."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.lin = torch.nn.Linear(32, 8)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(self.conv(x), 2).flatten(1)
        values, index = torch.topk(self.lin(y), 3, dim=1)
        return (values * (y[:, :3] > 0)).sum() + index.float().mean()


def test_values_of_several_tensors_and_dtypes_cross_devices(pool):
    """Every op on the other device from the one before it, so that nearly every value
    crosses, several tensors of mixed dtypes in one message."""
    torch.manual_seed(0)
    traced = trace_program(_MixedValues(), (torch.randn(3, 2, 4, 8),), training=True)
    ref_out, ref_state = _reference(traced, seed=0)
    plan = Plan(placement=np.arange(traced.graph.num_nodes) % 2)
    with PlacedProgram(traced, plan, "cpu:2", pool=pool) as placed:
        specs = [placed.program.specs[t.node] for t in placed.program.transfers]
        assert len(specs) > 10 and any(s[0] in ("tuple", "list") and len(s[1]) > 1 for s in specs)
        torch.testing.assert_close(placed().outputs[0], ref_out[0], rtol=1e-4, atol=1e-5)
        _assert_state_close(placed.state_dict(), ref_state, exact=False)


def test_one_device_step_equals_eager_sgd():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(5, 6)
    with apply(model, (x,), devices="cpu:1") as step:
        loss = step().outputs[0]
        after = step.state_dict()
    eager = model(x).mean()
    eager.backward()
    torch.testing.assert_close(loss, eager.detach())
    for name, p in model.named_parameters():
        torch.testing.assert_close(after[name], p.detach() - 1e-3 * p.grad, rtol=1e-6, atol=1e-7)


def test_in_process_drops_a_value_after_its_last_reader(monkeypatch):
    """A deep chain holds a few values at a time, not one per op (the state and the
    saved activations of backward aside)."""
    from graphopt.exec import runner

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Tanh() for _ in range(40)])
    x = torch.randn(3, 4)
    traced = trace_program(model, (x,), training=False)
    prog = compile_program(traced, None, 1)
    live = []
    run = runner.run_op
    monkeypatch.setattr(runner, "run_op",
                        lambda ins, values, *a: live.append(len(values)) or run(ins, values, *a))
    out, state = run_inprocess(prog, 0, _fresh(prog))
    torch.testing.assert_close(out[0], model(x))
    assert len(prog.instrs) >= 40 and max(live) <= len(prog.feeds) + 2
    assert state.keys() == prog.feeds.keys()


class _RandomDag(torch.nn.Module):
    """Node i reads a random subset of earlier nodes; one linear layer per node."""

    def __init__(self, inputs: list[list[int]], width: int = 4):
        super().__init__()
        self.inputs = inputs
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in inputs)

    def forward(self, x):
        values = [x]
        for layer, ins in zip(self.layers, self.inputs):
            h = values[ins[0]]
            for j in ins[1:]:
                h = h * values[j]
            values.append(torch.tanh(layer(h)))
        return values[-1]


@st.composite
def _dags(draw):
    n = draw(st.integers(1, 6))
    inputs = [sorted(set(draw(st.lists(st.integers(0, i), min_size=1, max_size=3)))) for i in range(n)]
    return inputs, draw(st.integers(0, 2**31 - 1))


@pytest.fixture(scope="module")
def pool3():
    with CPUWorkers(3, timeout=30) as p:
        yield p


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_dags())
def test_no_deadlock_for_random_graphs_placements_and_priorities(pool3, dag):
    inputs, seed = dag
    torch.manual_seed(seed % 1000)
    traced = trace_program(_RandomDag(inputs), (torch.randn(3, 4),), training=True)
    ref_out, ref_state = _reference(traced, threads=len(device_cores(3)[0]))
    prog = compile_program(traced, _random_plan(traced.graph, 3, seed), 3)
    pool3.load(prog)
    values, _ = pool3.step(0)  # a deadlock would raise ExecutionError after the timeout
    torch.testing.assert_close(values[prog.outputs[0].node], ref_out[0])
    _assert_state_close({prog.state[n]: v for n, v in pool3.state().items()}, ref_state, exact=False)


def test_state_persists_across_steps_like_a_training_job():
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with apply(model, (x,)) as step:
        first, second = step().outputs[0], step().outputs[0]
    assert float(second) < float(first)  # the mean output falls under SGD on its own mean


def test_forward_program_runs_placed():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    x = torch.randn(3, 4)
    traced = trace_program(model, (x,), training=False)
    placed = PlacedProgram(traced, _random_plan(traced.graph, 2, 0), "cpu:2", workers=False)
    torch.testing.assert_close(placed().outputs[0], model(x))


def test_an_op_that_fails_names_itself():
    """An op torch refuses at run time (here: inputs of a shape the trace did not see)
    fails as one line naming the op of the program, not torch's bare message."""
    import dataclasses

    traced = trace_program(torch.nn.Linear(4, 2).eval(), (torch.randn(3, 4),), training=False)
    feeds = tuple(torch.randn(3, 5) if s is None else f for f, s in zip(traced.feeds, traced.state))
    placed = PlacedProgram(dataclasses.replace(traced, feeds=feeds), None, "cpu:1", workers=False)
    with pytest.raises(ExecutionError, match=r"^op '\w+' \(aten::\w+\.\w+\) on device 0: RuntimeError: \S"):
        placed()


def test_tied_weights_run_placed():
    from tests.frontends.test_torch import TiedLM

    model, tokens = TiedLM().eval(), torch.randint(0, 50, (4, 6))
    traced = trace_program(model, (tokens,), training=False)
    placed = PlacedProgram(traced, _random_plan(traced.graph, 2, 0), "cpu:2", workers=False)
    torch.testing.assert_close(placed().outputs[0], model(tokens))


def test_a_script_without_its_main_guard_is_told_why_its_workers_die(tmp_path):
    """Spawned workers import the main script; unguarded, each starts workers of its own."""
    import subprocess
    import sys
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "execution.md").read_text()
    assert 'if __name__ == "__main__":  # the device workers are spawned' in docs
    (tmp_path / "unguarded.py").write_text("from graphopt.exec.workers import CPUWorkers\nCPUWorkers(1)\n")
    bad = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode != 0 and "must do so under `if __name__ == '__main__':`" in bad.stderr


def test_a_killed_worker_fails_cleanly_within_the_timeout():
    traced = trace_program(torch.nn.Linear(4, 2), (torch.randn(3, 4),), training=True)
    pool = CPUWorkers(2, timeout=20)
    pool.load(compile_program(traced, _random_plan(traced.graph, 2, 0), 2))
    os.kill(pool._procs[1].pid, signal.SIGKILL)
    with pytest.raises(ExecutionError, match="device"):
        pool.step(0)


def test_real_trace_has_every_op(tmp_path):
    traced = trace_program(torch.nn.Linear(4, 2), (torch.randn(3, 4),), training=True)
    with apply_traced(traced, _random_plan(traced.graph, 2, 0), "cpu:2") as step:
        result = step()
        timing = step.measure(steps=3)
    path = save_trace(result, tmp_path / "real.json", 2)
    import json

    names = {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "op"}
    assert len(names) == sum(n.op == "call_function" for n in traced.module.graph.nodes)
    assert timing["min"] <= timing["median"] <= timing["max"] and timing["steps"] == 3


def test_programs_sharing_a_pool_run_their_own_plans_in_turns(pool):
    """A pool holds several programs, each with its own state: plans measured in turns
    each run their own program and go on from their own last step."""
    from graphopt.exec.api import measure_plans

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    traced = trace_program(model, (torch.randn(3, 4),), training=True)
    n = traced.graph.num_nodes
    split, whole = (PlacedProgram(traced, p, "cpu:2", pool=pool) for p in
                    (_random_plan(traced.graph, 2, 0), Plan(placement=np.zeros(n, int))))
    losses = [[float(p().outputs[0]) for p in (split, whole)] for _ in range(3)]
    for a, b in losses:  # the same training run, step by step
        assert a == pytest.approx(b, rel=1e-5)
    assert losses[0][0] != losses[2][0]  # each went on from its own state
    timings = measure_plans([split, whole], steps=4)
    for t in timings:
        assert t["steps"] == len(t["times"]) == 4 and t["min"] <= t["median"] <= t["max"]
    split.close()
    assert not pool.holds(split.program) and pool.holds(whole.program)
    whole.close()
    with CPUWorkers(2, timeout=60) as other:
        late = PlacedProgram(traced, Plan(placement=np.zeros(n, int)), "cpu:2", pool=other)
    late.close()  # its pool closed first: nothing left to free, no error


def test_shared_slowdown_of_a_program(pool):
    from graphopt.exec.calibrate import shared_slowdown

    traced = trace_program(torch.nn.Linear(64, 64), (torch.randn(32, 64),), training=True)
    s = shared_slowdown(traced, pool, rounds=2)
    assert 1.0 <= s < 10
    with pytest.raises(ExecutionError, match="replicated"):
        pool.load(compile_program(traced, _random_plan(traced.graph, 2, 1), 2), replicate=True)


def test_a_step_with_idle_sleeps_and_the_wake_cost_of_a_program(pool):
    from graphopt.exec.calibrate import WAKE_SLEEPS, _Stages, wake_cost

    traced = trace_program(torch.nn.Linear(64, 64), (torch.randn(32, 64),), training=True)
    prog = compile_program(traced, None, 2)
    pool.load(prog)
    events = pool.step(0, prog, idle=(2, 0.01))[1][0]
    ops = sorted((start, end) for kind, _, start, end, _ in events if kind == "op")
    gaps = [b[0] - a[1] for a, b in zip(ops, ops[1:])]
    # a sleep before every second op, none before the others
    assert all(g >= 0.01 for g in gaps[::2]) and len(ops) >= 4
    assert sum(g >= 0.01 for g in gaps) == len(ops) // 2
    pool.unload(prog)
    stages = trace_program(_Stages(40).eval(), (torch.randn(8, 256),), training=False)
    pairs = wake_cost(stages, pool, rounds=2, idle_per_step=0.02)
    idle, extra = zip(*pairs)
    # a pair per sleep, less those whose gap was not longer than a shorter sleep's (on a
    # loaded machine a 30 us sleep can overshoot 300 us): the gaps increase, and the
    # longest is at least the longest sleep
    assert 1 <= len(pairs) <= len(WAKE_SLEEPS) and list(idle) == sorted(set(idle))
    assert idle[0] >= WAKE_SLEEPS[0] and idle[-1] >= WAKE_SLEEPS[-1]
    assert all(0 <= c < 0.01 for c in extra) and list(extra) == sorted(extra)


def test_transfer_host_work_is_measured_with_any_number_of_workers(pool3):
    """Workers beyond the two that measure join the measurement's barriers (a third one
    used to leave the other two waiting until the timeout)."""
    per_byte, per_message = pool3.transfer_cpu(nbytes=1 << 20, messages=12, repeats=1)
    assert 0 <= per_byte < 1e-6 and 0 <= per_message < 0.1


def test_engine_problem_prices_the_programs_own_time_between_ops(pool, tmp_path):
    from graphopt.exec.calibrate import _engine_time_per_op, engine_problem
    from graphopt.hardware import Calibration

    events = [("op", "a", 0.0, 1.0, None), ("recv", "x", 1.2, 1.2, None), ("op", "b", 1.5, 2.0, None),
              ("step", "step", 0.0, 3.0, None)]
    assert _engine_time_per_op(events) == pytest.approx(0.75)  # (3 - 1.5) / 2 ops
    cal = Calibration(2, 1, 1e-4, 1e9, 0.05, 1e10, 1e10, {})  # a dispatch of 50 ms: absurd on purpose
    cluster = cal.cluster(2.0**33)
    traced = trace_program(torch.nn.Linear(64, 64), (torch.randn(32, 64),), training=True)
    prob = engine_problem(traced, cluster, pool)
    dispatch = {d.dispatch_overhead for d in prob.cluster.devices}
    assert len(dispatch) == 1 and 0 < dispatch.pop() < 0.01
    assert cluster.devices[0].dispatch_overhead == 0.05  # the file's cluster is left as it was


def test_a_transfer_is_one_message_whatever_its_value():
    """Several tensors (any dtypes and strides, empty ones, constants beside them) travel
    as one buffer and come back equal, with the sender's strides."""
    from graphopt.exec.program import value_spec
    from graphopt.exec.runner import empty_like_spec, pack, unpack

    value = (torch.randn(3, 5).t(), torch.arange(7), [torch.tensor([True, False, True]), torch.empty(0, 3)],
             4, torch.randn(2, dtype=torch.float64))
    node = torch.fx.Graph().placeholder("x")
    node.meta["val"] = value
    spec = value_spec(node)
    sent, buffers = pack(value), empty_like_spec(spec)
    assert len(sent) == len(buffers) == 1 and buffers[0].dtype == torch.uint8
    buffers[0].copy_(sent[0])
    got = unpack(spec, buffers)
    assert torch.equal(got[0], value[0]) and got[0].stride() == value[0].stride()
    assert torch.equal(got[1], value[1]) and torch.equal(got[2][0], value[2][0])
    assert torch.equal(got[4], value[4])
    assert got[2][1].shape == (0, 3) and got[3] == 4
    one = torch.randn(4, 4)
    assert pack(one)[0] is one and pack((one, torch.empty(0)))[0] is one  # one tensor: no copy


def test_bad_devices_and_plans_are_clear_errors():
    with pytest.raises(GraphoptError, match="cpu"):
        parse_devices("tpu:2")
    # zero, a superscript digit (isdigit() but not int()), more processes than MAX_WORKERS
    for spec in ("cpu:0", "cpu:\u00b2", "cpu:65", "cpu:1000000000"):
        with pytest.raises(GraphoptError, match=rf"--devices '{spec}': .* with N in 1\.\.64"):
            parse_devices(spec)
    with pytest.raises(ExecutionError, match="1 to 64 worker processes"):
        CPUWorkers(1000)  # a cluster file's thousand devices start no process
    traced = trace_program(torch.nn.Linear(4, 2), (torch.randn(3, 4),), training=True)
    with pytest.raises(PlanError, match="entries"):
        compile_program(traced, Plan(placement=np.zeros(3, int)), 1)


def test_default_cluster_is_the_preset_of_the_gpu(monkeypatch):
    from graphopt.exec.api import default_cluster
    from graphopt.hardware import load_cluster

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    assert default_cluster("cuda", 2) == "h100:2" and load_cluster("h100:2").num_devices == 2
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Tesla V100-SXM2-16GB")
    assert default_cluster("cuda", 1) == "dgx1-v100:1"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "AMD Instinct MI300X")
    with pytest.raises(GraphoptError, match="--cluster"):
        default_cluster("cuda", 1)


def test_cli_run_measures_a_zoo_plan(tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    plan = tmp_path / "plan.json"
    trace = tmp_path / "real.json"
    from graphopt.exec.api import trace_source

    n = trace_source("zoo:rnnlm-2-quick").graph.num_nodes
    Plan(placement=np.zeros(n, int)).save(plan)
    r = CliRunner().invoke(app, ["run", "zoo:rnnlm-2-quick", "--plan", str(plan), "--devices", "cpu:1",
                                 "--steps", "2", "--trace", str(trace)])
    assert r.exit_code == 0, r.output
    assert "measured median" in r.output and trace.exists() and trace.with_suffix(".sim.json").exists()
    assert "peak memory per device" in r.output and "cpu:0" in r.output
    assert "graphopt calibrate --devices cpu:1" in r.output  # the preset is not this host
    bad = CliRunner().invoke(app, ["run", "example:mlp", "--devices", "cpu:1"])
    assert bad.exit_code == 2 and "PyTorch programs" in bad.output


def test_calibration_writes_a_cluster_file_the_simulator_loads(tmp_path):
    from graphopt.exec.calibrate import DEVICE_KIND, WAKE_SLEEPS, calibrate, profile_program
    from graphopt.hardware import load_cluster, save_cluster
    from graphopt.sim import Problem, simulate

    measured = calibrate(2, chain_ops=20, steps=2)
    cal = measured.calibration
    assert cal.latency > 0 and cal.bandwidth > 0 and cal.dispatch >= 0 and cal.matmul_flops > 0
    assert cal.shared_slowdown >= 1 and cal.cores_per_device >= 1 and cal.date
    cluster = load_cluster(str(save_cluster(measured, tmp_path / "cluster.toml")))
    assert cluster.calibration is not None and cluster.calibration.pingpong.keys() == cal.pingpong.keys()
    assert cluster.devices[1].shared_slowdown == pytest.approx(cal.shared_slowdown, rel=1e-12)
    assert cluster.num_devices == 2 and cluster.devices[0].kind == DEVICE_KIND
    assert cluster.devices[0].dispatch_overhead == pytest.approx(cal.dispatch, rel=1e-12)
    assert cluster.latency[0, 1] == pytest.approx(cal.latency, rel=1e-12)
    assert cal.transfer_cpu >= 0 and cluster.overlap_latency
    assert cluster.devices[1].transfer_cpu_overhead == pytest.approx(cal.transfer_overhead, rel=1e-12)
    expected = 1 / cal.transfer_cpu if cal.transfer_cpu > 0 else float("inf")
    assert cluster.devices[0].transfer_cpu_bw == pytest.approx(expected, rel=1e-12)
    # one pair per sleep of WAKE_SLEEPS, less those whose measured idle was not longer than
    # a shorter sleep's (on a loaded machine a 30 us sleep can overshoot a 300 us one)
    idle = [i for i, _ in cal.wake_cost]
    assert 1 <= len(idle) <= len(WAKE_SLEEPS) and idle == sorted(set(idle))
    assert np.allclose(cluster.devices[1].wake_cost, cal.wake_cost, rtol=1e-12, atol=1e-18)
    traced = trace_program(torch.nn.Linear(4, 2), (torch.randn(3, 4),), training=True)
    profile = profile_program(traced, devices=1, steps=2)
    prob = Problem(traced.graph, cluster, profile=profile)
    ops = [i for i in range(prob.num_nodes) if str(traced.graph.op[i]) not in
           ("parameter", "input") and not str(traced.graph.op[i]).endswith("view")]
    assert prob.costs.measured[ops, 0].any()
    # every issued op pays the dispatch; state and inputs cost nothing
    single = simulate(prob, Plan(placement=np.zeros(prob.num_nodes, int),
                                 fusion=np.zeros(prob.num_nodes))).step_time
    assert single >= cal.dispatch * len(ops)


def test_cli_optimize_on_a_calibrated_cluster_times_the_programs_ops(tmp_path):
    """With a cluster of this machine's workers, the search prices a PyTorch program's
    ops as the engine ran them (a tiny program's ops take microseconds each, far above
    the roofline of the calibrated matmul rate)."""
    import json

    from typer.testing import CliRunner

    from graphopt.cli import app
    from graphopt.exec.calibrate import calibrate
    from graphopt.hardware import load_cluster
    from graphopt.sim import Problem, simulate

    from graphopt.hardware import save_cluster

    cluster = str(save_cluster(calibrate(2, chain_ops=20, steps=2), tmp_path / "cluster.toml"))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(3, 4),)), path)
    r = CliRunner().invoke(app, ["optimize", str(path), "-c", cluster, "--methods", "single,expert",
                                 "--budget", "5", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["rows"]
    single = next(row for row in rows if row["method"] == "single")
    from graphopt.frontends.torch import load_program

    g = load_program(str(path)).graph
    roofline = simulate(Problem(g, load_cluster(cluster)), Plan(placement=np.zeros(g.num_nodes, int)))
    assert single["step_time"] > 2 * roofline.step_time
    # the op times it used, kept for `graphopt run --plan`: the same prediction from them
    from graphopt.exec.api import PROGRAM_TIMING, load_program_timing

    kept = load_program_timing(tmp_path / "out" / PROGRAM_TIMING, load_program(str(path)),
                               load_cluster(cluster))
    assert simulate(kept, Plan.load(tmp_path / "out" / "single" / "plan.json")).step_time \
        == single["step_time"]
    from graphopt.exec.calibrate import engine_problem

    prob = engine_problem(load_program(str(path)), load_cluster(cluster))
    plan = _random_plan(prob.graph, 2, 0)
    assert prob.cluster.devices[0].shared_slowdown >= 1
    fused = plan.replace(fusion=np.ones(g.num_nodes))  # the engine fuses nothing
    assert simulate(prob, plan).step_time == simulate(prob, fused).step_time


def test_cli_calibrate(tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    bad = CliRunner().invoke(app, ["calibrate", "--devices", "cuda:1", "-o", str(tmp_path / "c.toml")])
    assert bad.exit_code == 2
    (tmp_path / "file").write_text("")
    bad = CliRunner().invoke(app, ["calibrate", "-o", str(tmp_path / "file" / "c.toml")])
    assert bad.exit_code == 2 and "--out" in bad.output


def test_cli_run_a_torch_export_file_and_refuse_a_plan_of_another_graph(tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(3, 4),)), path)
    r = CliRunner().invoke(app, ["run", str(path), "--devices", "cpu:1", "--steps", "1"])
    assert r.exit_code == 0, r.output
    Plan(placement=np.zeros(3, int)).save(tmp_path / "other.json")
    r = CliRunner().invoke(app, ["run", str(path), "--devices", "cpu:1", "--plan",
                                 str(tmp_path / "other.json")])
    assert r.exit_code == 2 and "plan placement has 3 entries" in r.output


def test_a_plan_of_another_trace_is_refused_by_its_fingerprint():
    a = trace_program(torch.nn.Linear(4, 2), (torch.randn(3, 4),), training=True)
    b = trace_program(torch.nn.Linear(4, 2, bias=False), (torch.randn(3, 4),), training=True)
    stamp = {"name": b.graph.name, "nodes": b.graph.num_nodes, "fingerprint": b.graph.fingerprint()}
    plan = Plan(placement=np.zeros(a.graph.num_nodes, int), meta={"graph": stamp})
    with pytest.raises(PlanError, match="not the same trace"):
        compile_program(a, plan, 1)
    ok = {**stamp, "fingerprint": a.graph.fingerprint()}
    compile_program(a, plan.replace(meta={"graph": ok}), 1)
