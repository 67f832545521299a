"""Issue 37: every numeric field of a graph file (``.npz``), a plan file (``plan.json``)
and a cluster file (TOML) at 0, negative, NaN, ±inf and absurd sizes (1e30, 2^62, 2^63),
each read by the library's loader as a command reads it. A value a real model or machine
can have is accepted; any other is a :class:`GraphoptError` of one line naming the file
and the field. Never another exception (a traceback), never NaN, inf or a negative size
taken silently.

The table is generated: fields × values, with the expected outcome from the field's
documented range (``Graph.validate``, ``Plan``, ``DEVICE_FIELDS`` and ``LINK_FIELDS``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from graphopt.errors import GraphoptError
from graphopt.hardware.cluster import DEVICE_FIELDS, LINK_FIELDS
from graphopt.ir.graph import MAX_BYTES, MAX_ELEMENTS, MAX_FLOPS
from graphopt.ir.io import FORMAT, VERSION

#: The values every field gets: name → value.
VALUES = {"0": 0, "-1": -1, "nan": math.nan, "inf": math.inf, "-inf": -math.inf,
          "1e30": 1e30, "2^62": 2**62, "2^63": 2**63}


def _finite(v) -> bool:
    return isinstance(v, int) or math.isfinite(v)


def _outcome(load, path: Path, names: tuple[str, ...]) -> str:
    """``"accepted"`` or ``"refused"``; a refusal must be one line naming ``path`` and one
    of ``names`` (the field); any other exception fails the test as it is."""
    try:
        load(path)
    except GraphoptError as err:
        msg = str(err)
        assert "\n" not in msg, msg
        assert str(path) in msg, f"the file is not named: {msg}"
        rest = msg.replace(str(path), "")  # the test's folder is named after the field
        assert any(n in rest for n in names), f"the field ({' or '.join(names)}) is not named: {msg}"
        return "refused"
    return "accepted"


# -- graph files (.npz, as save_graph writes them) ---------------------------------------------------
def _graph_arrays() -> tuple[dict[str, np.ndarray], str]:
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.ir.io import _ARRAYS

    g = mlp_training_graph(layers=1, hidden=8, batch=2)
    header = json.dumps({"format": FORMAT, "version": VERSION, "name": g.name, "meta": {}})
    return {k: np.array(getattr(g, k)) for k in _ARRAYS}, header


ARRAYS, HEADER = _graph_arrays()
#: an edge whose source can become node 0 and stay a valid edge (no duplicate, forward)
_EDGE = next(j for j in range(len(ARRAYS["src"])) if ARRAYS["src"][j] != 0 and not (
    (ARRAYS["src"] == 0) & (ARRAYS["dst"] == ARRAYS["dst"][j])).any())
_NODE = int(ARRAYS["dst"][_EDGE])  # a node with inputs and a shape of rank >= 1
_FLOAT_FIELDS = ("flops", "bytes_read", "bytes_written", "out_bytes", "persistent_bytes",
                 "temp_bytes", "edge_bytes")


def _graph_ok(field: str, v) -> bool:
    """Whether ``field`` = ``v`` (at :data:`_NODE`, or edge :data:`_EDGE`) is a valid graph."""
    if field in _FLOAT_FIELDS:
        return _finite(v) and 0 <= v <= (MAX_FLOPS if field == "flops" else MAX_BYTES)
    if not isinstance(v, int) or v >= 2**63:  # an int64 array holds neither: refused by type
        return False
    if field == "shape[0]":  # the first dimension: a size >= 1 (the element count is bounded)
        return 1 <= v and v * math.prod(int(d) for d in ARRAYS["shape"][_NODE][1:] if d > 0) \
            <= MAX_ELEMENTS
    if field == "shape[7]":  # a padding slot of a rank-2 shape: only the padding -1
        return v == -1
    if field == "coloc":  # a group label, or -1 for none
        return v >= -1
    if field == "src":
        return v == 0  # node 0 -> the edge's consumer is a new, forward edge
    return False  # dst: node 0 consumes nothing; any other value is out of range or backwards


def _set(a: np.ndarray, index, v) -> np.ndarray:
    """``a`` with ``a[index] = v``, in the dtype a writer would need for ``v``: an integer
    array becomes float64 for NaN, inf or 1e30, and uint64 for 2^63."""
    if a.dtype.kind in "iu" and not isinstance(v, int):
        a = a.astype(np.float64)
    elif a.dtype.kind in "iu" and v >= 2**63:
        a = a.astype(np.uint64)
    else:
        a = a.copy()
    a[index] = v
    return a


GRAPH_CASES = [(f, name) for f in (*_FLOAT_FIELDS, "shape[0]", "shape[7]", "coloc", "src", "dst")
               for name in VALUES]


@pytest.mark.parametrize("field, value", GRAPH_CASES, ids=[f"{f}={v}" for f, v in GRAPH_CASES])
def test_graph_file_field(tmp_path, field, value):
    from graphopt.ir.io import load_graph

    v, k = VALUES[value], field.split("[")[0]
    index = (_NODE, int(field[6])) if k == "shape" else _EDGE if k in ("src", "dst", "edge_bytes") \
        else _NODE
    arrays = {**ARRAYS, k: _set(ARRAYS[k], index, v)}
    path = tmp_path / "g.npz"
    np.savez_compressed(path, header=np.array(HEADER), **arrays)
    got = _outcome(load_graph, path, (k,))
    assert got == ("accepted" if _graph_ok(field, v) else "refused")


def _graph_dict() -> dict:
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.ir.io import graph_to_dict

    return graph_to_dict(mlp_training_graph(layers=1, hidden=8, batch=2))


GRAPH_DICT = _graph_dict()


@pytest.mark.parametrize("field, value", GRAPH_CASES, ids=[f"{f}={v}" for f, v in GRAPH_CASES])
def test_graph_json_field(tmp_path, field, value):
    """The same fields in a graph's JSON form (NaN and Infinity as Python's json writes
    them, 2^63 as a JSON integer)."""
    from graphopt.ir.io import load_graph

    v, k = VALUES[value], field.split("[")[0]
    data = json.loads(json.dumps(GRAPH_DICT))
    node = data["nodes"][_NODE]
    if k == "shape":  # the JSON form lists the rank's dimensions only: padding is not there
        if field == "shape[7]":
            pytest.skip("no padding slot in JSON")
        node["shape"][0] = v
    elif k in ("src", "dst", "edge_bytes"):
        data["edges"][_EDGE][("src", "dst", "edge_bytes").index(k)] = v
    else:
        node[k] = v
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    got = _outcome(load_graph, path, (k,))
    if isinstance(v, float) and not math.isfinite(v) and k in ("shape", "coloc", "src", "dst"):
        want = "refused"  # not an integer
    else:
        want = "accepted" if _graph_ok(field, v) else "refused"
    assert got == want


# -- plan files (plan.json), checked against the graph and cluster as every command does -------------
N, D = 5, 2
PLAN_CASES = [(f, name) for f in ("placement", "priority", "fusion") for name in VALUES]


def _plan_ok(field: str, v) -> bool:
    if field == "placement":
        return isinstance(v, int) and 0 <= v < D
    return _finite(v) and abs(v) <= 1e300  # an order or a fusion priority: any finite number


def _load_plan(path: Path) -> None:
    from graphopt.cli._common import check_plan
    from graphopt.sim.plan import Plan

    check_plan(Plan.load(path), SimpleNamespace(num_nodes=N, num_devices=D), path)


@pytest.mark.parametrize("field, value", PLAN_CASES, ids=[f"{f}={v}" for f, v in PLAN_CASES])
def test_plan_file_field(tmp_path, field, value):
    v = VALUES[value]
    plan = {"format": "graphopt.plan", "version": 1, "placement": [0, 1, 0, 1, 0],
            "priority": [5.0, 4.0, 3.0, 2.0, 1.0], "fusion": [1.0, 0.0, 1.0, 0.0, 1.0]}
    plan[field][2] = v
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))  # NaN and Infinity as Python's json writes them
    got = _outcome(_load_plan, path, (field,))
    assert got == ("accepted" if _plan_ok(field, v) else "refused")


# -- cluster files (TOML) ---------------------------------------------------------------------------
_DEVICE = """[[devices]]
kind = "test"
count = 2
peak_tflops = {{ float32 = {peak_tflops} }}
vector_tflops = {vector_tflops}
mem_gbps = {mem_gbps}
memory_gib = {memory_gib}
launch_overhead_us = {launch_overhead_us}
dispatch_overhead_us = {dispatch_overhead_us}
shared_slowdown = {shared_slowdown}
transfer_cpu_gbps = {transfer_cpu_gbps}
transfer_cpu_us = {transfer_cpu_us}
wake_cost_us = [[{wake_idle}, {wake_extra}]]
"""
_TOPOLOGIES = {  # type: (its [topology] table, the keys it holds)
    "all_to_all": ('type = "all_to_all"\nlink_gbps = {link_gbps}\nlatency_us = {latency_us}\n'),
    "pcie_tree": ('type = "pcie_tree"\nlink_gbps = 10\nlatency_us = 5\nper_switch = {per_switch}\n'
                  'root_gbps = {root_gbps}\n'),
    "links": ('type = "links"\nlink_gbps = 25\nlatency_us = 5\nlinks = [[0, 0], [0, 0]]\n'
              'fallback_gbps = {fallback_gbps}\nfallback_latency_us = {fallback_latency_us}\n'),
}
_DEFAULTS = {"peak_tflops": 100, "vector_tflops": 10, "mem_gbps": 900, "memory_gib": 16,
             "launch_overhead_us": 5, "dispatch_overhead_us": 0, "shared_slowdown": 1,
             "transfer_cpu_gbps": "inf", "transfer_cpu_us": 0, "wake_idle": 10, "wake_extra": 1,
             "link_gbps": 25, "latency_us": 5, "per_switch": 2, "root_gbps": 10,
             "fallback_gbps": 10, "fallback_latency_us": 15, "count": 2, "cores_per_device": 1,
             "pingpong_bytes": 1024, "pingpong_us": 20}
_FIELDS = {f.key: f for f in (*DEVICE_FIELDS, *LINK_FIELDS)}
_BANDWIDTH, _LATENCY = (f for f in LINK_FIELDS)
#: every numeric key of a cluster file → (the topology whose file holds it, the range check)
_CLUSTER_KEYS = {
    **{k: "all_to_all" for k in _FIELDS if k != "wake_cost_us"},
    "wake_idle": "all_to_all", "wake_extra": "all_to_all", "count": "all_to_all",
    "cores_per_device": "all_to_all", "pingpong_bytes": "all_to_all", "pingpong_us": "all_to_all",
    "per_switch": "pcie_tree", "root_gbps": "pcie_tree",
    "fallback_gbps": "links", "fallback_latency_us": "links",
}


def _toml(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def _cluster_text(key: str, v) -> str:
    values = {k: _toml(x) for k, x in {**_DEFAULTS, key: v}.items()}
    text = _DEVICE.format(**values).replace("count = 2", f"count = {values['count']}")
    text += "[topology]\n" + _TOPOLOGIES[_CLUSTER_KEYS[key]].format(**values)
    text += (f"[calibration]\ncores_per_device = {values['cores_per_device']}\n"
             f"pingpong_us = [[{values['pingpong_bytes']}, {values['pingpong_us']}]]\n")
    return text


def _cluster_ok(key: str, v) -> bool:
    if key in ("count", "per_switch", "cores_per_device", "pingpong_bytes"):  # whole numbers
        if not isinstance(v, int):
            return False
        return {"count": 1 <= v <= 1024, "per_switch": 1 <= v <= 1024,
                "cores_per_device": 0 <= v <= 1 << 16, "pingpong_bytes": 1 <= v <= MAX_BYTES}[key]
    if not _finite(v) and not (key == "transfer_cpu_gbps" and v == math.inf):
        return False
    if key == "wake_idle":
        return 0 < v * 1e-6 <= 60
    if key == "wake_extra":
        return 0 <= v * 1e-6 <= 1
    if key == "pingpong_us":
        return 0 <= v <= 3.6e9  # up to an hour
    field = {"root_gbps": _BANDWIDTH, "fallback_gbps": _BANDWIDTH,
             "fallback_latency_us": _LATENCY}.get(key) or _FIELDS[key]
    return field.ok(v * field.scale)


CLUSTER_CASES = [(k, name) for k in _CLUSTER_KEYS for name in VALUES]


@pytest.mark.parametrize("key, value", CLUSTER_CASES, ids=[f"{k}={v}" for k, v in CLUSTER_CASES])
def test_cluster_file_field(tmp_path, key, value):
    from graphopt.hardware import load_cluster

    v = VALUES[value]
    path = tmp_path / "c.toml"
    path.write_text(_cluster_text(key, v))
    named = {"wake_idle": "wake_cost", "wake_extra": "wake_cost", "pingpong_bytes": "pingpong_us"}
    got = _outcome(lambda p: load_cluster(str(p)), path, (named.get(key, key),))
    assert got == ("accepted" if _cluster_ok(key, v) else "refused")


def test_the_table_is_large():
    assert len(GRAPH_CASES) + len(PLAN_CASES) + len(CLUSTER_CASES) >= 100


# -- a few through the command line (in process), end to end ---------------------------------------
@pytest.mark.parametrize("what", ["graph", "plan", "cluster"])
def test_a_bad_field_through_the_command_line_is_one_line_exit_2(tmp_path, what):
    from typer.testing import CliRunner

    from graphopt.cli import app

    g = tmp_path / "g.npz"
    np.savez_compressed(g, header=np.array(HEADER), **ARRAYS)
    argv = ["simulate", str(g), "-c", "p100:2"]
    if what == "graph":
        np.savez_compressed(g, header=np.array(HEADER),
                            **{**ARRAYS, "flops": _set(ARRAYS["flops"], _NODE, math.nan)})
    elif what == "plan":
        n = len(ARRAYS["op"])
        (tmp_path / "p.json").write_text(json.dumps(
            {"format": "graphopt.plan", "version": 1, "placement": [0] * (n - 1) + [-1]}))
        argv += ["--plan", str(tmp_path / "p.json")]
    else:
        (tmp_path / "c.toml").write_text(_cluster_text("mem_gbps", -1))
        argv[3] = str(tmp_path / "c.toml")
    r = CliRunner().invoke(app, argv, env={"COLUMNS": "400"})
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert {"graph": "flops", "plan": "placement", "cluster": "mem_gbps"}[what] in lines[0]


# -- issue 49: numbers in the other files graphopt reads ----------------------------------------------
def _weights_ok(v) -> bool:
    return _finite(v)  # any finite weight; NaN and infinities refused (float32 holds 2^63 as finite)


WEIGHT_CASES = [(what, name) for what in ("policy", "checkpoint") for name in VALUES]


@pytest.mark.parametrize("what, value", WEIGHT_CASES, ids=[f"{w}={v}" for w, v in WEIGHT_CASES])
def test_weights_file_value(tmp_path, what, value):
    import torch

    from graphopt.runs.checkpoint import load_policy, read_checkpoint, save_checkpoint, save_policy

    net = torch.nn.Linear(2, 2)
    with torch.no_grad():
        net.weight[1, 0] = float(VALUES[value])
    if what == "policy":
        save_policy(tmp_path, net, {"out": 2}, {})
        path = tmp_path / "policy.safetensors"

        def load(p):
            load_policy(p.parent, lambda cfg: torch.nn.Linear(2, cfg["out"]))
    else:
        save_checkpoint(tmp_path, {}, {"net": net}, torch.optim.SGD(net.parameters(), lr=0.1), None, {})
        path = tmp_path / "weights.safetensors"

        def load(p):
            read_checkpoint(p.parent)
    got = _outcome(load, path, ("weight",))
    assert got == ("accepted" if _weights_ok(VALUES[value]) else "refused")


GAIN_CASES = list(VALUES)


@pytest.mark.parametrize("value", GAIN_CASES)
def test_prior_move_gain_value(tmp_path, value):
    from graphopt.optim.learned.targets import _read_gains

    v = VALUES[value]
    gains = np.ones((3, 2))
    gains[1, 1] = float(v)
    path = tmp_path / "k.0123.moves.npy"
    np.save(path, gains, allow_pickle=False)
    got = _outcome(lambda p: _read_gains(p, (3, 2)), path, ("move gain",))
    assert got == ("accepted" if _finite(float(v)) and v >= 0 else "refused")


#: a pipeline plan's figures, each at every value and at true and text
PIPE_VALUES = {**VALUES, "true": True, "text": "3", "null": None}
PIPE_CASES = [(f, name) for f in ("version", "simulated.overhead", "simulated.cores",
                                  "simulated.step_time", "simulated.profiled") for name in PIPE_VALUES]


def _pipe_ok(field: str, v) -> bool:
    number = isinstance(v, (int, float)) and not isinstance(v, bool) and _finite(v)
    return {"version": type(v) is int and 1 <= v <= 3,
            "simulated.overhead": number and 0 <= v <= 3600,
            "simulated.cores": v is None or (type(v) is int and 1 <= v <= 1 << 16),
            "simulated.step_time": number and v > 0,
            "simulated.profiled": type(v) is bool}[field]


@pytest.mark.parametrize("field, value", PIPE_CASES, ids=[f"{f}={v}" for f, v in PIPE_CASES])
def test_pipeline_plan_field(tmp_path, field, value):
    from graphopt.sim.pipeline import PipelinePlan

    v = PIPE_VALUES[value]
    plan = {"format": "graphopt-pipeline", "version": 3, "schedule": "1f1b",
            "model": "pipe:mlp:layers=4,hidden=16,batch=8", "bounds": [0, 2, 4], "microbatches": 4,
            "simulated": {"step_time": 0.01, "overhead": 0.0, "cores": None, "profiled": False}}
    if field == "version":
        plan["version"] = v
    else:
        plan["simulated"][field.split(".")[1]] = v
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(plan))
    got = _outcome(PipelinePlan.load, path, (field.split(".")[-1],))
    assert got == ("accepted" if _pipe_ok(field, v) else "refused")


#: ``--max-memory DEVICE=SIZE``: GPU indices and sizes in digits of other scripts, with
#: separators, out of range; (text, accepted)
MAX_MEMORY = [("0=2GiB", True), ("1023=1", True), ("cpu=1GB", True), ("disk=0", True),
              (f"0={2**62}", True), ("\u0660=2GiB", False), ("\u06f1=2GiB", False),
              ("\uff10=2GiB", False), ("\u00b2=2GiB", False), ("\u0967=2GiB", False), ("1_0=1GiB", False),
              ("00000=1GiB", False), ("1024=1GiB", False), ("-1=1GiB", False), ("+1=1GiB", False),
              ("0=\u0662GiB", False), ("0=\uff12GiB", False), ("0=1_000", False), ("0=1e300", False),
              ("0=nan", False), ("0=infGiB", False), ("0=-1", False), (f"0={2**62 + 1}", False),
              ("0=1GiB,0=2GiB", False), ("gpu=1GiB", False)]


@pytest.mark.parametrize("text, ok", MAX_MEMORY, ids=[t for t, _ in MAX_MEMORY])
def test_max_memory_value(text, ok):
    from graphopt.exec.export import parse_max_memory

    try:
        parse_max_memory(text)
    except GraphoptError as err:
        assert not ok and str(err).startswith("--max-memory ") and "\n" not in str(err), err
        return
    assert ok, f"{text!r} accepted"
