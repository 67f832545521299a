"""Issue 13: every bad input prints one line naming what is wrong and exits 2; no
traceback, no silent acceptance, no work before an unusable output path is refused.

One table: the next case is one line. ``{d}`` is a folder of bad files made once.
"""

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.ir.generate import mlp_training_graph
from graphopt.ir.io import graph_to_dict

runner = CliRunner()
PRESET = Path(__file__).parents[2] / "src/graphopt/hardware/presets/dgx1-v100.toml"


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    return make_bad_files(tmp_path_factory.mktemp("bad"))


def make_bad_files(d: Path) -> Path:
    """Every bad file the table names, under ``d``."""
    (d / "file").write_text("x")
    deep = "[" * 100_000 + "]" * 100_000
    (d / "deep.json").write_text('{"format": "graphopt.graph", "version": 1, "nodes": '
                                 f'{deep}, "edges": []}}')
    (d / "deep_plan.json").write_text(deep)
    (d / "deep_profile.json").write_text(deep)
    pipe = {"format": "graphopt-pipeline", "version": 2, "schedule": "interleaved",
            "model": "pipe:mlp:layers=4,hidden=16,batch=8", "bounds": [0, 1, 2, 3, 4],
            "microbatches": 2}
    for name, change in (("virtual0", {"virtual": 0}), ("virtual3", {"virtual": 3}),
                         ("virtual_str", {"virtual": "2"}),
                         ("inter_m1", {"virtual": 2, "microbatches": 1}),
                         ("blocks_short", {"version": 3, "virtual": 2, "blocks": ["0", "1"]}),
                         ("blocks_int", {"version": 3, "virtual": 2, "blocks": [0, 1, 2, 3]}),
                         ("blocks_other", {"version": 3, "virtual": 2,
                                           "blocks": ["a", "b", "c", "d"]}),
                         # issue 49: the figures 'run --pipeline' prices the plan with
                         ("version_true", {"virtual": 2, "version": True}),
                         ("overhead_str", {"virtual": 2, "simulated": {"overhead": "abc"}}),
                         ("overhead_neg", {"virtual": 2, "simulated": {"overhead": -1}}),
                         ("overhead_inf", {"virtual": 2, "simulated": {"overhead": float("inf")}}),
                         ("cores_half", {"virtual": 2, "simulated": {"cores": 1.5}}),
                         ("simulated_list", {"virtual": 2, "simulated": [1]})):
        (d / f"pipe_{name}.json").write_text(json.dumps({**pipe, **change}))
    # a user's own model files (py:FILE.py:FACTORY)
    (d / "raises.py").write_text("raise RuntimeError('cannot import here')\n")
    (d / "user.py").write_text(
        "import torch\n"
        "def none():\n    return None\n"
        "def flat():\n    return torch.nn.Linear(4, 4), torch.randn(2, 4)\n"
        "def text_inputs():\n    return torch.nn.Linear(4, 4), 'x'\n"
        "def raises():\n    raise KeyError('width')\n"
        "def two():\n    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)), "
        "torch.randn(2, 4)\n"
        "not_callable = 3\n")
    (d / "digits_plan.json").write_text('{"format": "graphopt.plan", "version": 1, "placement": ['
                                        + "9" * 5000 + "]}")
    g = graph_to_dict(mlp_training_graph(layers=1, hidden=8, batch=2))

    def graph(name, **node):
        h = json.loads(json.dumps(g))
        h["nodes"][0].update(node)
        (d / name).write_text(json.dumps(h))
    graph("g.json")
    graph("shape_1e30.json", shape=[10**30])
    graph("rank9_wraps.json", shape=[2**32 + 1, 2**32 + 1] + [1] * 7)  # folded to rank 8: 2^64 + ...
    graph("flops_1e308.json", flops=1e308)
    graph("bytes_1e20.json", out_bytes=1e20)
    (d / "empty.json").write_text(json.dumps({**g, "nodes": [], "edges": []}))
    base = PRESET.read_text()
    for name, old, new in [("count_50000", "count = 8", "count = 50000"),
                           ("count_0", "count = 8", "count = 0"),
                           ("count_str", "count = 8", 'count = "many"'),
                           ("peak_str", "peak_tflops = {", 'peak_tflops = {x = "a", '),
                           ("latency_list", "latency_us =", "latency_us = [1] #"),
                           ("wake_short", "count = 8", "count = 8\nwake_cost_us = [1, 2]"),
                           ("wake_neg", "count = 8", "count = 8\nwake_cost_us = [[1, 2], [3, -4]]"),
                           ("typo_key", "launch_overhead_us", "launch_overhed_us"),
                           ("dispatch_nan", "count = 8", "count = 8\ndispatch_overhead_us = nan")]:
        assert old in base
        (d / f"{name}.toml").write_text(base.replace(old, new, 1))
    (d / "latin1.toml").write_bytes(b"\xff\xfe" + base.encode())
    (d / "one_way.toml").write_text(
        '[[devices]]\nkind = "gpu"\ncount = 2\npeak_tflops = { float32 = 1 }\nvector_tflops = 1\n'
        'mem_gbps = 1\nmemory_gib = 1\n[topology]\ntype = "links"\nlink_gbps = 1\nlatency_us = 1\n'
        'links = [[0, 1], [0, 0]]\nfallback_gbps = 1\nfallback_latency_us = 1\n')
    with (d / "huge.toml").open("wb") as f:
        f.truncate(2**30)  # sparse: a GiB that is never written
    (d / "tuned_bad.json").write_text(json.dumps({"params": {"sa": {"chains": "many"}}}))
    (d / "tuned_huge.json").write_text(json.dumps({"params": {"sa": {"chains": 10**9}}}))
    plan = {"format": "graphopt.plan", "version": 1}
    (d / "short_plan.json").write_text(json.dumps({**plan, "placement": [0, 1]}))
    (d / "far_plan.json").write_text(json.dumps({**plan, "placement": [7] * len(g["nodes"])}))
    (d / "random.npz").write_bytes(bytes(range(256)) * 8)
    (d / "lfs.npz").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 9\n")
    head = io.BytesIO()  # an array header declaring 16 GiB of names, and no data
    np.lib.format.write_array_header_1_0(head, {"descr": "<U2", "fortran_order": False,
                                                "shape": (2**31,)})
    with zipfile.ZipFile(d / "bomb.npz", "w") as z:
        z.writestr("names.npy", head.getvalue())
    _more_bad_files(d, g, base)
    _hostile_indexes(d)
    return d


#: Issue 49: corpus manifests and the targets indexes read back from disk, hand-edited:
#: ids and paths that would leave their folder, wrong types, missing keys.
#: name -> (change to one record, or to the document with "doc:"), the index it is in
_ITEM = {"source": "example:layered-60-s0", "family": "layered", "split": "train",
         "status": "built", "file": "graphs/layered-0123456789ab.npz", "nodes": 60, "edges": 80,
         "bytes": 100, "seconds": 0.5}
_ENTRY = {"item": "layered-0123456789ab", "cluster": "p100:2",
          "file": "targets/layered-0123456789ab@p100:2.json",
          "step_time": 0.001, "method": "sa", "budget": 10, "seed": 0, "evals": 10, "rounds": 1,
          "policy": None, "seconds": 0.1}
_MCM = {"graph": "bert-base", "preset": "mcm-ring4", "source": "zoo:bert-base", "chips": [0, 1],
        "interval": 1e-5, "method": "mcm-sa", "budget": 8, "seed": 0, "seconds": 1.0}
_REGAL = {"family": "layered", "nodes": 60, "graph": "graphs/layered-0123456789ab.npz",
          "file": "targets/layered-0123456789ab.npz", "value": 1.0, "evals": 5, "source": "x"}
MANIFESTS = {
    "id_up": {"key": "../../x"}, "id_abs": {"key": "/etc/x"}, "id_nul": {"key": "a\0b"},
    "id_dot": {"key": ".hidden"}, "id_newline": {"key": "a\nb"},
    "file_up": {"file": "../../etc/passwd"}, "file_abs": {"file": "/etc/passwd"},
    "file_other": {"file": "graphs/other.npz"}, "file_int": {"file": 5},
    "no_status": {"status": None}, "status_bogus": {"status": "weird"}, "nodes_text": {"nodes": "12"},
    "nodes_true": {"nodes": True}, "nodes_neg": {"nodes": -1}, "record_list": {"record": [1]},
    "split_int": {"split": 7}, "no_source": {"source": None}, "family_int": {"family": 7},
    "skipped_no_reason": {"status": "skipped"}, "seconds_nan": {"seconds": float("nan")},
    "builds_text": {"doc:builds": "x"}, "build_seconds_neg": {"doc:builds": [{"seconds": -1, "built": 1,
                                                                               "skipped": 0, "reused": 0}]},
}
TARGETS = {
    "item_up": {"item": "../../x", "key": "../../x@p100:2"}, "file_up": {"file": "../../../etc/x.json"},
    "file_abs": {"file": "/etc/passwd"}, "cluster_up": {"cluster": "/../../../tmp/x",
                                                         "key": "layered-0123456789ab@/../../../tmp/x"},
    "key_other": {"key": "layered-0123456789ab@p100:8"}, "budget_text": {"budget": "2000"},
    "no_rounds": {"rounds": None}, "step_nan": {"step_time": float("nan")}, "step_neg": {"step_time": -1},
    "entry_list": {"record": []}, "method_int": {"method": 7}, "policy_int": {"policy": 5},
}
MCM_TARGETS = {
    "graph_up": {"graph": "../../x", "key": "../../x@mcm-ring4"}, "chips_text": {"chips": ["a", "b"]},
    "chips_str": {"chips": "01"}, "chips_neg": {"chips": [0, -1]}, "interval_nan": {"interval": float("nan")},
    "key_other": {"key": "gpt2@mcm-ring4"}, "budget_true": {"budget": True}, "no_preset": {"preset": None},
}
REGAL_TARGETS = {
    "key_up": {"key": "../x"}, "file_abs": {"file": "/etc/passwd"},
    "graph_up": {"graph": "../../../etc/passwd"}, "nodes_text": {"nodes": "5"},
    "value_text": {"value": "low"},
    "corpus_int": {"doc:corpus": 5}, "no_family": {"family": None},
}


_KEY = "layered-0123456789ab"


def _at(field: str, change: dict, key: str, needle: str) -> str:
    """The message's start naming the record (its key as the index gives it), then ``needle``."""
    if needle.startswith(("items:", "field 'corpus'", "builds")) or "doc:builds" in change:
        return needle
    return f"{field}[{change.get('key', key)!r}]: {needle}"


