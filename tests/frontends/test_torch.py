"""The PyTorch frontend on small real models: shapes, FLOPs by hand, training steps,
module paths, colocation, failures, and .pt2 files."""

from __future__ import annotations

import json
import pickle
import warnings
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from graphopt.ir.formulas import UnknownOpWarning
from graphopt.errors import FrontendError, GraphFormatError
from graphopt.frontends import IMPORTERS, import_graph
from graphopt.frontends.torch import from_torch, load_exported
from graphopt.hardware import load_cluster
from graphopt.ir import Graph
from graphopt.ir.ops import op_class
from graphopt.sim import Plan, Problem, simulate

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.export's own


# -- models ---------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv2(torch.relu(self.bn(self.conv1(x)))))
        return self.fc(self.pool(x).flatten(1))


class Unrolled(nn.Module):
    """An LSTM cell unrolled over the first dimension of its input."""

    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(8, 16)

    def forward(self, x):
        h = c = x.new_zeros(x.shape[1], 16)
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
        return h


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x)


class Branchy(nn.Module):
    """Python control flow on a tensor's value: nothing can trace it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) if x.sum() > 0 else x


def param_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def count(g: Graph, op: str) -> int:
    return int((g.op == op).sum())


def flops_of(g: Graph, op: str) -> list[float]:
    return sorted(float(f) for f in g.flops[g.op == op])


def grad_producer(g: Graph, update: int) -> int:
    """The first non-view op behind an update op's gradient input."""
    state = {"parameter", "optimizer_state"}
    j = next(int(p) for p in g.predecessors(update) if g.op[p] not in state)
    while op_class(str(g.op[j])) == "view":
        j = int(g.predecessors(j)[0])
    return j


def assert_training_step(g: Graph, model: nn.Module, optimizer: str) -> None:
    """Persistent bytes, one update per parameter sharing its colocation group, modules."""
    assert g.validate() is g
    factor = 3 if optimizer == "adam" else 1
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert g.persistent_bytes.sum() == factor * param_bytes(model) + buffers
    for name, p in model.named_parameters():
        i, u = g.index[name], g.index[f"{name}.{optimizer}_update"]
        assert g.op[i] == "parameter" and g.persistent_bytes[i] == p.numel() * 4
        assert g.coloc[i] >= 0 and g.coloc[i] == g.coloc[u] == g.coloc[grad_producer(g, u)]
        assert g.module[u] == g.module[i] == name.rpartition(".")[0]
        if optimizer == "adam":
            for s in ("exp_avg", "exp_avg_sq"):
                j = g.index[f"{name}.{s}"]
                assert g.op[j] == "optimizer_state" and g.coloc[j] == g.coloc[i]
                assert g.persistent_bytes[j] == p.numel() * 4
    edges_from_state = g.persistent_bytes[g.src] > 0
    assert np.array_equal(g.edge_bytes[edges_from_state], g.persistent_bytes[g.src[edges_from_state]])
    assert (g.out_bytes[g.persistent_bytes > 0] == 0).all()


# -- graphs, traced once per module ----------------------------------------------------------
@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    return MLP()


@pytest.fixture(scope="module")
def mlp_graphs(mlp):
    x = (torch.randn(4, 8),)
    return {opt: from_torch(mlp, x, training=opt != "forward", optimizer=opt.replace("forward", "sgd"))
            for opt in ("forward", "sgd", "adam")}


@pytest.fixture(scope="module")
def convnet():
    return ConvNet()


@pytest.fixture(scope="module")
def conv_graphs(convnet):
    x = (torch.randn(2, 3, 16, 16),)
    return from_torch(convnet, x), from_torch(convnet, x, training=True)


@pytest.fixture(scope="module")
def encoder():
    return Encoder()


@pytest.fixture(scope="module")
def encoder_graphs(encoder):
    x = (torch.randn(2, 5, 32),)
    return from_torch(encoder, x), from_torch(encoder, x, training=True, optimizer="adam")


# -- forward graphs ----------------------------------------------------------------------------
def test_mlp_forward_matches_hand_counts(mlp_graphs):
    g = mlp_graphs["forward"]
    assert g.validate() is g and g.name == "MLP-forward"
    assert count(g, "addmm") == 2 and count(g, "mm") == 0 and count(g, "relu") == 1
    assert flops_of(g, "addmm") == [2 * 4 * 16 * 4 + 4 * 4, 2 * 4 * 8 * 16 + 4 * 16]
    assert flops_of(g, "relu") == [4 * 16]
    fc1 = next(i for i in range(g.num_nodes) if g.op[i] == "addmm" and g.module[i] == "fc1")
    assert g.shape_of(fc1) == (4, 16) and g.out_bytes[fc1] == 4 * 16 * 4
    assert g.bytes_read[fc1] == (16 + 4 * 8 + 8 * 16) * 4
    assert g.shape_of(g.index["x"]) == (4, 8) and g.op[g.index["x"]] == "input"
    assert g.persistent_bytes.sum() == (8 * 16 + 16 + 16 * 4 + 4) * 4
    assert g.module[g.index["fc2.weight"]] == "fc2"
    assert (g.coloc == -1).all()  # nothing to colocate without updates
    views = np.isin(g.op, ["permute_view", "getitem", "view"])
    assert (g.flops[views] == 0).all() and (g.out_bytes[views] == 0).all()


