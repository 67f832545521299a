"""The engine's CUDA path: one stream per device, copy streams, events. Skipped without a
GPU; with one GPU, a plan's devices are streams of that GPU (the ordering is the same)."""

import numpy as np
import pytest
import torch

from graphopt.exec.api import apply
from graphopt.exec.program import compile_program
from graphopt.exec.runner import run_inprocess
from graphopt.frontends.torch import trace_program
from graphopt.sim import Plan

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _mlp() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.Tanh(), torch.nn.Linear(256, 10))
    return model, (torch.randn(32, 64),)


def _steps(traced, plan, devices: int, steps: int) -> tuple[torch.Tensor, dict]:
    prog = compile_program(traced, plan, devices)
    gpus = [torch.device("cuda", d % torch.cuda.device_count()) for d in range(devices)]
    values = {n: (d, v.clone()) for n, (d, v) in prog.feeds.items()}
    losses = []
    for step in range(steps):
        out, table = run_inprocess(prog, step, values, gpus)
        values = {n: (d, table[n]) for n, (d, _) in values.items()}
        losses.append(out[0].cpu())
    return torch.stack(losses), {name: values[n][1].cpu() for n, name in prog.state.items()}


def test_one_gpu_matches_the_cpu_engine():
    model, inputs = _mlp()
    torch.backends.cuda.matmul.allow_tf32 = False
    with apply(model, inputs, devices="cuda:1") as gpu, apply(model, inputs, devices="cpu:1") as cpu:
        for _ in range(3):
            a, b = gpu(), cpu()
            assert a.outputs[0].is_cuda
            torch.testing.assert_close(a.outputs[0].cpu(), b.outputs[0], rtol=1e-5, atol=1e-6)
            # the step time waits for the GPU: it covers every op's span as the GPU ran it
            ops = [e for e in a.events if e[0] == "op"]
            assert ops and all(e[4] >= e[3] for e in ops)
            assert a.seconds >= max(e[4] for e in ops) - min(e[3] for e in ops) - 1e-6
        for k, v in gpu.state_dict().items():
            torch.testing.assert_close(v, cpu.state_dict()[k], rtol=1e-5, atol=1e-6)


def test_random_plans_on_two_devices_equal_one_device_bitwise():
    """Random placements and priorities: every transfer and every in-place update after a
    send is ordered by events, so the result is the one-device result, bit for bit."""
    model, inputs = _mlp()
    traced = trace_program(model, inputs, training=True)
    ref_losses, ref_state = _steps(traced, None, 1, 4)
    n = traced.graph.num_nodes
    rng = np.random.default_rng(0)
    for _ in range(8):
        plan = Plan(placement=rng.integers(0, 2, n), priority=rng.random(n))
        losses, state = _steps(traced, plan, 2, 4)
        assert torch.equal(losses, ref_losses)
        for k, v in ref_state.items():
            assert torch.equal(state[k], v), k