def _index_doc(header: dict, field: str, key: str, record: dict, change: dict) -> dict:
    record = {k: v for k, v in {**record, **change}.items() if v is not None and k != "key"}
    if "record" in change:
        record = change["record"]
    doc = {**header, field: {change.get("key", key): record}}
    doc.update({k[4:]: v for k, v in change.items() if k.startswith("doc:")})
    if isinstance(record, dict):
        for k in [k for k in record if k.startswith("doc:")]:
            del record[k]
    return doc


def _hostile_indexes(d: Path) -> None:
    manifest = {"format": "graphopt-corpus", "version": 1, "builds": []}
    key = "layered-0123456789ab"
    for name, change in MANIFESTS.items():
        (d / f"m_{name}").mkdir()
        (d / f"m_{name}" / "manifest.json").write_text(
            json.dumps(_index_doc(manifest, "items", key, _ITEM, change)))
    good = json.dumps(_index_doc(manifest, "items", key, _ITEM, {}))
    targets = {"format": "graphopt-corpus-targets", "version": 1}
    for name, change in TARGETS.items():
        (d / f"t_{name}").mkdir()
        (d / f"t_{name}" / "manifest.json").write_text(good)
        (d / f"t_{name}" / "targets.json").write_text(
            json.dumps(_index_doc(targets, "entries", f"{key}@p100:2", _ENTRY, change)))
    mcm = {"format": "graphopt-mcm-targets", "version": 1}
    for name, change in MCM_TARGETS.items():
        (d / f"mt_{name}").mkdir()
        (d / f"mt_{name}" / "targets.json").write_text(
            json.dumps(_index_doc(mcm, "entries", "bert-base@mcm-ring4", _MCM, change)))
    regal = {"format": "graphopt-regal-targets", "version": 1, "corpus": str(d / "t_item_up"),
             "evals": 5, "seed": 0, "cluster": "p100:2", "objective": "memory",
             "prior": "layer-split", "builds": []}
    for name, change in REGAL_TARGETS.items():
        (d / f"rt_{name}").mkdir()
        (d / f"rt_{name}" / "index.json").write_text(
            json.dumps(_index_doc(regal, "items", key, _REGAL, change)))