def test_conv_flops_by_hand(conv_graphs, convnet):
    g, _ = conv_graphs
    assert g.validate() is g
    # 2 * output elements * (C_in * kh * kw) per convolution
    assert flops_of(g, "convolution") == [2 * (2 * 8 * 16 * 16) * 3 * 9, 2 * (2 * 16 * 7 * 7) * 8 * 9]
    assert count(g, "buffer") == 3  # running mean and variance, batch counter
    buffers = sum(b.numel() * b.element_size() for b in convnet.buffers())
    assert g.persistent_bytes.sum() == param_bytes(convnet) + buffers


def test_unrolled_lstm_cell():
    model, x = Unrolled(), (torch.randn(3, 2, 8),)
    g = from_torch(model, x)
    assert count(g, "addmm") == 6 and count(g, "sigmoid") == 9 and count(g, "tanh") == 6
    # input and hidden projections: 2*B*K*4H + bias per step
    assert flops_of(g, "addmm") == [2 * 2 * 8 * 64 + 128] * 3 + [2 * 2 * 16 * 64 + 128] * 3
    t = from_torch(model, x, training=True)
    assert count(t, "sigmoid_backward") == 9 and count(t, "tanh_backward") == 6
    assert_training_step(t, model, "sgd")
    assert set(t.module[np.char.endswith(t.op.astype(str), "_backward")]) == {"cell"}


def test_nn_lstm_training_step_uses_no_fused_kernel():
    model = nn.LSTM(8, 16, batch_first=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOpWarning)
        g = from_torch(model, (torch.randn(2, 3, 8),), training=True)
    assert count(g, "sigmoid_backward") == 3 * 3  # three gates, three steps
    assert count(g, "mm") + count(g, "addmm") >= 6
    assert_training_step(g, model, "sgd")


def test_transformer_block_forward(encoder_graphs):
    g, _ = encoder_graphs
    assert g.validate() is g
    assert count(g, "softmax") == 2 and count(g, "layer_norm") == 4
    # scores and weighted values: 2 * (batch*heads) * L * L * head_dim each
    assert flops_of(g, "bmm").count(2 * 8 * 5 * 5 * 8) == 4
    softmax = np.flatnonzero(g.op == "softmax")
    assert sorted(g.module[softmax]) == ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn"]


# -- training steps ----------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mlp_training_step(mlp_graphs, mlp, optimizer):
    g = mlp_graphs[optimizer]
    assert g.name == f"MLP-train-{optimizer}" and g.meta["optimizer"] == optimizer
    assert_training_step(g, mlp, optimizer)
    assert count(g, "addmm") == 2 and count(g, "mm") == 3  # no input gradient for fc1
    assert count(g, "threshold_backward") == 1 and count(g, f"{optimizer}_update") == 4
    assert flops_of(g, "mm") == [2 * 4 * 16 * 4] * 2 + [2 * 16 * 8 * 4]
    w = g.index[f"fc1.weight.{optimizer}_update"]
    assert g.flops[w] == (12 if optimizer == "adam" else 2) * 16 * 8
    assert g.module[g.index["threshold_backward"]] == "act"
    assert g.module[grad_producer(g, w)] == "fc1"
    assert g.index[f"fc1.weight.{optimizer}_update"] > g.index["threshold_backward"]


def test_conv_training_step(conv_graphs, convnet):
    _, g = conv_graphs
    assert_training_step(g, convnet, "sgd")
    assert count(g, "convolution_backward") == 2 and count(g, "batch_norm_backward") == 1
    conv1 = 2 * (2 * 8 * 16 * 16) * 3 * 9
    conv2 = 2 * (2 * 16 * 7 * 7) * 8 * 9
    # conv1 needs no input gradient: weight + bias only; conv2 all three
    assert flops_of(g, "convolution_backward") == [conv1 + 2 * 8 * 16 * 16,
                                                   2 * conv2 + 2 * 16 * 7 * 7]
    # weight and bias share their backward op, so they share a colocation group
    assert g.coloc[g.index["conv1.weight"]] == g.coloc[g.index["conv1.bias"]]
    assert g.coloc[g.index["conv1.weight"]] != g.coloc[g.index["conv2.weight"]]


