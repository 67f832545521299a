"""ONNX frontend: models built with onnx.helper and exported with torch.onnx, checked
against hand counts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from graphopt.ir.formulas import UnknownOpWarning  # noqa: E402
from graphopt.errors import GraphFormatError  # noqa: E402
from graphopt.frontends.onnx import from_onnx  # noqa: E402

F = TensorProto.FLOAT


def _init(name, *dims):
    return helper.make_tensor(name, F, dims, np.zeros(dims, np.float32).ravel().tolist())


def _model(nodes, inputs, outputs, inits=(), name="net"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _mlp(batch=2):
    return _model(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="/fc1/Gemm", transB=1),
         helper.make_node("Relu", ["h"], ["a"], name="/act/Relu"),
         helper.make_node("MatMul", ["a", "w2"], ["y"], name="/fc2/MatMul")],
        [helper.make_tensor_value_info("x", F, [batch, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        [_init("w1", 16, 8), _init("b1", 16), _init("w2", 16, 4)])


def test_mlp_nodes_shapes_flops():
    g = from_onnx(_mlp())
    assert g.op.tolist() == ["parameter", "parameter", "parameter", "input", "addmm", "relu",
                             "matmul"]
    by = {str(n): i for i, n in enumerate(g.names)}
    assert g.shape_of(by["/fc1/Gemm"]) == (2, 16) and g.shape_of(by["/fc2/MatMul"]) == (2, 4)
    assert g.flops[by["/fc1/Gemm"]] == 2 * 2 * 16 * 8 + 2 * 16  # transposed weight, bias
    assert g.flops[by["/act/Relu"]] == 32
    assert g.flops[by["/fc2/MatMul"]] == 2 * 2 * 4 * 16
    assert g.persistent_bytes.sum() == (16 * 8 + 16 + 16 * 4) * 4
    assert g.out_bytes[by["w1"]] == 0
    e = {(str(g.names[s]), str(g.names[d])): b for s, d, b in zip(g.src, g.dst, g.edge_bytes)}
    assert e[("w1", "/fc1/Gemm")] == 512 and e[("/fc1/Gemm", "/act/Relu")] == 128
    assert g.module[by["/fc1/Gemm"]] == "fc1"
    assert g.meta["format"] == "onnx" and g.meta["opset"]["ai.onnx"] == 17


def test_conv_pool_hand_counts():
    m = _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["p"], ["q"]),
         helper.make_node("Flatten", ["q"], ["f"]),
         helper.make_node("Gemm", ["f", "wf"], ["y"])],
        [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        [_init("w", 4, 3, 3, 3), _init("b", 4), _init("wf", 4, 10)])
    g = from_onnx(m)
    ops = g.op.tolist()
    assert ops.count("parameter") == 3 and ops[3:] == ["input", "conv", "max_pool",
                                                       "adaptive_avg_pool", "reshape", "mm"]
    f = dict(zip(ops, g.flops.tolist()))
    assert f["conv"] == 2 * (4 * 8 * 8) * (3 * 3 * 3)
    assert f["max_pool"] == (4 * 4 * 4) * 4
    assert f["reshape"] == 0 and f["mm"] == 2 * 10 * 4
    assert g.shape_of(ops.index("max_pool")) == (1, 4, 4, 4)


def test_dynamic_batch_needs_input_shapes():
    m = _mlp(batch="N")
    with pytest.raises(GraphFormatError, match=r"no static shape.*'x'.*input_shapes=\{'x': \(1, 8\)\}"):
        from_onnx(m)
    g = from_onnx(m, input_shapes={"x": (3, 8)})
    assert g.shape_of(int(np.flatnonzero(g.op == "matmul")[0])) == (3, 4)
    # The caller's model is not changed.
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    with pytest.raises(GraphFormatError, match="'z', which is not a graph input; inputs are"):
        from_onnx(m, input_shapes={"z": (1, 2)})
    loose = from_onnx(m, strict=False)
    assert loose.meta["unknown_shapes"] and loose.num_nodes == 7


def test_cli_import_takes_input_shapes(tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app
    from graphopt.ir import load_graph

    onnx.save(_mlp(batch="N"), str(tmp_path / "mlp.onnx"))
    runner = CliRunner()

    def run(*args):
        return runner.invoke(app, ["import", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "g.npz"),
                                   *args])

    r = run()
    assert r.exit_code == 2 and "--input-shape x=1x8 -o graph.npz" in r.output
    r = run("--input-shape", "x=3x8")
    assert r.exit_code == 0, r.output
    g = load_graph(tmp_path / "g.npz")
    assert g.shape_of(int(np.flatnonzero(g.op == "matmul")[0])) == (3, 4)
    for bad, message in [("x=3xN", "expected NAME=D1xD2x..."), ("=3", "expected NAME="),
                         ("z=3x8", "'z', which is not a graph input")]:
        r = run("--input-shape", bad)
        assert r.exit_code == 2 and message in r.output, r.output


def test_unmapped_op_and_constant():
    m = _model(
        [helper.make_node("Constant", [], ["k"], value=_init("kv", 4)),
         helper.make_node("Softsign", ["x"], ["s"]),
         helper.make_node("Add", ["s", "k"], ["y"])],
        [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, None)])
    with pytest.warns(UnknownOpWarning, match=r"element: Softsign \(node 1\)$"):
        g = from_onnx(m)
    assert g.op.tolist() == ["input", "constant", "softsign", "add"]
    assert g.meta["unmapped_ops"] == ["Softsign"]
    assert g.persistent_bytes[1] == 16 and g.flops[2] == 4


def test_a_tensor_written_by_two_nodes_is_refused_naming_both():
    """ONNX graphs are SSA; a second writer of a tensor hid the first one's edges."""
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                helper.make_node("Neg", ["x"], ["y"], name="b")],
               [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [4])])
    with pytest.raises(GraphFormatError, match="node 'b' \\(Neg\\) writes tensor 'y', which node 'a' "
                                               "writes too"):
        from_onnx(m)