def _more_bad_files(d: Path, g: dict, base: str) -> None:
    """Empty, truncated and wrong-format files for every reader, and field variants."""
    from graphopt.ir import save_graph
    from graphopt.ir.generate import mlp_training_graph
    from tests.costmodel.conftest import write_layout, write_tile

    for suffix in ("json", "npz", "toml", "onnx", "pt2"):
        (d / f"empty0.{suffix}").write_bytes(b"")
    (d / "notjson.json").write_text("{")
    (d / "list.json").write_text("[]")
    (d / "graph.txt").write_text("ops")
    (d / "random.onnx").write_bytes(bytes(range(256)) * 4)
    (d / "emptydir").mkdir()
    (d / "outdir").mkdir()  # a file where optimize writes a method's folder
    (d / "outdir" / "sa").write_text("x")
    (d / "outdir" / "t.sim.json").mkdir()  # where graphopt run --trace t.json puts the simulated one
    (d / "rundir" / "policy.json").mkdir(parents=True)  # a folder where a trainer writes a file
    # special files: their size (0) says nothing of what reading them gives; an output
    # renamed over one would delete it
    for name in ("zero.json", "zero.npz", "zero.onnx", "zero.toml", "zero_plan.json"):
        (d / name).symlink_to("/dev/zero")
    os.mkfifo(d / "fifo.json")
    (d / "null_out.json").symlink_to("/dev/null")
    save_graph(mlp_training_graph(layers=1, hidden=8, batch=2), d / "whole.npz")
    whole = (d / "whole.npz").read_bytes()
    (d / "truncated.npz").write_bytes(whole[:len(whole) // 2])
    arrays = dict(np.load(d / "whole.npz"))
    for name, key, value in [("header_deep", "header", np.array("[" * 100_000)),
                             ("src_float", "src", arrays["src"] + 0.5),
                             ("op_int", "op", np.arange(len(arrays["op"]))),
                             ("flops_bool", "flops", arrays["flops"] > 0)]:
        np.savez(d / f"{name}.npz", **{**arrays, key: value})
    import torch

    class Masked(torch.nn.Module):
        def forward(self, x):
            return x[x > 0] * 2  # a size that depends on the data

    torch.export.save(torch.export.export(Masked(), (torch.randn(8),)), d / "masked.pt2")
    docs = {"wrongfmt.json": {"format": "x"}, "version99.json": {**g, "version": 99},
            "nodes_str.json": {**g, "nodes": "x"},
            "edge_far.json": {**g, "edges": [[0, 999, 1.0]]},
            "cycle.json": {**g, "edges": [[0, 1, 1.0], [1, 0, 1.0]]},
            "edge_half.json": {**g, "edges": [[0.5, 1, 1.0]]},
            "edge_text.json": {**g, "edges": [["0", "1", 1.0]]}}
    docs["CYCLE.JSON"] = docs["cycle.json"]
    for name, doc in docs.items():
        (d / name).write_text(json.dumps(doc))
    nodes = {"flops_neg": {"flops": -1}, "flops_nan": {"flops": float("nan")},
             "flops_str": {"flops": "many"},
             "op_bogus": {"op": 42}, "shape_neg": {"shape": [-3]}, "shape_str": {"shape": "2x2"},
             "coloc_str": {"coloc": "a"}, "dup_names": {"name": g["nodes"][1]["name"]},
             "shape_text": {"shape": "22"}, "shape_half": {"shape": [2.5]},
             "flops_true": {"flops": True}, "coloc_half": {"coloc": 1.5}}
    for name, node in nodes.items():
        h = json.loads(json.dumps(g))
        h["nodes"][0].update(node)
        (d / f"{name}.json").write_text(json.dumps(h))
    h = json.loads(json.dumps(g))
    del h["nodes"][0]["op"]
    (d / "no_op.json").write_text(json.dumps(h))
    n = len(g["nodes"])
    plan = {"format": "graphopt.plan", "version": 1, "placement": [0] * n}
    plans = {"wide_plan": {**plan, "placement": [5] * n},
             "foreign_plan": {**plan, "meta": {"graph": {"name": "other", "nodes": n, "fingerprint": "abc"}}},
             "plan_v99": {**plan, "version": 99}, "plan_str": {**plan, "placement": ["a"] * n},
             "plan_neg": {**plan, "placement": [-1] * n}, "plan_float": {**plan, "placement": [0.5] * n},
             "plan_nested": {**plan, "placement": [[0]] * n},
             "plan_bool": {**plan, "placement": [True] * n},
             "plan_prio_text": {**plan, "priority": ["1e3"] * n},
             "plan_prio_short": {**plan, "priority": [1.0]},
             "plan_prio_nan": {**plan, "priority": [float("nan")] * n},
             "plan_fusion_bad": {**plan, "fusion": ["x"] * n}, "plan_meta_list": {**plan, "meta": [1]},
             "plan_placement_obj": {**plan, "placement": {"a": 1}},
             "plan_huge_int": {**plan, "placement": [10**30] * n}}
    for name, doc in plans.items():
        (d / f"{name}.json").write_text(json.dumps(doc))
    entry = {"op": "matmul", "dtype": "float32", "in_shapes": [[2, 2], [2, 2]], "out_shape": [2, 2],
             "seconds": 1e-6}
    prof = {"format": "graphopt.profile", "version": 1, "device_kind": "cpu", "meta": {},
            "entries": [entry]}
    profs = {"prof_v99": {**prof, "version": 99}, "prof_entries_obj": {**prof, "entries": {}},
             "prof_no_kind": {k: v for k, v in prof.items() if k != "device_kind"},
             "prof_neg": {**prof, "entries": [{**entry, "seconds": -1}]},
             "prof_nan": {**prof, "entries": [{**entry, "seconds": float("nan")}]},
             "prof_entry_str": {**prof, "entries": ["matmul"]},
             "prof_shape_bad": {**prof, "entries": [{**entry, "out_shape": "2x2"}]},
             "prof_dup": {**prof, "entries": [entry, entry]},
             "prof_meta_list": {**prof, "meta": [1]},
             "prof_missing_op": {**prof, "entries": [{k: v for k, v in entry.items() if k != "op"}]}}
    for name, doc in profs.items():
        (d / f"{name}.json").write_text(json.dumps(doc))
    (d / "syntax.toml").write_text("name = \n[[devices]\n")
    (d / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000)
    (d / "no_devices.toml").write_text(base.split("[[devices]]")[0] + base.split("[topology]")[1]
                                       .join(["[topology]", ""]))
    for name, old, new in [("mem_neg", "mem_gbps = 900", "mem_gbps = -900"),
                           ("mem_nan", "mem_gbps = 900", "mem_gbps = nan"),
                           ("mem_inf", "mem_gbps = 900", "mem_gbps = inf"),
                           ("memory_0", "memory_gib = 16", "memory_gib = 0"),
                           ("count_float", "count = 8", "count = 1.5"),
                           ("count_neg", "count = 8", "count = -1"),
                           ("peak_empty", "peak_tflops = {", "peak_tflops = {} #"),
                           ("peak_neg", "float32 = 15.7", "float32 = -15.7"),
                           ("links_short", "[0, 0, 0, 1, 2, 1, 2, 0],", ""),
                           ("links_neg", "[0, 1, 1, 2, 2, 0, 0, 0]", "[0, -1, 1, 2, 2, 0, 0, 0]"),
                           ("link_gbps_0", "link_gbps = 25", "link_gbps = 0"),
                           ("latency_neg", "latency_us = 5", "latency_us = -5"),
                           ("topo_bogus", 'type = "links"', 'type = "bogus"'),
                           ("launch_neg", "launch_overhead_us = 5", "launch_overhead_us = -5"),
                           ("devices_table", "[[devices]]", "[devices.x]"),
                           ("kind_int", 'kind = "V100-SXM2-16GB"', "kind = 7"),
                           ("xcpu_0", "launch_overhead_us = 5", "launch_overhead_us = 5\n"
                            "transfer_cpu_gbps = 0"),
                           ("xcpu_str", "launch_overhead_us = 5", "launch_overhead_us = 5\n"
                            'transfer_cpu_gbps = "fast"'),
                           ("xmsg_neg", "launch_overhead_us = 5", "launch_overhead_us = 5\n"
                            "transfer_cpu_us = -3"),
                           ("xmsg_inf", "launch_overhead_us = 5", "launch_overhead_us = 5\n"
                            "transfer_cpu_us = inf"),
                           ("overlap_int", "link_gbps = 25", "link_gbps = 25\noverlap_latency = 1"),
                           ("launch_inf", "launch_overhead_us = 5", "launch_overhead_us = inf"),
                           ("peak_bool", "float32 = 15.7", "float32 = true"),
                           ("rates_tiny", "vector_tflops = 15.7\nmem_gbps = 900",
                            "vector_tflops = 1e-308\nmem_gbps = 1e-300"),
                           ("prefix_int", 'prefix = "gpu"', "prefix = 7"),
                           ("switch_0", 'type = "links"', 'type = "pcie_tree"\nper_switch = 0'),
                           ("root_nan", 'type = "links"', 'type = "pcie_tree"\nroot_gbps = nan'),
                           ("dims_text", 'type = "links"', 'type = "torus"\ndims = "8"')]:
        assert old in base, name
        (d / f"{name}.toml").write_text(base.replace(old, new, 1))
    (d / "tiles").mkdir()
    for i in range(4):
        write_tile(d / "tiles" / f"k{i}.npz", n=5, c=8, seed=i)
    write_tile(d / "tile_badcfg.npz", config_feat=np.ones((5, 24), np.float32))
    write_tile(d / "tile_nan_runtime.npz", config_runtime=np.full(12, np.nan))
    write_layout(d / "layout_badids.npz", node_config_ids=np.array([2, 5, 99]))
    (d / "badrun").mkdir()
    (d / "badrun" / "config.json").write_text("{")
    (d / "deeprun").mkdir()
    (d / "deeprun" / "config.json").write_text("[" * 100_000)


CASES = [
    # files from outside: nesting, sizes, encodings, types
    ("info {d}/deep.json", "nested too deeply"),
    ("info {d}/zero.json", "zero.json: not a regular file (a device, pipe or socket)"),
    ("info {d}/zero.npz", "zero.npz: not a regular file"),
    ("info {d}/zero.onnx", "zero.onnx: not a regular file"),
    ("info {d}/fifo.json", "fifo.json: not a regular file"),
    ("info {d}/emptydir/x.json", "x.json: no such file"),
    ("simulate example:mlp -c {d}/zero.toml", "zero.toml: not a regular file"),
    ("simulate example:mlp --plan {d}/zero_plan.json", "zero_plan.json: not a regular file"),
    ("simulate example:mlp --json {d}/null_out.json --trace /dev/fd/987",
     "--trace /dev/fd/987: descriptor 987 is not open"),  # /dev/null is written in place
    ("run zoo:rnnlm-2-quick --devices cpu:2 --trace {d}/outdir/t.json",
     "t.sim.json: is a folder, expected a file"),
    ("costmodel train --data {d}/tiles --run-name ../x --out {d}/cm",
     "--run-name ../x: expected a folder name"),
    ("simulate example:mlp --plan {d}/deep_plan.json", "nested too deeply"),
    ("simulate example:mlp --plan {d}/digits_plan.json", "digits_plan.json: not valid JSON (a number of"),
    ("simulate example:mlp -c cpu:1 --profile {d}/deep_profile.json", "nested too deeply"),
    ("info {d}/shape_1e30.json", "shape_1e30.json: node 0 ('x') has shape [1000000000000000000000000000000]; "
                                 "every size must be 1 to 2^63-1"),
    ("info {d}/rank9_wraps.json", "rank9_wraps.json: malformed graph record (OverflowError"),
    ("simulate {d}/flops_1e308.json", "MAX_FLOPS"),
    ("simulate {d}/bytes_1e20.json", "MAX_BYTES"),
    ("simulate {d}/empty.json", "has no ops"),
    ("simulate example:mlp -c {d}/count_50000.toml", "MAX_DEVICES"),
    ("simulate example:layered-\u0661\u0662", "expected example:layered-N with an integer N"),
    ("zoo build rnnlm-2 -o {d}/z.txt", "z.txt: expected a .npz or .json file name"),
    ("simulate example:mlp -c {d}/colon:name.toml", "colon:name.toml: no such file"),
    ("simulate example:mlp -c {d}/dispatch_nan.toml",
     "dispatch_nan.toml: cluster 'dgx1-v100': device 'gpu:0': dispatch_overhead=nan"),
    ("simulate example:mlp -c {d}/typo_key.toml",
     "[[devices]]: unknown key 'launch_overhed_us'; expected one of"),
    ("simulate example:mlp -c {d}/one_way.toml", "links must be symmetric (a link joins two devices)"),
    ("simulate example:mlp -c {d}/count_0.toml", "count = 0"),
    ("simulate example:mlp -c {d}/count_str.toml", "'count'"),
    ("simulate example:mlp -c {d}/peak_str.toml", "peak_str.toml: key 'x' = 'a' is not a number"),
    ("simulate example:mlp -c {d}/latency_list.toml", "'latency_us'"),
    ("simulate example:mlp -c {d}/latin1.toml", "UTF-8"),
    ("simulate example:mlp -c ../../x:2", "unknown cluster preset"),
    ("simulate example:mlp --plan {d}/short_plan.json", "short_plan.json: plan placement has 2"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/far_plan.json",
     "far_plan.json: plan placement[0] = 7: node 0 on device 7"),
    ("info {d}/random.npz", "not an npz archive"),
    ("info {d}/lfs.npz", "Git LFS pointer"),
    ("info {d}/bomb.npz", "GRAPHOPT_MAX_NPZ_BYTES"),
    # built-in graphs with bounds
    ("info example:layered-0", "1..1,000,000"),
    ("info example:layered--5", "1..1,000,000"),
    ("info example:layered-100000000000", "1..1,000,000"),
    # options
    ("optimize example:mlp --methods , --budget 10", "no method named"),
    ("optimize example:mlp --methods sa --budget 10 --seed -1", "--seed"),
    # torch.manual_seed took it as an overflow traceback, after the graph was loaded
    ("optimize example:mlp --methods hdp --seed 100000000000000000000000", "expected a whole number"),
    ("train --seed 4294967296 --updates 1 --out {d}/t", "--seed 4294967296: expected a whole number"),
    ("tune example:mlp -m sa --seeds 0,-1 --out {d}/t.json", "--seeds '0,-1': expected whole numbers in 0"),
    ("costmodel train --data {d}/tiles --seed 4294967296 --out {d}/cm", "--seed=4294967296: expected <="),
    ("optimize example:mlp --methods go -p go.units=foo", "go.units='foo'"),
    ("optimize example:mlp --methods sa -p sa.chains=0", "sa.chains=0"),
    ("optimize example:mlp --methods sa -p sa.chains=-4", "sa.chains=-4"),
    ("optimize example:mlp --methods sa -p sa.reset_every=0", "sa.reset_every=0"),
    # population sizes are bounded (metadata "limit"): 10^9 chains was a 164 GiB allocation
    ("optimize example:mlp --methods sa -p sa.chains=1000000000", "sa.chains=1000000000: expected <= 10000"),
    ("optimize example:mlp --methods brkga -p brkga.population=1000000000", "expected <= 10000"),
    ("optimize example:mlp --methods random-search -p random-search.batch_size=1000000000",
     "random-search.batch_size=1000000000: expected <= 10000"),
    ("optimize example:mlp --methods regal -p regal.population=1000000000", "expected <= 10000"),
    ("optimize example:mlp --methods sa -p sa.alpha=nan", "finite"),
    ("optimize example:mlp --methods sa -p sa.initial_temperature=-1", "expected > 0"),
    # every method's hyperparameters have ranges (field metadata, check_params)
    ("optimize example:mlp --methods brkga -p brkga.population=1", "expected >= 2"),
    ("optimize example:mlp --methods brkga -p brkga.elite_fraction=1.5", "expected <= 1"),
    ("optimize example:mlp --methods brkga -p brkga.mutant_alpha=0", "expected > 0"),
    ("optimize example:mlp --methods brkga -p brkga.elite_fraction=0.8 -p brkga.mutant_fraction=0.3",
     "brkga.elite_fraction + brkga.mutant_fraction = 0.8 + 0.3: expected <= 1"),
    ("optimize example:mlp --methods local-search -p local-search.batch_size=0", "expected >= 1"),
    ("optimize example:mlp --methods random-search -p random-search.batch_size=-3", "expected >= 1"),
    ("optimize example:mlp --methods cpsat -p cpsat.time_limit=0", "expected > 0"),
    ("optimize example:mlp --methods rl-lstm -p rl-lstm.hidden=100000", "expected <= 8192"),
    ("optimize example:mlp --methods rl-lstm -p rl-lstm.baseline_decay=2", "expected <= 1"),
    ("optimize example:mlp --methods hdp -p hdp.lr=-1", "hdp.lr=-1"),
    ("optimize example:mlp --methods hdp -p hdp.lr_decay=0", "expected > 0"),
    ("optimize example:mlp --methods go -p go.samples=0", "expected >= 1"),
    ("optimize example:mlp --methods go-one -p go-one.dim=40000", "expected <= 8192"),
    ("optimize example:mlp --methods go-one -p go-one.num_samples=0", "expected >= 1"),
    ("optimize example:mlp --methods go-finetune -p go-finetune.clip_coef=0", "expected > 0"),
    ("optimize example:mlp --methods go-finetune -p go-finetune.start=bogus",
     "go-finetune.start='bogus': expected one of init, best"),
    ("optimize example:mlp --methods go-one -p go-one.placement_flips=-1", "expected >= 0"),
    # max_rounds=0 was an AssertionError traceback; chunk=0 and max_repairs=-1 passed
    ("optimize example:mlp --methods heft -p heft.max_rounds=0", "heft.max_rounds=0: expected >= 1"),
    ("optimize example:mlp --methods m-etf -p m-etf.max_rounds=-1", "m-etf.max_rounds=-1: expected >= 1"),
    ("optimize example:mlp --methods round-robin -p round-robin.chunk=0", "round-robin.chunk=0: expected"),
    ("optimize example:mlp --methods metis -p metis.max_repairs=-1", "metis.max_repairs=-1: expected"),
    # samples and threads are bounded: 10^8 samples tried to allocate 9 TB, 10^8 threads
    # made libgomp abort the process
    ("optimize example:mlp --methods rl-lstm -p rl-lstm.num_samples=100000000", "expected <= 10000"),
    ("optimize example:mlp --methods hdp -p hdp.placer_samples=100000000", "expected <= 10000"),
    ("optimize example:mlp --methods go -p go.samples=100000000", "go.samples=100000000: expected <="),
    ("optimize example:mlp --methods go -p go.threads=100000000", "go.threads=100000000: expected <= 1024"),
    ("optimize example:mlp --methods cpsat -p cpsat.workers=100000", "cpsat.workers=100000: expected <="),
    ("train --threads 100000000 --updates 1 --out {d}/t15", "Invalid value for '--threads'"),
    ("train mcm --threads 100000000 --updates 1 --out {d}/t16", "Invalid value for '--threads'"),
    ("train --num-samples 100000000 --updates 1 --out {d}/t17", "--num-samples=100000000: expected <="),
    ("train regal --samples 1000000000 --out {d}/t18", "--samples=1000000000: expected <= 10000"),
    # corpus items: 10^12 ops hung building the graph, 0x0 was a traceback
    ("train regal --corpus layered:1000000x1000000:1 --out {d}/t19", "expected L, W >= 1 and L*W <="),
    ("train regal --corpus layered:0x0:1 --out {d}/t20", "'layered:0x0:1': expected L, W >= 1"),
    ("train regal --corpus layered:4x4:1*-1 --out {d}/t21", "SCALE must be a finite number > 0"),
    ("bench regal --graphs , --out {d}/r.json --docs {d}/r.md", "--graphs ',': no graph named"),
    ("bench regal --section a-->b --out {d}/r.json --docs {d}/r.md", "--section: section 'a-->b': expected"),
    # a ValueError traceback from the policy's head at the first update
    ("train regal -c dgx1-v100:8 --max-devices 2 --corpus layered:4x4:1 --out {d}/t22",
     "--cluster dgx1-v100:8 has 8 devices; --max-devices 2 gives the policy's head"),
    ("profile example:mlp -o {d}/p.json --device bogus", "device 'bogus'"),
    ("profile example:mlp -o {d}/p.json --device meta", "device 'meta': not a usable PyTorch device"),
    ("costmodel train --data {d}/tiles --device meta --out {d}/cm", "--device 'meta': not a usable"),
    ("train --seed -1 --updates 1 --out {d}/t", "--seed"),
    # output paths, refused before any work
    ("import {d}/file -o {d}", "--output"),
    ("simulate example:mlp --json {d}", "--json"),
    ("simulate example:mlp --trace {d}/file/x.json", "is a file, not a folder"),
    ("simulate example:mlp --gantt {d}/" + "x" * 300 + ".png", "exceeds"),
    ("optimize example:mlp --methods single --out {d}/file", "--out"),
    # files inside an output folder: a FileExistsError or IsADirectoryError traceback at the end
    ("optimize example:mlp --methods single,sa --out {d}/outdir", "outdir/sa is a file, not a folder"),
    ("train --updates 1 --out {d}/rundir", "rundir/policy.json: is a folder, expected a file"),
    ("train mcm --updates 1 --out {d}/rundir", "rundir/policy.json: is a folder, expected a file"),
    ("train regal --out {d}/rundir", "rundir/policy.json: is a folder, expected a file"),
    # a method's checkpoint folder: a FileExistsError traceback once the run had trained
    ("optimize example:mlp --methods go-finetune -p go-finetune.checkpoint_dir={d}/file/ck",
     "/file is a file, not a folder"),
    ("optimize example:mlp --methods go-finetune -p go-finetune.checkpoint_dir={d}/file",
     "--param go-finetune.checkpoint_dir /"),
    ("optimize example:mlp --methods hdp -p hdp.checkpoint_dir=/proc/x", "cannot write in /proc"),
    ("optimize example:mlp --methods rl-lstm -p rl-lstm.checkpoint_dir={d}/rundir",
     "rundir/policy.json: is a folder, expected a file"),
    ("demo --out {d}/file", "--out"),
    ("train --out {d}/file --updates 1", "--out"),
    ("profile example:mlp -o {d}", "--output"),
    ("zoo build rnnlm-2 -o {d}", "--out"),
    # graph files: missing, empty, truncated, wrong format, bad fields
    ("info {d}/missing.json", "missing.json: no such file"),
    ("info {d}/empty0.json", "empty0.json: not valid JSON (Expecting value"),
    ("info {d}/notjson.json", "notjson.json: not valid JSON (Expecting property"),
    ("info {d}/list.json", "list.json: not a graphopt graph (expected format"),
    ("info {d}/wrongfmt.json", "wrongfmt.json: not a graphopt graph (expected"),
    ("info {d}/version99.json", "version99.json: format version 99 is newer than"),
    ("info {d}/nodes_str.json", "nodes_str.json: malformed graph record"),
    ("info {d}/no_op.json", "no_op.json: malformed graph record (KeyError"),
    ("info {d}/edge_far.json", "edge_far.json: edge 0 has dst=999, out of range for 12 nodes"),
    ("info {d}/cycle.json", "cycle.json: graph 'mlp-1x8-b2': cycle through"),
    ("info {d}/CYCLE.JSON", "CYCLE.JSON: graph 'mlp-1x8-b2': cycle through"),  # read as JSON
    ("info {d}/edge_half.json", "edge_half.json: edge 0 = [0.5, 1, 1.0]; expected [src, dst, bytes]"),
    ("info {d}/edge_text.json", 'edge_text.json: edge 0 = ["0", "1", 1.0]; expected [src, dst'),
    ("info {d}/shape_text.json", "shape_text.json: node 0 has shape='22'; expected a list of integers"),
    ("info {d}/shape_half.json", "shape_half.json: node 0 has shape=[2.5]; expected a list of"),
    ("info {d}/flops_neg.json", "flops_neg.json: graph 'mlp-1x8-b2': node 'x' has"),
    ("info {d}/flops_nan.json", "flops_nan.json: graph 'mlp-1x8-b2': node 'x' has"),
    ("info {d}/flops_str.json", 'flops_str.json: node 0 has flops="many"; expected a number'),
    ("info {d}/flops_true.json", "flops_true.json: node 0 has flops=true; expected a number"),
    ("info {d}/coloc_half.json", "coloc_half.json: node 0 has coloc=1.5; expected an integer"),
    ("info {d}/op_bogus.json", "op_bogus.json: node 0 has op=42; expected a"),
    ("info {d}/shape_neg.json", "shape_neg.json: node 0 ('x') has shape [-3]; every size must be 1 to "
                                "2^63-1"),
    ("info {d}/shape_str.json", "shape_str.json: node 0 has shape='2x2'; expected a list"),
    ("info {d}/dup_names.json", "dup_names.json: graph 'mlp-1x8-b2': duplicate"),
    ("info {d}/coloc_str.json", 'coloc_str.json: node 0 has coloc="a"; expected an integer'),
    ("info {d}/empty0.npz", "empty0.npz: not an npz archive"),
    ("info {d}/truncated.npz", "truncated.npz: not an npz archive"),
    # a dtype numpy would cast silently: the JSON reader refuses the same values
    ("info {d}/header_deep.npz", "header_deep.npz: truncated, corrupted or not an npz file (RecursionError"),
    ("info {d}/src_float.npz", "src_float.npz: array 'src' has dtype float64; expected integers"),
    ("info {d}/op_int.npz", "op_int.npz: array 'op' has dtype int64; expected text"),
    ("info {d}/flops_bool.npz", "flops_bool.npz: array 'flops' has dtype bool; expected numbers"),
    ("info {d}/graph.txt", "graph.txt: no importer for '.txt' files"),
    ("info {d}", ": no importer for 'suffix-less' files"),
    ("info example:bogus", "unknown example graph 'example:bogus'; known"),
    ("info example:layered-x", "graph 'example:layered-x': expected"),
    ("info zoo:bogus", "unknown zoo model 'bogus'; known: rnnlm-2"),
    ("info bogus:thing", "bogus:thing: no importer for 'suffix-less'"),
    ("import {d}/missing.onnx -o {d}/o.npz", "missing.onnx: no such file"),
    ("import {d}/empty0.onnx -o {d}/o.npz", "empty0.onnx: has no ops; nothing to"),
    ("import {d}/random.onnx -o {d}/o.npz", "random.onnx: not an ONNX model (DecodeError"),
    ("import {d}/empty0.pt2 -o {d}/o.npz", "empty0.pt2: unreadable or unsafe torch.export"),
    ("import {d}/graph.txt -o {d}/o.npz", "graph.txt: no importer for '.txt' files"),
    ("import {d}/g.json -o {d}/o.txt", "o.txt: expected a .npz or .json file"),
    # plan JSON
    ("simulate example:mlp --plan {d}/missing.json", "missing.json: no such file"),
    ("simulate example:mlp --plan {d}/empty0.json", "empty0.json: not valid JSON (Expecting value"),
    ("simulate example:mlp --plan {d}/notjson.json", "notjson.json: not valid JSON (Expecting property"),
    ("simulate example:mlp --plan {d}/list.json", "list.json: not a graphopt plan (expected format"),
    ("simulate example:mlp --plan {d}/g.json", "g.json: not a graphopt plan (expected format"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_v99.json",
     "plan_v99.json: format version 99 is newer than"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_str.json",
     'plan_str.json: plan placement[0] = "a"; expected a number'),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_bool.json",
     "plan_bool.json: plan placement[0] = true; expected a number"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_prio_text.json",
     'plan_prio_text.json: plan priority[0] = "1e3"; expected a number'),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_neg.json",
     "plan_neg.json: plan placement[0] = -1: node 0 on device -1"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_float.json",
     "plan_float.json: plan placement[0] = 0.5"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_nested.json",
     "plan_nested.json: plan placement must be one"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_prio_short.json",
     "plan_prio_short.json: plan priority has 1"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_prio_nan.json",
     "plan_prio_nan.json: plan priority[0] = nan"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_fusion_bad.json",
     'plan_fusion_bad.json: plan fusion[0] = "x"; expected a number'),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_meta_list.json",
     "plan_meta_list.json: meta must be an object, got"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_placement_obj.json",
     "plan_placement_obj.json: plan placement is not"),
    ("simulate {d}/g.json -c dgx1-v100:2 --plan {d}/plan_huge_int.json",
     "plan_huge_int.json: plan placement[0] = 1e+30"),
    ("optimize example:mlp --methods single --init bogus",
     "unknown method 'bogus'; known methods: best, brkga"),
    ("run example:mlp --plan {d}/missing.json", "missing.json: no such file"),
    ("export {d}/missing.json --graph example:mlp --format device-map --out {d}/e.json",
     "missing.json: no such file"),
    ("export {d}/short_plan.json --graph example:mlp --format bogus --out {d}/e.json",
     "--format 'bogus': expected one of device-map"),
    # the plan's file named; the default cluster's limit said, not "cannot take 6"
    ("export {d}/short_plan.json --graph {d}/g.json --format pipeline --out {d}/e.json",
     "short_plan.json: plan placement has 2 entries"),
    ("export {d}/wide_plan.json --graph {d}/g.json --format device-map --out {d}/e.json",
     "wide_plan.json: plan places ops on 6 devices, more than the default cluster 'cpu' has"),
    # a plan of another graph with as many nodes: exported silently; run refused it unnamed
    ("simulate {d}/g.json --plan {d}/foreign_plan.json",
     "foreign_plan.json: the plan was made for graph 'other' (12 nodes, fingerprint abc)"),
    ("export {d}/foreign_plan.json --graph {d}/g.json --format device-map --out {d}/e.json",
     "foreign_plan.json: the plan was made for graph 'other' (12 nodes, fingerprint abc)"),
    # profile JSON
    ("simulate example:mlp -c cpu:1 --profile {d}/missing.json", "missing.json: no such file"),
    ("simulate example:mlp -c cpu:1 --profile {d}/empty0.json",
     "empty0.json: not valid JSON (Expecting value"),
    ("simulate example:mlp -c cpu:1 --profile {d}/notjson.json",
     "notjson.json: not valid JSON (Expecting property"),
    ("simulate example:mlp -c cpu:1 --profile {d}/g.json", "g.json: format is 'graphopt.graph'"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_v99.json", "prof_v99.json: version 99 is not"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_entries_obj.json",
     "prof_entries_obj.json: 'entries' is"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_no_kind.json",
     "prof_no_kind.json: 'device_kind' is"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_neg.json",
     "prof_neg.json: entry 0: seconds is -1"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_nan.json",
     "prof_nan.json: entry 0: seconds is nan"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_entry_str.json",
     "prof_entry_str.json: entry 0: expected"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_shape_bad.json",
     "prof_shape_bad.json: entry 0: out_shape"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_dup.json",
     "prof_dup.json: entry 1 repeats signature"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_meta_list.json",
     "prof_meta_list.json: 'meta' is not an"),
    ("simulate example:mlp -c cpu:1 --profile {d}/prof_missing_op.json",
     "prof_missing_op.json: entry 0: missing"),
    ("simulate example:mlp --profile @V100-SXM2-16GB", "--profile @V100-SXM2-16GB: no file before '@'"),
    ("simulate example:mlp --profile {d}/deep_profile.json@",
     "deep_profile.json: not valid JSON (nested too"),
    # cluster TOML and cluster names
    ("simulate example:mlp -c {d}/missing.toml", "missing.toml: no such file"),
    ("simulate example:mlp -c {d}/empty0.toml", "empty0.toml: needs at least one [[devices]]"),
    ("simulate example:mlp -c {d}/deep.toml", "deep.toml: invalid TOML (nested too deeply)"),
    ("simulate example:mlp -c {d}/syntax.toml", "syntax.toml: invalid TOML (Invalid value (at"),
    ("simulate example:mlp -c {d}/no_devices.toml", "no_devices.toml: needs at least one [[devices]]"),
    ("simulate example:mlp -c {d}/mem_neg.toml",
     "mem_neg.toml: cluster 'dgx1-v100': device 'gpu:0': mem_bw=-9"),
    ("simulate example:mlp -c {d}/mem_nan.toml",
     "mem_nan.toml: cluster 'dgx1-v100': device 'gpu:0': mem_bw=nan"),
    ("simulate example:mlp -c {d}/mem_inf.toml",
     "mem_inf.toml: cluster 'dgx1-v100': device 'gpu:0': mem_bw=inf"),
    ("simulate example:mlp -c {d}/memory_0.toml",
     "memory_0.toml: cluster 'dgx1-v100': device 'gpu:0': memory=0.0"),
    ("simulate example:mlp -c {d}/count_float.toml", "count_float.toml: key 'count' = 1.5 is not a"),
    ("simulate example:mlp -c {d}/count_neg.toml", "count_neg.toml: [[devices]] count = -1; expected"),
    ("simulate example:mlp -c {d}/peak_empty.toml", "peak_empty.toml: [[devices]] 'V100-SXM2-16GB'"),
    ("simulate example:mlp -c {d}/peak_neg.toml",
     "peak_neg.toml: cluster 'dgx1-v100': device 'gpu:0': peak_flops['float32']"),
    ("simulate example:mlp -c {d}/links_short.toml", "links_short.toml: links must be a 8x8 matrix"),
    ("simulate example:mlp -c {d}/links_neg.toml", "links_neg.toml: links must count links between"),
    ("simulate example:mlp -c {d}/link_gbps_0.toml",
     "link_gbps_0.toml: [topology] link_gbps = 0.0 GB/s; expected 0.001..1e+06 GB/s"),
    ("simulate example:mlp -c {d}/latency_neg.toml",
     "latency_neg.toml: [topology] latency_us = -5.0 us; expected 0..1e+06 us"),
    ("simulate example:mlp -c {d}/topo_bogus.toml", "topo_bogus.toml: topology type 'bogus' is not"),
    ("simulate example:mlp -c {d}/launch_neg.toml",
     "launch_neg.toml: cluster 'dgx1-v100': device 'gpu:0': launch_overhead=-"),
    ("simulate example:mlp -c {d}/devices_table.toml", "devices_table.toml: needs at least one"),
    ("simulate example:mlp -c {d}/kind_int.toml", "kind_int.toml: key 'kind' = 7 is not a str"),
    ("simulate example:mlp -c {d}/xcpu_0.toml",
     "xcpu_0.toml: cluster 'dgx1-v100': device 'gpu:0': transfer_cpu_bw=0.0"),
    ("simulate example:mlp -c {d}/xcpu_str.toml", "xcpu_str.toml: key 'transfer_cpu_gbps' = 'fast'"),
    ("simulate example:mlp -c {d}/xmsg_neg.toml",
     "xmsg_neg.toml: cluster 'dgx1-v100': device 'gpu:0': transfer_cpu_overhead=-"),
    ("simulate example:mlp -c {d}/xmsg_inf.toml",
     "xmsg_inf.toml: cluster 'dgx1-v100': device 'gpu:0': transfer_cpu_overhead=inf"),
    ("simulate example:mlp -c {d}/overlap_int.toml", "overlap_int.toml: [topology] overlap_latency ="),
    ("simulate example:mlp -c {d}/launch_inf.toml",
     "launch_inf.toml: cluster 'dgx1-v100': device 'gpu:0': launch_overhead=inf"),
    ("simulate example:mlp -c {d}/peak_bool.toml", "peak_bool.toml: key 'float32' = True is not a number"),
    ("simulate example:mlp -c {d}/rates_tiny.toml",
     "rates_tiny.toml: cluster 'dgx1-v100': device 'gpu:0': vector_flops="),
    ("optimize example:mlp -c {d}/rates_tiny.toml --methods m-sct --budget 4",
     "rates_tiny.toml: cluster 'dgx1-v100': device 'gpu:0': vector_flops="),
    ("simulate example:mlp -c {d}/prefix_int.toml", "prefix_int.toml: key 'prefix' = 7 is not a string"),
    ("simulate example:mlp -c {d}/switch_0.toml", "switch_0.toml: [topology] per_switch = 0; expected"),
    ("simulate example:mlp -c {d}/root_nan.toml",
     "root_nan.toml: [topology] root_gbps = nan GB/s; expected 0.001..1e+06 GB/s"),
    ("simulate example:mlp -c {d}/dims_text.toml", "dims_text.toml: [topology] dims = '8'; expected a"),
    ("simulate example:mlp -c {d}/g.json", "g.json'; known presets"),
    ("simulate example:mlp -c {d}/huge.toml", "huge.toml': 1,073,741,824 bytes, more than 1,048,576"),
    ("simulate example:mlp -c {d}/wake_short.toml",
     "wake_short.toml: cluster 'dgx1-v100': device 'gpu:0': wake_cost=[1, 2]"),
    ("simulate example:mlp -c {d}/wake_neg.toml",
     "wake_neg.toml: cluster 'dgx1-v100': device 'gpu:0': wake_cost=(("),
    ("optimize example:mlp --methods sa -p {d}/tuned_bad.json", "tuned_bad.json: 'sa.chains=many': sa."),
    ("optimize example:mlp --methods sa -p {d}/tuned_huge.json",
     "tuned_huge.json: sa.chains=1000000000: expected <= 10000"),
    ("simulate example:mlp -c dgx1-v100:0", "cluster 'dgx1-v100' has 8 devices; cannot take"),
    ("simulate example:mlp -c dgx1-v100:x", "cluster 'dgx1-v100:x': device count 'x' is not"),
    ("simulate example:mlp -c dgx1-v100:99", "cluster 'dgx1-v100' has 8 devices; cannot take"),
    ("simulate example:mlp -c dgx1-v100:-2", "device count '-2' is not ASCII digits"),
    ("simulate example:mlp -c bogus:2", "unknown cluster preset 'bogus'; known presets"),
    ("simulate example:mlp -c :2", "unknown cluster preset ''; known presets: cpu"),
    ("simulate example:mlp -c /etc/passwd", "unknown cluster preset '/etc/passwd'; known"),
    # options of optimize, profile, train, run, bench, zoo, methods
    ("optimize example:mlp --methods sa --budget 0", "--budget 0: expected a whole number in 1.."),
    ("optimize example:mlp --methods sa --time -1", "Invalid value for '--time'"),
    ("optimize example:mlp --methods sa --time nan", "Invalid value for '--time'"),
    ("optimize example:mlp --methods sa --task bogus", "unknown task ['bogus']; tasks are fusion"),
    ("optimize example:mlp --methods sa --task ,", "unknown task ['']; tasks are fusion, placement"),
    ("optimize example:mlp --methods bogus", "unknown method 'bogus'; known methods: best, brkga"),
    ("optimize example:mlp --methods sa -p nodot", "--param 'nodot': expected METHOD.KEY=VALUE, e.g."),
    ("optimize example:mlp --methods sa -p sa.bogus=1", "--param 'sa.bogus=1': sa has no parameter"),
    ("optimize example:mlp --methods sa -p sa.chains=x", "--param 'sa.chains=x': sa.chains expects int"),
    ("optimize example:mlp --methods sa -p bogus.x=1", "--param 'bogus.x=1': method 'bogus' is not among"),
    ("optimize example:mlp --methods sa -p {d}/deep_plan.json", "deep_plan.json: not valid JSON (nested too"),
    ("optimize example:mlp --methods sa -p sa.alpha=inf", "sa.alpha=inf: expected a finite number"),
    ("optimize example:mlp --methods sa --measure-steps 0", "Invalid value for '--measure-steps'"),
    ("optimize example:mlp --methods single --memory-fraction 1e308",
     "--memory-fraction 1e+308: cluster 'dgx1-v100:4': device 'gpu:0': memory=inf"),
    ("optimize example:mlp --methods sa --devices bogus", "--devices bogus: only with --measure"),
    ("methods bogus", "unknown method 'bogus'; known methods: best, brkga"),
    ("profile example:mlp -o {d}/p.json --repeats 0", "Invalid value for '--repeats'"),
    ("profile example:mlp -o {d}/p.json --max-ops 0", "Invalid value for '--max-ops'"),
    ("profile example:mlp -o {d}/p.json --time-limit -1", "Invalid value for '--time-limit'"),
    ("train --updates 0 --out {d}/t1", "Invalid value for '--updates'"),
    ("train --updates 1 --minutes -1 --out {d}/t2", "Invalid value for '--minutes'"),
    ("train --updates 1 --threads 0 --out {d}/t3", "Invalid value for '--threads'"),
    ("train --updates 1 --lr -1 --out {d}/t4", "--lr=-1.0: expected > 0"),
    ("train --updates 1 --lr nan --out {d}/t5", "--lr=nan: expected a finite number"),
    ("train --updates 1 --num-samples 0 --out {d}/t6", "--num-samples=0: expected >= 1"),
    ("train --updates 1 --update-epochs 0 --out {d}/t7", "--update-epochs=0: expected >= 1"),
    ("train --updates 1 --clip-coef 0 --out {d}/t8", "--clip-coef=0.0: expected > 0"),
    ("train --updates 1 --ent-coef -1 --out {d}/t9", "--ent-coef=-1.0: expected >= 0"),
    ("train --updates 1 --max-grad-norm -1 --out {d}/t10", "--max-grad-norm=-1.0: expected > 0"),
    ("train --updates 1 --task bogus --out {d}/t12", "unknown task ['bogus']; tasks are fusion"),
    ("train --updates 1 --corpus bogus:x --out {d}/t13", "no importer for"),  # on dgx1-v100:4
    ("train --updates 1 --corpus , --out {d}/t14", "--corpus ',': no GRAPH@CLUSTER item"),
    ("run example:mlp --steps 0", "Invalid value for '--steps'"),
    ("run example:mlp --steps 100000", "Invalid value for '--steps'"),
    ("run example:mlp --seed -1", "--seed -1: expected a whole number in 0..4,294,967,295"),
    ("run zoo:rnnlm-2-quick --devices cpu:\u00b2", "--devices 'cpu:\u00b2': expected cpu[:N] or cuda"),
    ("run zoo:rnnlm-2-quick --devices cpu:3", "--devices cpu:3: cluster 'cpu' has 2 devices; cannot take 3 "
     "(the default --cluster); give a cluster of 3 devices ('graphopt calibrate --devices cpu:3"),
    ("calibrate --devices cpu:1000000000 -o {d}/c.toml", "cuda[:N] with N in 1..64"),
    ("zoo build bogus -o {d}/z.npz", "unknown zoo model 'bogus'; known: rnnlm-2"),
    ("bench go-table2 --budget 0", "--budget 0: expected a whole number in 1..1,000,000,000"),
    ("bench rewrite --cost bogus --out {d}/rw.json", "--cost='bogus': expected one of roofline"),
    ("rewrite {d}/masked.pt2 -o {d}/rw.pt2", "size (u0,) depends on the input data"),
    ("info {d}/masked.pt2",
     "masked.pt2: node 'index' (aten.index.Tensor) has a shape known only at run time, (u0,)"),
    ("bench rewrite --models nope --out {d}/rw.json", "--models nope: expected some of bert"),
    # a folder where nothing can be made, whoever asks (access() says yes to root)
    ("rewrite nasrnn --size tiny -o /proc/graphopt/rw.pt2", "cannot write in /proc"),
    ("rewrite nasrnn --size tiny -o {d}/rw.pt2 --search-time-limit 0",
     "--search-time-limit=0.0: expected > 0"),
    ("bench regal --elite-bias-policy {d}/nope --out {d}/r.json", "nope/policy.json: no such file"),
    ("bench regal --methods BRKGA-5K --elite-bias-policy {d} --out {d}/r.json",
     "--elite-bias-policy: --methods has none of the rows that run it"),
    ("bench go --budget 0", "--budget 0: expected a whole number in 1..1,000,000,000"),
    ("bench go --multitask-budget 0", "Invalid value for '--multitask-budget'"),
    # a results file or docs page that cannot be written: refused before the benchmark runs
    ("bench go --docs {d} --out {d}/go.json", "error: --docs "),
    ("bench go --out {d}", "error: --out "),
    ("bench go-table2 --docs {d}/file/x.md --out {d}/t.json", "error: --docs "),
    ("bench fusion --docs {d} --out {d}/f.json", "error: --docs "),
    ("bench mcm --docs {d} --out {d}/m.json", "error: --docs "),
    ("bench regal --docs {d} --out {d}/r.json", "error: --docs "),
    ("bench rewrite --docs {d} --out {d}/rw.json", "error: --docs "),
    # cost model: options (TrainConfig ranges), data files, run directories
    ("costmodel train --data {d}/missing --out {d}/cm", "missing: no such file or directory"),
    ("costmodel train --out {d}/cm", "no training data given (TrainConfig.data)"),
    ("costmodel train --data {d}/file --out {d}/cm", "file: expected a directory of .npz files, an"),
    ("costmodel train --data {d}/emptydir --out {d}/cm", "emptydir: no .npz files in this directory"),
    ("costmodel train --data {d}/random.npz --out {d}/cm", "random.npz: not an npz archive"),
    ("costmodel train --data {d}/tiles --epochs 0 --out {d}/cm", "--epochs=0: expected >= 1"),
    ("costmodel train --data {d}/tiles --hidden -1 --out {d}/cm", "--hidden=-1: expected >= 0"),
    ("costmodel train --data {d}/tiles --hidden 100000 --out {d}/cm", "--hidden=100000: expected <= 8192"),
    ("costmodel train --data {d}/tiles --layers 1000 --out {d}/cm", "--layers=1000: expected <= 64"),
    ("costmodel train --data {d}/tiles --dropout 2 --out {d}/cm", "--dropout=2.0: expected <= 1"),
    ("costmodel train --data {d}/tiles --test-fraction 0 --out {d}/cm", "--test-fraction=0.0: expected > 0"),
    ("costmodel train --data {d}/tiles --test-fraction 1.5 --out {d}/cm",
     "--test-fraction=1.5: expected <= 1"),
    ("costmodel train --data {d}/tiles --lr nan --out {d}/cm", "--lr=nan: expected a finite number"),
    ("costmodel train --data {d}/tiles --lr 0 --out {d}/cm", "--lr=0.0: expected > 0"),
    ("costmodel train --data {d}/tiles --weight-decay -1 --out {d}/cm", "--weight-decay=-1.0: expected >= 0"),
    ("costmodel train --data {d}/tiles --configs-per-graph 1 --out {d}/cm",
     "--configs-per-graph=1: expected >= 2"),
    ("costmodel train --data {d}/tiles --split half --out {d}/cm",
     "--split='half': expected one of auto, dirs"),
    ("costmodel train --data {d}/tiles --sed-p 2 --out {d}/cm", "--sed-p=2.0: expected <= 1"),
    ("costmodel train --data {d}/tiles --segment-size 0 --out {d}/cm", "--segment-size=0: expected >= 1"),
    ("costmodel train --data {d}/tiles --fresh-segments 0 --out {d}/cm", "--fresh-segments=0: expected >= 1"),
    ("costmodel train --data {d}/tiles --halo -2 --out {d}/cm", "--halo=-2: expected >= -1"),
    ("costmodel train --data {d}/tiles --prune-hops -2 --out {d}/cm", "--prune-hops=-2: expected >= -1"),
    ("costmodel train --data {d}/tiles --eval-chunk 0 --out {d}/cm", "--eval-chunk=0: expected >= 1"),
    ("costmodel train --data {d}/tiles --eval-every -1 --out {d}/cm", "--eval-every=-1: expected >= 0"),
    ("costmodel train --data {d}/tiles --margin -1 --out {d}/cm", "--margin=-1.0: expected >= 0"),
    ("costmodel train --data {d}/tiles --mse-weight -1 --out {d}/cm", "--mse-weight=-1.0: expected >= 0"),
    ("costmodel train --data {d}/tiles --fast-bias -1 --out {d}/cm", "--fast-bias=-1.0: expected >= 0"),
    ("costmodel train --data {d}/tiles --seed -1 --out {d}/cm", "--seed=-1: expected >= 0"),
    ("costmodel train --data {d}/tiles --threads -1 --out {d}/cm", "--threads=-1: expected >= 0"),
    ("costmodel train --data {d}/tiles --device bogus --out {d}/cm",
     "--device 'bogus': not a usable PyTorch device"),
    ("costmodel train --data {d}/tiles --model gat --out {d}/cm",
     "model 'gat' unknown; expected auto or one of"),
    ("costmodel train --data {d}/tiles --loss bogus --out {d}/cm",
     "loss 'bogus' unknown; expected one of ['hinge'"),
    ("costmodel train --data {d}/tiles --split dirs --out {d}/cm",
     "tiles: split 'dirs' needs train/ and valid/"),
    ("costmodel train --data {d}/tiles --split graphs --test-graphs bogus --out {d}/cm",
     "test graphs ['bogus'] are not in the dataset"),
    ("costmodel train --data {d}/tiles --out {d}/file", "file: is a file, expected a folder"),
    ("costmodel train --data {d}/tiles --resume {d}/emptydir --out {d}/cm",
     "emptydir: missing config.json; not a cost-model"),
    ("costmodel train --data {d}/tiles --resume {d}/missing --out {d}/cm",
     "missing: missing config.json; not a cost-model"),
    ("costmodel train --data {d}/tile_badcfg.npz --out {d}/cm",
     "tile_badcfg.npz: key 'config_feat' has 5 rows"),
    ("costmodel train --data {d}/tile_nan_runtime.npz --out {d}/cm",
     "tile_nan_runtime.npz: key 'config_runtime' has a"),
    ("costmodel train --data {d}/layout_badids.npz --out {d}/cm",
     "layout_badids.npz: key 'node_config_ids' entry 2"),
    ("costmodel eval {d}/missing", "missing: missing config.json; not a cost-model"),
    ("costmodel eval {d}/emptydir", "emptydir: missing config.json; not a cost-model"),
    ("costmodel eval {d}/file", "file: missing config.json; not a cost-model"),
    ("costmodel eval {d}/badrun", "badrun/config.json: not valid JSON (Expecting"),
    ("costmodel eval {d}/deeprun", "deeprun/config.json: not valid JSON (nested too deeply)"),
    ("costmodel eval {d}/emptydir --chunk 0", "Invalid value for '--chunk'"),
    ("costmodel rank {d}/emptydir {d}/tiles/k0.npz --top 0", "Invalid value for '--top'"),
    ("costmodel rank {d}/missing {d}/tiles/k0.npz", "missing: missing config.json; not a cost-model"),
    # device maps under a budget: every --max-memory entry checked before any work
    ("export {d}/short_plan.json --graph example:mlp --format device-map --max-memory 0=lots "
     "--out {d}/e.json", "--max-memory '0=lots': device 0: 'lots' is not a size"),
    ("export {d}/short_plan.json --graph example:mlp --format device-map --max-memory 0=-1GiB "
     "--out {d}/e.json", "'-1GiB' is not a size of at least 0 bytes"),
    ("export {d}/short_plan.json --graph example:mlp --format device-map --max-memory 0=1e400 "
     "--out {d}/e.json", "'1e400' is not a size"),
    # issue 49: digits of other scripts were read as GPU indices and sizes
    ("export {d}/short_plan.json --graph example:mlp --format device-map --max-memory \u0660=1GiB "
     "--out {d}/e.json", "DEVICE a GPU index (ASCII digits, 0..1023)"),
    ("export {d}/short_plan.json --graph example:mlp --format device-map --max-memory 0=\u0662GiB "
     "--out {d}/e.json", "device 0: '\u0662GiB' is not a size (ASCII digits"),
    ("export {d}/short_plan.json --graph example:mlp --format device-map --max-memory gpu=1GiB "
     "--out {d}/e.json", "expected DEVICE=SIZE entries"),
    ("export {d}/short_plan.json --graph example:mlp --format device-map "
     "--max-memory 0=2GiB,0=1GiB --out {d}/e.json", "device 0 given twice"),
    # the pipeline task's plan files and options
    ("run pipe:mlp:layers=3,hidden=16,batch=8 --pipeline {d}/deep_plan.json --devices cpu:2",
     "nested too deeply"),
    ("optimize pipe:mlp:layers=3,hidden=16,batch=8 --task pipeline --stages 0",
     "Invalid value for '--stages'"),
    ("run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {d}/pipe_virtual0.json --devices cpu:2",
     "pipe_virtual0.json: virtual must be a count of chunks"),
    ("run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {d}/pipe_virtual3.json --devices cpu:2",
     "divides the 4 chunks of bounds, got 3"),
    ("run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {d}/pipe_virtual_str.json "
     "--devices cpu:2", "got '2'"),
    *[(f"run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {{d}}/pipe_{name}.json --devices cpu:2",
       f"pipe_{name}.json: {needle}") for name, needle in {
        "version_true": "pipeline plan version True", "overhead_str": "simulated.overhead must be seconds",
        "overhead_neg": "simulated.overhead must be seconds, 0 to 3600, got '-1'",
        "overhead_inf": "simulated.overhead must be seconds, 0 to 3600, got 'inf'",
        "cores_half": "simulated.cores must be a core count", "simulated_list": "simulated must be an object",
    }.items()],
    ("run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {d}/pipe_inter_m1.json --devices cpu:2",
     "pipe_inter_m1.json: "),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --stages 2 "
     "--schedule interleaved --virtual-stages 0", "Invalid value for '--virtual-stages'"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --stages 2 "
     "--schedule interleaved --virtual-stages 3", "--virtual-stages 3"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --stages 2 "
     "--schedule interleaved --methods mcm", "mcm"),
    ("optimize pipe:mlp:layers=20,hidden=8,batch=32 --task pipeline --stages 17 --methods mcm",
     "--stages 17"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --stages 2 --methods nosuch",
     "'nosuch' is no pipeline method"),
    # any model into the pipeline task: a user's file, its factory, its blocks, its plans
    ("optimize py:{d}/raises.py:make --task pipeline", "importing"),
    ("optimize py:{d}/none.py:make --task pipeline", "no file"),
    ("optimize py:{d}/user.py:absent --task pipeline", "has no function 'absent'"),
    ("optimize py:{d}/user.py:not_callable --task pipeline", "has no function 'not_callable'"),
    ("optimize py:{d}/user.py:none --task pipeline", "must return (module, inputs"),
    ("optimize py:{d}/user.py:text_inputs --task pipeline", "inputs must be a tensor"),
    ("optimize py:{d}/user.py:raises --task pipeline", "raises() raised KeyError"),
    ("optimize py:{d}/user.py:flat --task pipeline", "no blocks to split"),
    ("optimize py:{d}/user.py:two --task pipeline --stages 3", "only 2 blocks"),
    ("optimize py:{d}/user.py:flat:width=8 --task pipeline", "raised TypeError"),
    ("optimize py:{d}/user.py --task pipeline", "expected py:FILE.py:FACTORY"),
    ("optimize py:{d}/user.py:make:__class__=x --task pipeline", "does not begin with '_'"),
    ("info py:{d}/raises.py:make", "RuntimeError: cannot import here"),
    ("optimize example:mlp --task pipeline", "a generated graph"),
    ("optimize {d}/file --task pipeline", "no PyTorch code behind it"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --init even", "--init"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline -p exact.x=1", "-p: not an"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --objective memory",
     "--objective: not an option of --task pipeline"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --time 5", "--time"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --virtual-stages 3",
     "--virtual-stages: not an option"),
    ("optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline --methods sa",
     "'sa' is no pipeline method"),
    ("optimize example:mlp --methods even", "method even serves the pipeline task"),
    ("run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {d}/pipe_blocks_short.json "
     "--devices cpu:2", "blocks must be the 4 blocks' module names"),
    ("run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {d}/pipe_blocks_int.json "
     "--devices cpu:2", "blocks must be"),
    ("run pipe:mlp:layers=4,hidden=16,batch=8 --pipeline {d}/pipe_blocks_other.json "
     "--devices cpu:2", "the plan's blocks are not"),
    ("export {d}/pipe_virtual3.json --format pipeline --out {d}/e.py", "virtual must be"),
    ("export {d}/pipe_blocks_other.json --format device-map --out {d}/e.py",
     "is a pipeline plan; give --format pipeline"),
    ("export {d}/pipe_blocks_other.json --format pipeline --graph example:mlp --out {d}/e.py",
     "--graph example:mlp"),
    # learning from search: corpora, target folders and policies that are not what they claim
    ("corpus search {d}/emptydir", "emptydir: not a corpus (no manifest.json)"),
    ("corpus regal-targets {d}/emptydir", "emptydir: not a corpus (no manifest.json)"),
    ("corpus mcm-targets --out {d}/mt --sources bogus:x", "unknown zoo model 'bogus'"),
    ("corpus mcm-targets --out {d}/mt --budget 0", "Invalid value for '--budget'"),
    ("train imitate {d}/emptydir --out {d}/ti", "emptydir: not a corpus (no manifest.json)"),
    ("train imitate {d}/emptydir --prior --init go-corpus --out {d}/ti",
     "--init go-corpus: not a prior-aware policy; --prior continues only from one"),
    ("train imitate {d}/emptydir --init go-prior --out {d}/ti",
     "--init go-prior: a prior-aware policy; continue it with --prior"),
    ("optimize example:layered-60-s5 -c p100:2 --methods go -p go.checkpoint=go-prior "
     "-p go.heuristics=nope", "unknown method 'nope'"),
    ("train mcm-imitate {d}/emptydir --out {d}/tm", "emptydir: no MCM targets"),
    ("train regal-imitate {d}/emptydir --out {d}/tr", "emptydir: no REGAL targets (no index.json)"),
    # issue 49: hf: overrides are settings (data, not a method, property or the model type), layer
    # counts >= 1, and a model whose estimated size exceeds the bounds is refused before it is built
    *[(f"info hf:{spec}", needle) for spec, needle in {
        "bert:model_type=gpt2": "model_type='gpt2': not a setting",
        "bert:to_dict=1": "'to_dict' is a method of BertConfig, not a setting",
        "bert:save_pretrained=x": "'save_pretrained' is a method of BertConfig",
        "bert:from_dict=1": "'from_dict' is a method of BertConfig",
        "bert:use_return_dict=true": "'use_return_dict' is a property of BertConfig",
        "bert:num_labels=3": "'num_labels' is a property of BertConfig",
        "bert:auto_map=x": "auto_map='x': not a setting", "bert:architectures=x": "architectures='x': not a",
        "bert:transformers_version=1": "transformers_version=1: not a setting",
        "bert:num_hidden_layers=0": "num_hidden_layers=0: a layer count is at least 1",
        "bert:num_hidden_layers=-1": "num_hidden_layers=-1: a layer count is at least 1",
        "gpt2:n_layer=0": "n_layer=0: a layer count is at least 1",
        "t5:num_decoder_layers=0": "num_decoder_layers=0: a layer count is at least 1",
        "bart:decoder_layers=-2": "decoder_layers=-2: a layer count is at least 1",
        "bert:hidden_size=1000000": "parameters, more than the",
        "bert:vocab_size=10000000000": "parameters, more than the",
        "bert:intermediate_size=100000000000": "parameters, more than the",
        "bert:max_position_embeddings=100000000000": "$GRAPHOPT_MAX_PARAMS",
        "bert:num_hidden_layers=100000000": "$GRAPHOPT_MAX_PARAMS",
        "bert:seq=65536,batch=4096": "a training step of about",
        "vit:image=4096,batch=4096,patch_size=1": "$GRAPHOPT_MAX_BYTES",
        "wav2vec2:samples=1000000,batch=4096": "$GRAPHOPT_MAX_BYTES",
        "mixtral:num_local_experts=100000": "$GRAPHOPT_MAX_PARAMS",
    }.items()],
    *[(f"info pipe:{spec}", needle) for spec, needle in {
        "mlp:hidden=1048576,batch=1048576": "parameters, more than the",
        "transformer-encoder:seq=1048576": "$GRAPHOPT_MAX_BYTES",
        "gpt2:vocab=1048576,hidden=65536": "$GRAPHOPT_MAX_PARAMS",
        "vit:image=1048576,patch=1": "$GRAPHOPT_MAX_PARAMS",
        "bert:layers=1048576,hidden=4096": "$GRAPHOPT_MAX_PARAMS",
        "mlp-uneven:growth=16,layers=1000,hidden=4096": "$GRAPHOPT_MAX_PARAMS",
        "mlp:batch=1048576,hidden=1048576,layers=1": "$GRAPHOPT_MAX_PARAMS",
        "t5:seq=1048576,batch=1024": "$GRAPHOPT_MAX_BYTES",
    }.items()],
    # issue 49: hand-edited corpus manifests and targets indexes, one line naming file and field
    *[(f"corpus list {{d}}/m_{name}",
       f"m_{name}/manifest.json: " + _at("items", MANIFESTS[name], _KEY, needle))
      for name, needle in {
        "id_up": "items: '../../x' is not a name graphopt makes",
        "id_abs": "items: '/etc/x' is not a name", "id_nul": "items: 'a\\x00b' is not a name",
        "id_dot": "items: '.hidden' is not a name", "id_newline": "items: 'a\\nb' is not a name",
        "file_up": "field 'file': '../../etc/passwd' is not a path inside",
        "file_abs": "field 'file': '/etc/passwd' is not a path inside",
        "file_other": "field 'file': expected 'graphs/layered-0123456789ab.npz', got 'graphs/other.npz'",
        "file_int": "field 'file': expected text, got 5", "no_status": "field 'status' is missing",
        "status_bogus": "field 'status': expected one of built, skipped, got 'weird'",
        "nodes_text": "field 'nodes': expected a whole number",
        "nodes_true": "field 'nodes': expected a whole",
        "nodes_neg": "field 'nodes': expected a whole number from 0", "record_list": "expected an object",
        "split_int": "field 'split': expected one of held-out, train, got 7",
        "no_source": "field 'source' is missing", "family_int": "field 'family': expected text, got 7",
        "skipped_no_reason": "field 'reason' is missing", "seconds_nan": "field 'seconds': expected a finite",
        "builds_text": "field 'builds': expected a list", "build_seconds_neg": "builds[0]: field 'seconds'",
    }.items()],
    *[(f"train imitate {{d}}/t_{name} --out {{d}}/ti_{name}",
       f"t_{name}/targets.json: " + _at("entries", TARGETS[name], f"{_KEY}@p100:2", needle))
      for name, needle in {
        "item_up": "field 'item': '../../x' is not a name",
        "file_up": "field 'file': '../../../etc/x.json' is "
        "not a path inside", "file_abs": "field 'file': '/etc/passwd' is not a path inside",
        "cluster_up": "field 'cluster': 'priors/layered-0123456789ab@/../../../tmp/x.json' is not a path",
        "key_other": "the key is not its item@cluster", "budget_text": "field 'budget': expected a whole",
        "no_rounds": "field 'rounds' is missing",
        "step_nan": "field 'step_time': expected a finite number > 0",
        "step_neg": "field 'step_time': expected a finite number > 0", "entry_list": "expected an object",
        "method_int": "field 'method': expected text, got 7",
        "policy_int": "field 'policy': expected text or null",
    }.items()],
    *[(f"train mcm-imitate {{d}}/mt_{name} --out {{d}}/tmi_{name}",
       f"mt_{name}/targets.json: " + _at("entries", MCM_TARGETS[name], "bert-base@mcm-ring4", needle))
      for name, needle in {
        "graph_up": "field 'graph': '../../x' is not a name", "chips_text": "field 'chips': expected chip",
        "chips_str": "field 'chips': expected a list", "chips_neg": "field 'chips': expected chip indices",
        "interval_nan": "field 'interval': expected a finite number > 0",
        "key_other": "the key is not its graph@preset", "budget_true": "field 'budget': expected a whole",
        "no_preset": "field 'preset' is missing",
    }.items()],
    *[(f"train regal-imitate {{d}}/rt_{name} --out {{d}}/tri_{name}",
       f"rt_{name}/index.json: " + _at("items", REGAL_TARGETS[name], _KEY, needle))
      for name, needle in {
        "key_up": "items: '../x' is not a name",
        "file_abs": "field 'file': '/etc/passwd' is not a path inside",
        "graph_up": "field 'graph': '../../../etc/passwd' is not a path inside",
        "nodes_text": "field 'nodes': expected a whole", "value_text": "field 'value': expected a number",
        "corpus_int": "field 'corpus': expected text, got 5", "no_family": "field 'family' is missing",
    }.items()],
    ("train mcm --init {d}/emptydir --corpus bert-base@mcm-ring4 --out {d}/tmi",
     "emptydir/policy.json: no such file"),
]