def test_transformer_training_step_modules(encoder_graphs, encoder):
    _, g = encoder_graphs
    assert_training_step(g, encoder, "adam")
    assert count(g, "softmax_backward") == 2 and count(g, "layer_norm_backward") == 4
    backward = np.char.endswith(g.op.astype(str), "_backward")
    assert all(str(m).startswith("encoder.layers.") for m in g.module[backward])
    assert g.module[g.index["encoder.layers.1.linear1.weight.adam_update"]] == "encoder.layers.1.linear1"
    # only the loss and the input lie outside every module
    assert set(g.op[g.module == ""]) <= {"input", "mean", "fill", "expand", "div"}
    r = simulate(Problem(g, load_cluster("dgx1-v100:2")), Plan(placement=np.zeros(g.num_nodes, int)))
    assert r.valid and r.step_time > 0


def test_custom_loss_and_mode_restored(mlp):
    mlp.eval()
    g = from_torch(mlp, (torch.randn(4, 8),), training=True, loss=lambda out: out.pow(2).sum())
    assert not mlp.training
    assert count(g, "pow") >= 1 and count(g, "sum") >= 1  # the loss, and its gradient
    mlp.train()
    from_torch(mlp, (torch.randn(4, 8),))
    assert mlp.training


def test_frozen_parameters_get_no_update():
    model = MLP()
    model.fc1.requires_grad_(False)
    g = from_torch(model, (torch.randn(4, 8),), training=True, optimizer="adam")
    assert "fc1.weight.adam_update" not in g.index and "fc2.weight.adam_update" in g.index
    assert g.persistent_bytes.sum() == param_bytes(model) + 2 * (16 * 4 + 4) * 4


class TiedLM(nn.Module):
    """An embedding and an output layer sharing one weight, as language models tie them."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(self.emb(tokens))


@pytest.mark.parametrize("training", [False, True])
def test_tied_weights_are_one_parameter(training):
    model, tokens = TiedLM(), torch.randint(0, 50, (4, 6))
    g = from_torch(model, (tokens,), training=training)
    assert g.persistent_bytes.sum() == param_bytes(model) == 50 * 16 * 4
    assert count(g, "parameter") == 1


# -- failures and unknown ops ------------------------------------------------------------------
@pytest.mark.parametrize("training", [False, True])
def test_untraceable_model_raises_clear_error(training):
    with pytest.raises(FrontendError, match=r"Branchy: .*data-dependent") as err:
        from_torch(Branchy(), (torch.randn(2, 4),), training=training)
    assert "\n" not in str(err.value)


def test_data_dependent_sizes_raise_clear_error():
    # PyG's GCN adds self-loops with a mask: sizes that depend on the data (written
    # elsewhere; a symbolic size once crashed the check for empty outputs)
    from torch_geometric.nn.models import GCN

    x, edges = torch.randn(50, 8), torch.randint(0, 50, (2, 200))
    with pytest.raises(FrontendError, match=r"^GCN: node '\w+' \(aten\.\w+\.\w+ in module '[\w.]+'\) "
                       r"has a shape known only at run time, \(.*u0.*\): its size depends on its "
                       r"inputs' values") as err:
        from_torch(GCN(8, 16, 2, out_channels=4), (x, edges), training=True)
    assert "\n" not in str(err.value)


def test_bad_options():
    with pytest.raises(FrontendError, match="'sgd' or 'adam', got 'rmsprop'"):
        from_torch(MLP(), (torch.randn(4, 8),), training=True, optimizer="rmsprop")
    with pytest.raises(FrontendError, match=r"MLP: the loss must be a scalar tensor, got \(4, 4\)"):
        from_torch(MLP(), (torch.randn(4, 8),), training=True, loss=lambda out: out * 2)
    with pytest.raises(FrontendError, match="tuple of MLP's positional arguments"):
        from_torch(MLP(), {"x": torch.randn(4, 8)})


def test_unknown_op_warns_once_and_is_costed():
    class Cumulative(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1) * 2

    with pytest.warns(UnknownOpWarning, match="Cumulative: 1 op.*'cumsum'"):
        g = from_torch(Cumulative(), (torch.randn(4, 8),))
    i = int(np.flatnonzero(g.op == "cumsum")[0])
    assert g.flops[i] == 32 and g.bytes_read[i] == g.bytes_written[i] == 128


# -- saved programs ----------------------------------------------------------------------------
def test_pt2_round_trip_matches_from_torch(tmp_path, mlp):
    x = (torch.randn(4, 8),)
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(mlp.eval(), x), path)
    loaded, direct = import_graph(path), from_torch(mlp, x)
    assert loaded.name == "mlp" and loaded.meta["source"] == str(path)
    for k in ("names", "op", "shape", "flops", "bytes_read", "bytes_written", "out_bytes",
              "persistent_bytes", "module", "coloc", "src", "dst", "edge_bytes"):
        assert np.array_equal(getattr(loaded, k), getattr(direct, k)), k
    assert load_exported(str(path)).num_nodes == loaded.num_nodes


def _use_pickle(name: str, data: bytes) -> bytes:
    if not name.endswith("weights_config.json"):
        return data
    config = json.loads(data)
    next(iter(config["config"].values()))["use_pickle"] = True
    return json.dumps(config).encode()


@pytest.mark.parametrize("tamper, match", [
    (_use_pickle, "stores '.*' pickled"),
    (lambda name, data: pickle.dumps(print) if "sample_inputs" in name else data, "unsafe"),
    (lambda name, data: data, "AOTInductor"),
], ids=["pickled-weights", "pickled-sample-inputs", "aotinductor-library"])
@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")
def test_unsafe_pt2_is_refused(tmp_path, mlp, tamper, match):
    good, bad = tmp_path / "good.pt2", tmp_path / "bad.pt2"
    torch.export.save(torch.export.export(mlp, (torch.randn(4, 8),)), good)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            dst.writestr(item, tamper(item.filename, src.read(item)))
        if match == "AOTInductor":
            dst.writestr("good/data/aotinductor/model/model.so", b"\x7fELF")
    with pytest.raises(GraphFormatError, match=match):
        load_exported(bad)


def _rewrite_pt2(src: Path, dst: Path, tamper) -> None:
    """Copy archive ``src`` to ``dst``, each member's bytes through ``tamper(name, data)``."""
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, "w") as b:
        for item in a.infolist():
            b.writestr(item, tamper(item.filename, a.read(item)))