def test_cycles_and_writes_into_sources_are_refused_naming_the_nodes():
    x, y = helper.make_tensor_value_info("x", F, [4]), helper.make_tensor_value_info("y", F, [4])
    loop = _model([helper.make_node("Add", ["x", "y"], ["y"], name="self")], [x], [y])
    with pytest.raises(GraphFormatError, match="node 'self' .Add. reads its own output 'y' .a cycle."):
        from_onnx(loop)
    pair = _model([helper.make_node("Add", ["x", "b"], ["a"], name="A"),
                   helper.make_node("Neg", ["a"], ["b"], name="B"),
                   helper.make_node("Relu", ["a"], ["y"], name="C")], [x], [y])
    with pytest.raises(GraphFormatError, match=r"nodes \['(A|B)', '(A|B)'(, '(A|B)')?\] form a cycle"):
        from_onnx(pair)
    into = _model([helper.make_node("Relu", ["y"], ["x"], name="r"), helper.make_node("Neg", ["x"], ["y"])],
                  [x], [y])
    with pytest.raises(GraphFormatError, match="node 'r' .Relu. writes tensor 'x', a graph input"):
        from_onnx(into)


def test_bad_inputs(tmp_path):
    with pytest.raises(GraphFormatError, match="no such file"):
        from_onnx(tmp_path / "none.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xff\xff not onnx")
    with pytest.raises(GraphFormatError, match="junk.onnx: not an ONNX model"):
        from_onnx(junk)
    m = _model([helper.make_node("Relu", ["ghost"], ["y"], name="r")],
               [helper.make_tensor_value_info("x", F, [2])],
               [helper.make_tensor_value_info("y", F, [2])])
    with pytest.raises(GraphFormatError, match="node 'r' .Relu. reads tensor 'ghost', which no node"):
        from_onnx(m)
    with pytest.raises(TypeError, match="path, bytes or onnx.ModelProto"):
        from_onnx(42)


@pytest.mark.parametrize("where", ["input", "initializer"])
def test_huge_dims_are_refused_naming_file_and_tensor(tmp_path, where):
    big = [2**62, 4]
    x = helper.make_tensor_value_info("x", F, big if where == "input" else [2, 4])
    w = TensorProto(name="w", data_type=F, dims=big if where == "initializer" else [2, 4])
    p = tmp_path / "huge.onnx"  # dims only: the check comes before any value is read
    onnx.save(_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [x],
                     [helper.make_tensor_value_info("y", F, None)], [w]), str(p))
    tensor = {"input": "x", "initializer": "w"}[where]
    with pytest.raises(GraphFormatError, match=f"huge.onnx: tensor '{tensor}' .*above the limit"):
        from_onnx(p)