@pytest.mark.parametrize("args, needle", CASES, ids=[c[0][:60] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(d, args, needle):
    r = runner.invoke(app, args.format(d=d).split())
    assert r.exit_code == 2, r.output + repr(r.exception)
    assert needle in r.output and "Traceback" not in r.output


def test_profile_on_cuda_without_it_is_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is here")
    r = runner.invoke(app, ["profile", "example:mlp", "-o", "p.json", "--device", "cuda"])
    assert r.exit_code == 2 and "device 'cuda'" in r.output


def _numeric_options():
    """``(argv, needle)`` for every int or float option of every command: a word instead
    of a number, and a value under the option's minimum where it has one."""
    import typer

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])
        if not hasattr(cmd, "commands"):
            yield path, cmd

    out = []
    for path, cmd in walk(typer.main.get_command(app), []):
        for p in cmd.params:
            kind = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if not p.opts[0].startswith("--") or not {int, float} & set(getattr(kind, "__args__", (kind,))):
                continue
            needle = f"Invalid value for '{p.opts[0]}'"
            out.append(([*path, p.opts[0], "x"], needle))
            if getattr(p, "min", None) is not None:
                out.append(([*path, p.opts[0], str(p.min - 1)], needle))
    return out


NUMERIC = _numeric_options()


