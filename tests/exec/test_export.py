"""Plans exported to accelerate's device map and torch pipelining's split points."""

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.errors import PlanError
from graphopt.exec.export import device_map, forward_ops, pipeline_split
from graphopt.frontends.torch import trace_program
from graphopt.hardware import load_cluster
from graphopt.ir import save_graph
from graphopt.sim import Plan

DOCS = Path(__file__).parents[2] / "docs" / "execution.md"
STAGE = {"0": 0, "1": 0, "2": 1, "3": 1}  # module -> device: two stages of two layers


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])


@pytest.fixture(scope="module")
def step():
    """A training step of four named layers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trace_program(_net(), (torch.randn(4, 8),), training=True)


def _staged(graph) -> np.ndarray:
    """Layers 0-1 on device 0, layers 2-3 and the loss on device 1, the input on 0."""
    place = np.array([STAGE.get(str(m), 1) for m in graph.module])
    place[graph.index["input"]] = 0
    return place


def test_forward_ops_are_the_loss_and_what_it_reads(step):
    fwd = forward_ops(step)
    names = set(step.graph.names[fwd].tolist())
    assert {"input", "addmm", "addmm_3", "mean", "0.weight"} <= names
    assert not any("sgd_update" in n or n.startswith("mm") for n in names)
    with pytest.raises(PlanError, match="training step"):
        forward_ops(step.graph)


def test_stage_plan_gives_the_module_map_and_split_points(step):
    plan = Plan(placement=_staged(step.graph))
    dm = device_map(step.graph, plan)
    assert dm.device_map == {"0": 0, "1": 0, "2": 1, "3": 1}
    assert dm.disagree == [] and dm.disagree_seconds == 0 and dm.total_seconds > 0
    split = pipeline_split(step, plan)
    assert split.split_spec == {"2": "beginning"} and split.stages == [0, 1]
    one = pipeline_split(step, Plan())
    assert one.split_spec == {} and one.stages == [0]
    assert device_map(step.graph, Plan()).device_map == {"": 0}


def test_device_map_reports_ops_off_their_module(step):
    g = step.graph
    place = _staged(g)
    place[g.index["addmm_1"]] = 1  # one matmul of layer 1 moves to the second stage
    c = load_cluster("cpu:2")
    dm = device_map(g, Plan(placement=place), c)
    assert dm.device_map == {"0": 0, "1": 0, "2": 1, "3": 1}
    [d] = dm.disagree
    assert (d.node, d.module, d.device, d.mapped) == ("addmm_1", "1", 1, 0)
    from graphopt.cost import op_costs
    assert d.seconds == pytest.approx(op_costs(g, c).time[g.index["addmm_1"], 1])
    assert dm.disagree_seconds == pytest.approx(d.seconds)


def test_device_map_splits_a_module_and_maps_its_own_parameters():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)),
                              torch.nn.Linear(4, 2))
    g = trace_program(net, (torch.randn(3, 4),)).graph
    place = np.array([1 if str(m).startswith("0.1") else 0 for m in g.module])
    dm = device_map(g, Plan(placement=place), load_cluster("cpu-v100:2"))
    # device 0 is the host CPU, device 1 the first GPU
    assert dm.device_map == {"0.0": "cpu", "0.1": 0, "1": "cpu"}


def test_a_layer_split_across_stages_is_refused_naming_the_op(step):
    g = step.graph
    place = _staged(g)
    place[g.index["addmm_1"]] = 1
    with pytest.raises(PlanError, match=r"begins at op addmm_1 inside module '1', whose op "
                                        r"1\.weight is on device 0"):
        pipeline_split(step, Plan(placement=place))


def test_reading_from_a_later_stage_is_refused_naming_the_op(step):
    g = step.graph
    place = _staged(g)
    place[g.index["addmm_3"]] = 0  # the last layer's matmul back on the first stage
    with pytest.raises(PlanError, match=r"op addmm_3 \(module '3'\) on device 0 reads"):
        pipeline_split(step, Plan(placement=place))


def test_backward_away_from_its_forward_is_refused(step):
    g = step.graph
    place = _staged(g)
    i = next(i for i in np.flatnonzero(~forward_ops(step)) if str(g.module[i]) == "3")
    place[i] = 0
    with pytest.raises(PlanError, match=rf"op {g.names[i]} \(module '3', backward"):
        pipeline_split(step, Plan(placement=place))


def test_pipelining_splits_the_module_where_the_export_says():
    pipelining = pytest.importorskip("torch.distributed.pipelining")
    net, x = _net(), torch.randn(4, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fwd = trace_program(net, (x,))
        place = np.array([STAGE.get(str(m), 0) for m in fwd.graph.module])
        spec = pipeline_split(fwd, Plan(placement=place)).split_spec
        pipe = pipelining.pipeline(net, mb_args=(x,), split_spec={
            k: pipelining.SplitPoint[v.upper()] for k, v in spec.items()})
    assert pipe.num_stages == 2


def test_cli_writes_both_formats_and_refuses_with_one_line(tmp_path, step):
    run = CliRunner().invoke
    gpath = save_graph(step.graph, tmp_path / "g.npz")
    Plan(placement=_staged(step.graph)).save(tmp_path / "p.json")
    r = run(app, ["export", str(tmp_path / "p.json"), "--graph", str(gpath), "--format",
                  "device-map", "-o", str(tmp_path / "map.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "map.json").read_text()) == {"0": 0, "1": 0, "2": 1, "3": 1}
    # a training step's graph file cannot tell forward from backward
    r = run(app, ["export", str(tmp_path / "p.json"), "--graph", str(gpath), "--format",
                  "pipeline", "-o", str(tmp_path / "pipe.json")])
    assert r.exit_code == 2 and "training step" in r.output and "Traceback" not in r.output
    # a torch.export program is a forward program
    net, x = _net(), torch.randn(4, 8)
    torch.export.save(torch.export.export(net, (x,)), tmp_path / "net.pt2")
    fwd = trace_program(net, (x,)).graph
    Plan(placement=[STAGE.get(str(m), 0) for m in fwd.module]).save(tmp_path / "f.json")
    r = run(app, ["export", str(tmp_path / "f.json"), "--graph", str(tmp_path / "net.pt2"),
                  "--format", "pipeline", "-o", str(tmp_path / "pipe.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "pipe.json").read_text()) == {
        "split_spec": {"2": "beginning"}, "stages": [0, 1]}
    r = run(app, ["export", str(tmp_path / "f.json"), "--graph", str(tmp_path / "net.pt2"),
                  "--format", "onnx", "-o", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "expected one of device-map, pipeline" in r.output


def test_docs_export_example_runs(tmp_path, monkeypatch):
    text = DOCS.read_text()
    section = text[text.index("## Export"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, str(DOCS), "exec"), {})