def test_file_and_bytes_round_trip(tmp_path):
    p = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), str(p))
    a, b = from_onnx(p), from_onnx(p.read_bytes())
    assert a.names.tolist() == b.names.tolist() and a.flops.sum() == b.flops.sum()
    assert a.name == "net" and a.meta["source"] == str(p)


def test_torch_export_legacy(tmp_path):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    p = tmp_path / "net.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(Net(), (torch.randn(2, 3, 8, 8),), str(p), dynamo=False)
        except Exception as err:  # the TorchScript exporter may be gone from a future torch
            pytest.skip(f"torch.onnx.export(dynamo=False) unavailable: {err}")
    g = from_onnx(p)
    comp = [o for o in g.op.tolist() if o not in ("parameter", "input")]
    assert comp == ["conv", "relu", "reshape", "addmm"]
    f = dict(zip(g.op.tolist(), g.flops.tolist()))
    assert f["conv"] == 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3)
    assert f["addmm"] == 2 * 2 * 10 * 512 + 2 * 10
    assert g.persistent_bytes.sum() == (8 * 3 * 9 + 8 + 10 * 512 + 10) * 4
    assert set(g.module[g.op == "conv"]) == {"conv"}


def _export(model, args, path):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17)
        except Exception as err:  # the TorchScript exporter may be gone from a future torch
            pytest.skip(f"torch.onnx.export(dynamo=False) unavailable: {err}")
    return path


def test_shapes_the_graph_computes_from_shapes_are_folded(tmp_path, monkeypatch):
    """torch's exporter slices attention's projections with ends computed from ``Shape``
    (written elsewhere: PyTorch's decoder layer); ONNX's inference leaves those unknown."""
    torch = pytest.importorskip("torch")

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerDecoderLayer(32, 4, 64, batch_first=True, norm_first=True)

        def forward(self, tgt, memory):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
            return self.layer(tgt, memory, tgt_mask=mask, tgt_is_causal=True)

    p = _export(Decoder().eval(), (torch.randn(2, 6, 32), torch.randn(2, 5, 32)), tmp_path / "dec.onnx")
    from graphopt.frontends import onnx as frontend

    with monkeypatch.context() as m:  # what ONNX's inference alone gives
        m.setattr(frontend, "_fold_shapes", lambda onnx, model: model)
        with pytest.raises(GraphFormatError, match="no static shape"):
            from_onnx(p)
    g = from_onnx(p)
    assert "unknown_shapes" not in g.meta
    # the four projections of each attention, and the feed-forward's two: all shaped
    mm = g.flops[np.isin(g.op, ["matmul", "addmm"])]
    assert (mm > 0).all() and mm.sum() >= 2 * 2 * 6 * 32 * 32 * 8 + 2 * 2 * 6 * 32 * 64 * 2


@pytest.mark.parametrize("cell, gates", [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
def test_recurrent_layers_are_costed_by_their_gates(tmp_path, cell, gates):
    torch = pytest.importorskip("torch")
    T, B, D, H = 7, 3, 16, 24  # steps, batch, input and hidden sizes
    net = getattr(torch.nn, cell)(D, H, num_layers=1, bidirectional=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOpWarning)
        g = from_onnx(_export(net, (torch.randn(T, B, D),), tmp_path / "rnn.onnx"))
    flops = g.flops[g.op == cell.lower()]
    assert flops.tolist() == [T * 2 * B * (2 * gates * H * (D + H) + gates * H + 2 * H)]


def test_empty_tensors_keep_zero_bytes():
    # Resize's empty roi/scales inputs (dims [0]) are common in exported models.
    m = _model(
        [helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode="nearest")],
        [helper.make_tensor_value_info("x", F, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", F, None)],
        [helper.make_tensor("roi", F, [0], []), helper.make_tensor("scales", F, [0], []),
         helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 2, 8, 8])])
    g = from_onnx(m)
    g.validate()
    roi = g.index["roi"]
    assert g.shape_of(roi) == (1,) and g.persistent_bytes[roi] == 0
    assert g.shape_of(g.index[str(g.names[g.op == "upsample"][0])]) == (1, 2, 8, 8)