@pytest.mark.parametrize("argv, needle", NUMERIC, ids=[" ".join(a) for a, _ in NUMERIC])
def test_numeric_option_refuses_words_and_values_under_its_minimum(argv, needle):
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output + repr(r.exception)
    assert needle in r.output and "Traceback" not in r.output


def tally() -> dict[str, int]:
    """Run every case of this file once and count the outcomes: ``clean`` (exit 2 with
    the expected message), ``traceback`` (an exception other than the exit), ``silent``
    (exit 0: accepted), ``other`` (another exit code or message)."""
    import tempfile

    counts = dict.fromkeys(("cases", "clean", "traceback", "silent", "other"), 0)
    with tempfile.TemporaryDirectory() as tmp:
        d = make_bad_files(Path(tmp))
        for argv, needle in [(a.format(d=d).split(), n) for a, n in CASES] + NUMERIC:
            r = runner.invoke(app, argv)
            counts["cases"] += 1
            if "Traceback" in r.output or not isinstance(r.exception, (SystemExit, type(None))):
                counts["traceback"] += 1
            elif r.exit_code == 0:
                counts["silent"] += 1
            elif r.exit_code == 2 and needle in r.output:
                counts["clean"] += 1
            else:
                counts["other"] += 1
    return counts


if __name__ == "__main__":  # python -m tests.cli.test_bad_inputs: the counts in docs/reliability.md
    print(tally())