def test_malformed_pt2_names_the_cause_without_a_logged_traceback(tmp_path, mlp, capfd):
    """torch.export.load logs a traceback, hides the cause and falls back to torch < 2.8's
    format (which unpickles) when an archive does not load; graphopt reads it with
    torch's archive loader alone."""
    good, bad = tmp_path / "good.pt2", tmp_path / "bad.pt2"
    torch.export.save(torch.export.export(mlp, (torch.randn(4, 8),)), good)
    _rewrite_pt2(good, bad, lambda name, data: data)
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("version", "8.0")  # what the legacy loader looks for
    with pytest.raises(GraphFormatError, match="bad.pt2: .*not in a subdirectory good/: version"):
        load_exported(bad)
    assert "Traceback" not in capfd.readouterr().err


def test_zip_bomb_pt2_is_refused_before_reading(tmp_path, mlp):
    """torch's reader allocates what a member declares: 8 MiB of deflated zeros in a file
    of some kilobytes is refused by its expansion, before anything is read."""
    good, bad = tmp_path / "good.pt2", tmp_path / "bad.pt2"
    torch.export.save(torch.export.export(mlp, (torch.randn(4, 8),)), good)
    _rewrite_pt2(good, bad, lambda name, data: data)
    with zipfile.ZipFile(bad, "a", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("good/extra", bytes(2**23))
    with pytest.raises(GraphFormatError, match=r"bad.pt2: its members expand from [\d,]+ to [\d,]+ bytes, "
                                               "more than 100x"):
        load_exported(bad)


def test_declared_input_size_is_bounded(tmp_path, mlp):
    """A .pt2 file declares its inputs' shapes; drawing example inputs for a shape of
    10^12 rows is refused before any allocation, naming the file and the input."""
    good, bad = tmp_path / "good.pt2", tmp_path / "bad.pt2"
    torch.export.save(torch.export.export(mlp, (torch.randn(4, 8),)), good)

    def grow(name: str, data: bytes) -> bytes:
        if not name.endswith("models/model.json"):
            return data
        doc = json.loads(data)
        values = doc["graph_module"]["graph"]["tensor_values"]
        values["x"]["sizes"][0] = {"as_int": 10**12}
        return json.dumps(doc).encode()

    _rewrite_pt2(good, bad, grow)
    with pytest.raises(FrontendError, match=r"bad.pt2: input .x. has shape \[1000000000000, 8\].*"
                                            "MAX_INPUT_BYTES"):
        load_exported(bad)


@pytest.mark.parametrize("name, content, match", [
    ("missing.pt2", None, "no such file"),
    ("garbage.pt2", b"not a zip", "unreadable"),
    ("model.h5", b"", r"no importer for '.h5' files; supported: .json, .npz, .onnx, .pb, .pt2"),
])
def test_unreadable_files(tmp_path, name, content, match):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(GraphFormatError, match=match):
        import_graph(path)


def test_importers_are_lazy_module_paths():
    assert IMPORTERS[".pt2"] == "graphopt.frontends.torch:load_exported"
    assert Counter(v.count(":") for v in IMPORTERS.values()) == {1: len(IMPORTERS)}
