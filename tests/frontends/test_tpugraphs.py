"""TpuGraphs frontend: the real tuning protos, hand-built HLO modules, and .npz files
written here in the dataset's exact format."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphopt.errors import GraphError, GraphFormatError
from graphopt.frontends import tpugraphs as tg
from graphopt.frontends.tpugraphs._wire import messages
from tests.conftest import real_tpugraphs

LAYOUT_PB = real_tpugraphs("module_tuning_data_layout.pb")
OP_PB = real_tpugraphs("op_tuning_data.pb")

needs_data = pytest.mark.skipif(LAYOUT_PB is None or OP_PB is None,
                                reason="real TpuGraphs protos not on this machine")


# -- the real files ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def layout_record():
    pytest.importorskip("google.protobuf")
    recs = tg.load_tuning_data(LAYOUT_PB)
    assert len(recs) == 1
    return recs[0]


@pytest.fixture(scope="module")
def op_records():
    pytest.importorskip("google.protobuf")
    return tg.load_tuning_data(OP_PB)


@needs_data
def test_layout_file_counts(layout_record):
    r = layout_record
    assert r.kind == "layout"
    assert r.num_computations == 143
    assert r.num_instructions == 3163
    assert r.num_runs == 122 and len(r.runtimes_ns) == 122
    assert len(r.config_nodes) == 62 and len(r.config_instructions) == 62
    assert int(r.errors.sum()) == 10
    assert int(r.is_default.sum()) == 1
    assert (r.runtimes_ns[r.errors] == 0).all()
    ok = r.runtimes_ns[r.valid]
    assert len(ok) == 112 and 0.90e9 < ok.min() and ok.max() < 0.93e9
    assert 0.90e9 < r.default_runtime_ns < 0.93e9
    feats = r.config_features()
    assert feats.shape == (122, 62, 18) and feats.dtype == np.int64
    assert all(len(c.nodes) == 62 for c in r.configs)


@needs_data
def test_layout_program_graph(layout_record):
    g = layout_record.module
    g.validate()
    assert g.meta["hlo_module"] == "main__.10904" and g.meta["view"] == "program"
    # Configurable nodes are the convolutions and reshapes, three inside inlined while bodies.
    ops = g.op[layout_record.config_nodes]
    assert sorted(set(ops.tolist())) == ["convolution", "reshape"]
    assert int((ops == "convolution").sum()) == 53
    assert (layout_record.config_nodes >= 0).all()
    assert sum("/" in str(n) for n in g.names[layout_record.config_nodes]) == 3
    # The first convolution of the 3D U-Net: bf16[2,96,96,96,4] * [3,3,3,4,32] -> [2,96,96,96,32].
    i = g.index["convolution.1043"]
    assert g.shape_of(i) == (2, 96, 96, 96, 32) and g.dtype[i] == "bfloat16"
    assert g.flops[i] == 2 * (2 * 96**3 * 32) * (3 * 3 * 3 * 4)
    assert g.bytes_written[i] == 2 * 96**3 * 32 * 2
    assert g.flops.sum() > 1e13 and (g.persistent_bytes > 0).sum() > 0
    assert set(g.op) >= {"while", "all-reduce", "convolution", "reduce", "get-tuple-element"}


@needs_data
def test_layout_tpugraphs_view_matches_dataset_numbering(layout_record):
    r = tg.load_tuning_data(LAYOUT_PB, view="tpugraphs")[0]
    g = r.module
    assert g.num_nodes == 3163
    # config_index_to_node indexes TpuGraphs' node order, which this view keeps.
    assert g.names[r.config_nodes].tolist() == list(r.config_instructions)
    assert r.config_instructions == layout_record.config_instructions
    assert r.config_nodes.tolist()[:3] == [443, 461, 488]


@needs_data
def test_op_file_counts(op_records):
    assert len(op_records) == 15
    assert sum(r.num_runs for r in op_records) == 754
    assert sum(int(r.errors.sum()) for r in op_records) == 2
    for r in op_records:
        assert r.kind == "tile"
        assert 2 <= r.num_instructions <= 56
        assert int(r.is_default.sum()) == 1
        assert r.default_runtime_ns is not None
        f = r.config_features()
        assert f.shape == (r.num_runs, 24) and f.dtype == np.float32
        # The tiled kernel is the entry's root: a fusion, copy or reshape.
        (k,) = r.config_nodes
        assert r.module.op[k] in ("fusion", "copy", "reshape")
        assert k == r.module.num_nodes - 1
        r.module.validate()
    times = np.concatenate([r.runtimes_ns[r.valid] for r in op_records])
    assert times.min() > 0 and 3e6 < times.max() < 5e6
    assert sum(r.num_instructions for r in op_records) == 294


@needs_data
def test_fusion_summarized_once(op_records):
    r = op_records[0]  # fusion.232: two parameters and one fusion
    g = r.module
    assert g.op.tolist() == ["parameter", "parameter", "fusion"]
    assert g.flops[2] > 0
    assert g.bytes_read[2] == g.persistent_bytes[:2].sum()
    flat = tg.load_tuning_data(OP_PB, view="tpugraphs")[0].module
    assert flat.num_nodes == r.num_instructions == 20


@needs_data
def test_load_hlo_graph_and_index():
    pytest.importorskip("google.protobuf")
    g = tg.load_hlo_graph(OP_PB, index=1)
    assert g.name == "fusion.191"
    with pytest.raises(GraphFormatError, match="index 15 out of range; the file holds 15"):
        tg.load_hlo_graph(OP_PB, index=15)


# -- hand-built modules ------------------------------------------------------------------

F32, PRED, TUPLE = 11, 1, 13


def _shape(*dims, et=F32):
    return {"element_type": et, "dimensions": list(dims)}


def _tuple(*shapes):
    return {"element_type": TUPLE, "tuple_shapes": list(shapes)}


def _module(comps, entry_id=0, name="m"):
    """Serialized HloModuleProto: comps = [(name, id, root_id, [instr dicts])]."""
    M = messages()
    m = M["HloModuleProto"](name=name, entry_computation_id=entry_id)
    for cname, cid, root, instrs in comps:
        c = m.computations.add(name=cname, id=cid, root_id=root)
        for ins in instrs:
            ins = dict(ins)
            shape = ins.pop("shape")
            msg = c.instructions.add(**{k: v for k, v in ins.items() if k != "dot"})
            _fill(msg.shape, shape)
            if "dot" in ins:
                lc, rc = ins["dot"]
                msg.dot_dimension_numbers.lhs_contracting_dimensions.extend(lc)
                msg.dot_dimension_numbers.rhs_contracting_dimensions.extend(rc)
        if cid == entry_id:
            m.entry_computation_name = cname
    return m.SerializeToString()


def _fill(msg, shape):
    msg.element_type = shape["element_type"]
    msg.dimensions.extend(shape.get("dimensions", []))
    for s in shape.get("tuple_shapes", []):
        _fill(msg.tuple_shapes.add(), s)


def _i(iid, name, opcode, shape, operands=(), called=(), **kw):
    return {"id": iid, "name": name, "opcode": opcode, "shape": shape,
            "operand_ids": list(operands), "called_computation_ids": list(called), **kw}


def _example_module():
    tup = _tuple(_shape(4, 16), _shape(4, 8))
    entry = ("main", 0, 7, [
        _i(1, "p0", "parameter", _shape(4, 8), parameter_number=0),
        _i(2, "p1", "parameter", _shape(8, 16), parameter_number=1),
        _i(3, "dot", "dot", _shape(4, 16), [1, 2], dot=([1], [0])),
        _i(4, "tuple", "tuple", tup, [3, 1]),
        _i(5, "w", "while", tup, [4], [1, 2]),
        _i(6, "g", "get-tuple-element", _shape(4, 16), [5], tuple_index=0),
        _i(7, "f", "fusion", _shape(4, 16), [6], [3]),
    ])
    body = ("body", 1, 14, [
        _i(10, "bp", "parameter", tup, parameter_number=0),
        _i(11, "b0", "get-tuple-element", _shape(4, 16), [10], tuple_index=0),
        _i(12, "neg", "negate", _shape(4, 16), [11]),
        _i(13, "b1", "get-tuple-element", _shape(4, 8), [10], tuple_index=1),
        _i(14, "bt", "tuple", tup, [12, 13]),
    ])
    cond = ("cond", 2, 21, [
        _i(20, "cp", "parameter", tup, parameter_number=0),
        _i(21, "c", "constant", _shape(et=PRED)),
    ])
    fused = ("fused", 3, 32, [
        _i(30, "fp", "parameter", _shape(4, 16), parameter_number=0),
        _i(31, "e", "exponential", _shape(4, 16), [30]),
        _i(32, "mul", "multiply", _shape(4, 16), [31, 30]),
    ])
    return [entry, body, cond, fused]


def test_program_view_inlines_loops_and_summarizes_fusions():
    pytest.importorskip("google.protobuf")
    g = tg.hlo_module_to_graph(_module(_example_module()))
    assert g.names.tolist() == ["p0", "p1", "dot", "tuple", "w/b0", "w/neg", "w/b1", "w/bt",
                                "w/c", "w", "g", "f"]
    f = {str(n): float(x) for n, x in zip(g.names, g.flops)}
    assert f["dot"] == 2 * 4 * 16 * 8  # contracting dim from dot_dimension_numbers
    assert f["w/neg"] == 4 * 16
    assert f["f"] == 4 * 16 * 4 + 4 * 16  # exp (4 FLOPs) + multiply, one fusion kernel
    assert f["w"] == 0 and f["tuple"] == 0
    k = g.index
    assert g.bytes_read[k["f"]] == 256 and g.bytes_written[k["f"]] == 256
    assert g.persistent_bytes[k["p0"]] == 128 and g.out_bytes[k["p0"]] == 0
    edges = {(str(g.names[s]), str(g.names[d])): b for s, d, b in zip(g.src, g.dst, g.edge_bytes)}
    assert edges[("tuple", "w/b0")] == 256  # a get-tuple-element takes one element
    assert edges[("tuple", "w/b1")] == 128
    assert edges[("w/bt", "w")] == 384 and ("w/c", "w") in edges
    assert edges[("w", "g")] == 256 and edges[("g", "f")] == 256
    assert g.meta["num_computations"] == 4 and g.meta["num_instructions"] == 17


def test_tpugraphs_view_keeps_every_instruction():
    pytest.importorskip("google.protobuf")
    g = tg.hlo_module_to_graph(_module(_example_module()), view="tpugraphs")
    assert g.num_nodes == 17
    edges = {(str(g.names[s]), str(g.names[d])) for s, d in zip(g.src, g.dst)}
    assert ("bt", "w") in edges and ("c", "w") in edges and ("mul", "f") in edges
    assert g.flops[g.index["f"]] == 0  # the fused instructions carry the FLOPs


def test_dot_without_dimension_numbers_is_estimated():
    pytest.importorskip("google.protobuf")
    mod = _module([("main", 0, 3, [
        _i(1, "a", "parameter", _shape(3, 32, 8), parameter_number=0),
        _i(2, "b", "parameter", _shape(3, 8, 16), parameter_number=1),
        _i(3, "d", "dot", _shape(3, 32, 16), [1, 2]),
    ])])
    g = tg.hlo_module_to_graph(mod)
    assert g.flops[g.index["d"]] == 2 * 3 * 32 * 16 * 8


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c[0][3][2].update(operand_ids=[1, 99]), "operand id 99 is not an instruction"),
    (lambda c: c[0][3][6].update(called_computation_ids=[6, 3]), "calls computation id 6"),
    (lambda c: c[3][3][1].update(called_computation_ids=[3], opcode="fusion"),
     "calls itself"),
    (lambda c: c[0][3][1].update(id=1), "share id 1"),
    (lambda c: c[0][3][1].update(shape=_shape(-1, 16)), "negative dimension"),
    (lambda c: c[1][3][0].update(parameter_number=3), "parameter number 3"),
])
def test_malformed_modules_name_the_culprit(mutate, match):
    pytest.importorskip("google.protobuf")
    comps = _example_module()
    mutate(comps)
    with pytest.raises(GraphFormatError, match=match):
        tg.hlo_module_to_graph(_module(comps), source="x.pb")


def _doubling_chain(opcode: str, depth: int = 40) -> bytes:
    """Computation k calls computation k + 1 twice with ``opcode``: 2^depth paths."""
    comps = []
    for k in range(depth):
        calls = [k + 1, k + 1] if k + 1 < depth else []
        comps.append((f"c{k}", k, 10 * k + 2, [
            _i(10 * k + 1, f"p{k}", "parameter", _shape(4), parameter_number=0),
            _i(10 * k + 2, f"r{k}", opcode if calls else "negate", _shape(4), [10 * k + 1], calls)]))
    return _module(comps)


def test_calls_fanning_out_are_bounded_not_walked_per_path():
    """A few hundred bytes that call a computation twice at each of 40 levels: the program
    view would inline 2^40 copies (refused before any is made); folded callees (map's) are
    walked once, not once per path."""
    pytest.importorskip("google.protobuf")
    with pytest.raises(GraphFormatError, match=r"x.pb: module 'm': inlining its calls makes "
                                               r"2,199,023,255,550 ops, more than 1,000,000"):
        tg.hlo_module_to_graph(_doubling_chain("call"), source="x.pb")
    assert tg.hlo_module_to_graph(_doubling_chain("map")).names.tolist() == ["p0", "r0"]


def test_missing_entry_computation():
    pytest.importorskip("google.protobuf")
    m = messages()["HloModuleProto"].FromString(_module(_example_module()))
    m.entry_computation_id, m.entry_computation_name = 42, "nope"
    with pytest.raises(GraphFormatError, match="x.pb: module 'm': entry computation .* not found"):
        tg.hlo_module_to_graph(m.SerializeToString(), source="x.pb")


def _tuning_file(tmp_path, runs, cin=(), module=None):
    M = messages()
    mtd = M["ModuleTuningData"](fingerprint=7, config_index_to_node=list(cin))
    mtd.module.MergeFromString(module or _module(_example_module()))
    for r in runs:
        run = mtd.runs.add(error=r.get("error", False), is_default=r.get("default", False))
        run.profile.compute_time_ns = r.get("time", 100)
        if "layout" in r:
            lc = run.module_config.layout_config
            for tensors in r["layout"]:
                node = lc.nodes.add()
                for dims in tensors:
                    node.tensors.add().dims.extend(dims)
        if "tile" in r:
            run.op_config.tile_size_config.output_bounds.extend(r["tile"])
    p = tmp_path / "t.pb"
    p.write_bytes(mtd.SerializeToString())
    return p


def test_layout_record_from_hand_built_file(tmp_path):
    pytest.importorskip("google.protobuf")
    p = _tuning_file(tmp_path, [{"layout": [[[1, 0], [0, 1]]], "default": True, "time": 10},
                                {"layout": [[[0, 1], [1, 0]]], "time": 12},
                                {"layout": [[[0, 1], [0, 1]]], "error": True, "time": 0}],
                     cin=[2])  # flat index 2: the dot
    (r,) = tg.load_tuning_data(p)
    assert r.kind == "layout" and r.fingerprint == 7
    assert r.module.op[r.config_nodes].tolist() == ["dot"]
    assert r.config_features()[0, 0].tolist()[:8] == [1, 0, -1, -1, -1, -1, 0, 1]
    assert r.valid.tolist() == [True, True, False] and r.default_runtime_ns == 10
    # A fused instruction maps to its fusion node; a to_apply one to its caller.
    (r2,) = tg.load_tuning_data(_tuning_file(tmp_path, [{"layout": [[], []]}], cin=[15, 13]))
    assert r2.module.op[r2.config_nodes].tolist() == ["fusion", "constant"]
    assert r2.config_instructions == ("e", "c")
    # Here callers come before callees, so the builder reorders the TpuGraphs view: the
    # configurable nodes must follow their instructions.
    (r3,) = tg.load_tuning_data(_tuning_file(tmp_path, [{"layout": [[], []]}], cin=[15, 13]),
                                view="tpugraphs")
    assert r3.module.names[r3.config_nodes].tolist() == ["e", "c"]
    assert r3.config_nodes.tolist() != [15, 13]


def test_tile_record_from_hand_built_file(tmp_path):
    pytest.importorskip("google.protobuf")
    M = messages()
    p = _tuning_file(tmp_path, [{"tile": [2, 8], "default": True}, {"tile": [4, 4]}])
    td = M["TuningData"]()
    td.modules.add().MergeFromString(p.read_bytes())
    td.modules.add().MergeFromString(p.read_bytes())
    q = tmp_path / "td.pb"
    q.write_bytes(td.SerializeToString())
    recs = tg.load_tuning_data(q)
    assert [r.kind for r in recs] == ["tile", "tile"]
    assert recs[0].configs[1] == tg.TileConfig(output_bounds=(4, 4))
    assert recs[0].config_features()[0, 8:16].tolist() == [2, 8, 0, 0, 0, 0, 10, 16]
    assert recs[0].config_features()[0, 0:8].tolist() == [0] * 8  # empty: product 0 too


@pytest.mark.parametrize("runs, cin, match", [
    ([{"layout": [[], []]}], [2], "run 0 configures 2 nodes, but config_index_to_node lists 1"),
    ([{"layout": [[]]}], [17], r"config_index_to_node\[0\] = 17, out of range for 17"),
    ([{"layout": [[]], "time": -5}], [2], "run 0 has compute_time_ns = -5"),
    ([{"layout": [[]]}, {"tile": [1]}], [2], "run 1 has a tile config"),
])
def test_bad_tuning_files(tmp_path, runs, cin, match):
    pytest.importorskip("google.protobuf")
    with pytest.raises(GraphFormatError, match=match):
        tg.load_tuning_data(_tuning_file(tmp_path, runs, cin))


@pytest.mark.parametrize("content, match", [
    (b"", "empty file"),
    (b"\x0a\xff\xff\xff", "truncated or not a protobuf"),
    (b"\x0f\x01", "not a protobuf file"),
    (b"hello world, not a proto", "protobuf"),
])
def test_garbage_files(tmp_path, content, match):
    pytest.importorskip("google.protobuf")
    p = tmp_path / "bad.pb"
    p.write_bytes(content)
    with pytest.raises(GraphFormatError, match=match):
        tg.load_tuning_data(p)
    with pytest.raises(GraphFormatError, match="no such file"):
        tg.load_tuning_data(tmp_path / "missing.pb")


@needs_data
def test_truncated_real_file(tmp_path):
    pytest.importorskip("google.protobuf")
    p = tmp_path / "cut.pb"
    p.write_bytes(LAYOUT_PB.read_bytes()[:100_000])
    with pytest.raises(GraphFormatError, match="cut.pb"):
        tg.load_tuning_data(p)


def test_opcode_table():
    assert len(tg.TPUGRAPHS_OPCODES) == 120
    known = {1: "abs", 26: "convolution", 34: "dot", 41: "fusion", 63: "parameter", 97: "trace",
             98: "transpose", 100: "tuple", 101: "tuple-select", 102: "while", 120: "tan"}
    assert all(tg.opcode_name(k) == v for k, v in known.items())
    assert tg.opcode_name(0) == "op_0" and tg.opcode_name(200) == "op_200"


# -- the .npz files ------------------------------------------------------------------------

def _feat(n, dims, et_col=13, width=140):
    """Node features with the element-type one-hot, dims and element count filled in."""
    f = np.zeros((n, width), dtype=np.float32)
    for i, d in enumerate(dims):
        f[i, et_col] = 1
        f[i, 21:21 + len(d)] = d
        f[i, 27], f[i, 28] = sum(d), math.prod(d)
    return f


def _tile_arrays():
    # parameter(4,8), parameter(8,16) -> dot(4,16) -> tanh(4,16)
    return {
        "node_feat": _feat(4, [(4, 8), (8, 16), (4, 16), (4, 16)]),
        "node_opcode": np.array([63, 63, 34, 96], dtype=np.uint8),
        "edge_index": np.array([[2, 0], [2, 1], [3, 2]], dtype=np.int64),
        "config_feat": np.zeros((3, 24), dtype=np.float32),
        "config_runtime": np.array([100, 120, 90], dtype=np.int64),
        "config_runtime_normalizers": np.array([100, 100, 100], dtype=np.int64),
    }


def _layout_arrays():
    return {
        "node_feat": _feat(4, [(4, 8), (8, 16), (4, 16), (4, 16)]),
        "node_opcode": np.array([63, 63, 34, 96], dtype=np.uint8),
        "edge_index": np.array([[2, 0], [2, 1], [3, 2]], dtype=np.int64),
        "node_config_ids": np.array([2], dtype=np.int64),
        "node_config_feat": np.full((2, 1, 18), -1, dtype=np.float32),
        "config_runtime": np.array([1000, 1100], dtype=np.int64),
        "node_splits": np.array([[0]], dtype=np.int64),
    }


def _save(tmp_path, arrays, name="g.npz"):
    p = tmp_path / name
    np.savez(p, **arrays)
    return p


def test_tile_npz(tmp_path):
    s = tg.load_tpugraphs_npz(_save(tmp_path, _tile_arrays()))
    g = s.graph
    assert s.collection == "tile" and s.num_configs == 3
    assert g.op.tolist() == ["parameter", "parameter", "dot", "tanh"]
    assert g.names.tolist() == ["parameter.0", "parameter.1", "dot.2", "tanh.3"]
    assert [g.shape_of(i) for i in range(4)] == [(4, 8), (8, 16), (4, 16), (4, 16)]
    assert set(g.dtype) == {"float32"}
    # [u, v] = u consumes v: data flows v -> u.
    assert sorted(zip(g.src.tolist(), g.dst.tolist())) == [(0, 2), (1, 2), (2, 3)]
    assert g.flops[2] == 2 * 4 * 16 * 8 and g.flops[3] == 6 * 64
    assert g.persistent_bytes[:2].tolist() == [128, 512]
    assert s.node_index.tolist() == [0, 1, 2, 3]
    assert s.config_runtime.dtype == np.int64 and not s.config_runtime.flags.writeable
    assert tg.is_tpugraphs_npz(s.path)


def test_layout_npz(tmp_path):
    s = tg.load_tpugraphs_npz(_save(tmp_path, _layout_arrays()))
    assert s.collection == "layout"
    assert s.node_config_feat.shape == (2, 1, 18) and s.node_splits.tolist() == [0]
    assert s.graph.op[s.node_index[s.node_config_ids]].tolist() == ["dot"]


def test_pruned_node_features_and_unknown_opcodes(tmp_path):
    a = _tile_arrays()
    a["node_feat"] = np.ones((4, 112), dtype=np.float32)
    a["node_opcode"] = np.array([63, 63, 200, 96], dtype=np.uint8)
    s = tg.load_tpugraphs_npz(_save(tmp_path, a))
    assert s.node_feat.shape == (4, 112)
    assert s.graph.op.tolist() == ["parameter", "parameter", "op_200", "tanh"]
    a["node_feat"] = np.ones((4, 3), dtype=np.float64)
    assert tg.load_tpugraphs_npz(_save(tmp_path, a)).node_feat.dtype == np.float32


def test_unsorted_npz_is_reordered_and_mapped(tmp_path):
    a = _tile_arrays()
    perm = [3, 2, 1, 0]  # file order: tanh, dot, parameter, parameter
    inv = np.argsort(perm)
    a["node_feat"], a["node_opcode"] = a["node_feat"][perm], a["node_opcode"][perm]
    a["edge_index"] = inv[a["edge_index"]]
    s = tg.load_tpugraphs_npz(_save(tmp_path, a))
    assert s.graph.op[s.node_index].tolist() == ["tanh", "dot", "parameter", "parameter"]
    s.graph.validate()


@pytest.mark.parametrize("change, match", [
    (lambda a: a.pop("node_opcode"), "missing key 'node_opcode'"),
    (lambda a: a.pop("config_feat"), "missing key 'config_feat' .* or 'node_config_feat'"),
    (lambda a: a.pop("config_runtime_normalizers"), "missing key 'config_runtime_normalizers'"),
    (lambda a: a.update(config_runtime=np.array([1, 2])),
     "'config_feat' has 3 rows but 'config_runtime' has 2"),
    (lambda a: a.update(config_runtime_normalizers=np.array([1, 2])),
     "'config_runtime_normalizers' has 2 entries, expected 3"),
    (lambda a: a.update(edge_index=np.array([[2, 0], [2, 9]])), r"row 1 = \[2, 9\] is out of range"),
    (lambda a: a.update(edge_index=np.array([[2, 0, 1]])), r"shape \(1, 3\), expected \(m, 2\)"),
    (lambda a: a.update(edge_index=np.array([[2, 2]])), "self loop on node 2"),
    (lambda a: a.update(config_runtime=np.array([1.0, np.nan, 3.0])),
     "'config_runtime' has a non-finite value .* at config 1"),
    (lambda a: a.update(config_runtime=np.array([1, -2, 3])),
     "'config_runtime' has a negative value"),
    (lambda a: a.update(node_opcode=np.array([1, 2, 3], dtype=np.uint8)),
     "'node_opcode' has 3 entries, expected 4"),
    (lambda a: a.update(node_opcode=np.array([1.0, 2, 3, 4])), "'node_opcode' has dtype float64"),
    (lambda a: a.update(node_feat=np.zeros(4)), "'node_feat' has shape"),
    (lambda a: a.update(node_feat=np.full((4, 140), np.inf, np.float32)),
     "'node_feat' has a non-finite value at node 0"),
    (lambda a: a.update(node_config_feat=np.zeros((3, 1, 18))), "both 'config_feat'"),
])
def test_bad_tile_npz(tmp_path, change, match):
    a = _tile_arrays()
    change(a)
    p = _save(tmp_path, a, "bad.npz")
    with pytest.raises(GraphFormatError, match=match) as err:
        tg.load_tpugraphs_npz(p)
    assert "bad.npz" in str(err.value)


@pytest.mark.parametrize("change, match", [
    (lambda a: a.pop("node_config_ids"), "missing key 'node_config_ids'"),
    (lambda a: a.update(node_config_ids=np.array([7])), "'node_config_ids' entry 0 = 7 is out of"),
    (lambda a: a.update(node_config_ids=np.array([2, 2]),
                        node_config_feat=np.zeros((2, 2, 18))), "lists a node twice"),
    (lambda a: a.update(node_config_feat=np.zeros((3, 1, 18))),
     r"'node_config_feat' has shape \(3, 1, 18\), expected \(2, 1, k\)"),
    (lambda a: a.update(node_splits=np.array([[0, 9]])), "'node_splits' must be non-decreasing"),
])
def test_bad_layout_npz(tmp_path, change, match):
    a = _layout_arrays()
    change(a)
    with pytest.raises(GraphFormatError, match=match):
        tg.load_tpugraphs_npz(_save(tmp_path, a, "bad.npz"))


def test_cyclic_npz(tmp_path):
    a = _tile_arrays()
    a["edge_index"] = np.array([[2, 0], [0, 2]])
    with pytest.raises(GraphError, match="g.npz.*cycle"):
        tg.load_tpugraphs_npz(_save(tmp_path, a))


def test_pickled_and_broken_npz(tmp_path):
    a = _tile_arrays()
    a["config_runtime"] = np.array([100, None, 3], dtype=object)
    p = tmp_path / "pickled.npz"
    np.savez(p, **a)  # an object array: numpy pickles it
    with pytest.raises(GraphFormatError, match="pickled.npz: contains pickled objects"):
        tg.load_tpugraphs_npz(p)
    q = tmp_path / "junk.npz"
    q.write_bytes(b"PK\x03\x04 definitely not a zip")
    with pytest.raises(GraphFormatError, match="junk.npz: not an npz archive"):
        tg.load_tpugraphs_npz(q)
    assert not tg.is_tpugraphs_npz(q)
    with pytest.raises(GraphFormatError, match="no such file"):
        tg.load_tpugraphs_npz(tmp_path / "none.npz")


def test_load_npz_graph_tells_the_two_npz_formats_apart(tmp_path):
    from graphopt.ir import save_graph

    s = tg.load_tpugraphs_npz(_save(tmp_path, _tile_arrays()))
    assert tg.load_npz_graph(s.path).names.tolist() == s.graph.names.tolist()
    own = save_graph(s.graph, tmp_path / "own.npz")
    assert not tg.is_tpugraphs_npz(own)
    assert tg.load_npz_graph(own).names.tolist() == s.graph.names.tolist()