def test_a_bench_flag_is_not_taken_for_an_output_path(monkeypatch):
    """bench/go_outside.py's --docs is a flag (it writes docs/benchmarks.md); the output
    check used to take its True for a path and fail with a traceback."""
    import argparse
    import sys

    from graphopt.benchmarks import parse_bench_args

    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", action="store_true")
    monkeypatch.setattr(sys, "argv", ["go_outside.py", "--docs"])
    assert parse_bench_args(ap).docs is True


@pytest.mark.parametrize("script", ["zoo_sizes.py", "hdp_groups.py", "sim_vs_real.py",
                                    "regal_headroom.py"])
def test_bench_scripts_check_their_output_before_work(script):
    """A script in bench/ given an --out it cannot write exits 2 with one line, at once."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, str(root / "bench" / script), "--out", "/proc/x/r.json"],
                         capture_output=True, text=True, timeout=60, cwd=root)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].endswith(
        "error: --out /proc/x/r.json: cannot write in /proc (No such file or directory)")


def test_run_checks_the_plan_before_timing_a_calibrated_cluster(d, monkeypatch):
    """With a cluster from 'graphopt calibrate', run times every op of the program first
    (seconds to minutes); a plan for another graph (of another length, or of the same
    length by its fingerprint) used to fail only after that, the latter without its file."""
    from graphopt.exec import calibrate

    def never(*args, **kwargs):
        raise AssertionError("engine_problem ran before the plan was checked")

    monkeypatch.setattr(calibrate, "engine_problem", never)
    (d / "calibrated.toml").write_text(
        f'name = "calibrated-cpu"\n[[devices]]\nkind = "{calibrate.DEVICE_KIND}"\ncount = 2\n'
        'prefix = "cpu"\npeak_tflops = { float32 = 0.1 }\nvector_tflops = 0.1\nmem_gbps = 4\n'
        'memory_gib = 8\nlaunch_overhead_us = 0\n[topology]\ntype = "all_to_all"\n'
        'link_gbps = 5\nlatency_us = 250\n')
    for plan, needle in [("short_plan.json", "short_plan.json: plan placement has 2 entries"),
                         ("foreign_plan.json", "foreign_plan.json: the plan was made for graph 'other'")]:
        r = runner.invoke(app, ["run", "zoo:rnnlm-2-quick", "--plan", str(d / plan),
                                "-c", str(d / "calibrated.toml"), "--devices", "cpu:2"])
        assert r.exit_code == 2, r.output + repr(r.exception)
        assert needle in r.output


def test_bench_mcm_loads_every_graph_and_preset_before_the_first_row(d):
    """A typo in the last preset failed after every row before it had run (hours at the
    benchmark's budgets), with the results file half written."""
    out = d / "mcm_late.json"
    r = runner.invoke(app, ["bench", "mcm", "--graphs", "rnnlm-2", "--presets", "mcm-ring4,nope",
                            "--methods", "mcm-random", "--budget", "1", "--out", str(out),
                            "--docs", str(d / "mcm_late.md")])
    assert r.exit_code == 2 and "unknown cluster preset 'nope'" in r.output
    assert not out.exists()
