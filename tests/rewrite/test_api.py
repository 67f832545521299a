"""rewrite() and sequential_rewrite() end to end on tiny versions of Tensat's models, the
extractors, the limits, and the command line."""

import json

import pytest
import torch
from typer.testing import CliRunner

from graphopt.errors import GraphoptError
from graphopt.rewrite import RewriteConfig, RewriteError, rewrite, sequential_rewrite
from graphopt.rewrite import codegen, extract
from graphopt.rewrite.api import export_module, saturate
from graphopt.rewrite.codegen import fused_kernels
from graphopt.rewrite.extract import (Costs, dag_cost, extract_greedy, extract_ilp,
                                      read_egraph)
from graphopt.rewrite.models import ZOO_BENCH, make_model
from graphopt.rewrite.terms import to_terms


@pytest.fixture(scope="module")
def nasrnn():
    """Tiny NasRNN, exported once for the tests that share it."""
    model, inputs = make_model("nasrnn", "tiny")
    return export_module(model, inputs), inputs


@pytest.mark.parametrize("name", ["bert", "resnext-50", "squeezenet", "vgg-19"])
def test_rewrite_keeps_outputs_and_cost(name):
    model, inputs = make_model(name, "tiny")
    res = rewrite(model, inputs)
    s = res.stats
    assert s["cost_after"] <= s["cost_before"]
    assert s["max_error"] < 1e-4
    # on inputs it was not checked on, too
    other = tuple(torch.randn_like(x) for x in inputs)
    with torch.no_grad():
        torch.testing.assert_close(res.module(*other), model(*other), rtol=1e-4, atol=1e-5)


def test_rules_pay_where_tensat_says(nasrnn):
    """BN folds into convolutions (ResNeXt); linears of one input merge (NasRNN)."""
    res = rewrite(*make_model("resnext-50", "tiny"))
    targets = [str(n.target) for n in res.module.graph.nodes if n.op == "call_function"]
    assert "aten.batch_norm.default" not in targets
    assert res.stats["cost_after"] < res.stats["cost_before"]
    res = rewrite(*nasrnn)
    linears = sum(n.target == torch.ops.aten.linear.default for n in res.module.graph.nodes)
    assert linears < 2 * 8 * 2  # 8 gates x (input, hidden) x 2 steps before
    assert res.stats["rule_matches"]["merge-linear"] > 0


def test_ilp_not_worse_than_greedy_and_deterministic(nasrnn):
    tr = to_terms(nasrnn[0])
    eg, _ = saturate(tr, RewriteConfig())
    ec = read_egraph(eg, tr)
    from graphopt.hardware import load_cluster

    cost = Costs(load_cluster("cpu:1")).of(ec)
    greedy = extract_greedy(ec, cost)
    ilp, stats = extract_ilp(ec, cost, hint=greedy)
    again, _ = extract_ilp(ec, cost, hint=greedy)
    assert stats["status"] == "OPTIMAL"
    assert dag_cost(ilp, ec.root, cost) < dag_cost(greedy, ec.root, cost)
    assert dag_cost(again, ec.root, cost) == dag_cost(ilp, ec.root, cost)


def test_sequential_is_not_better_than_saturation(nasrnn):
    seq = sequential_rewrite(*nasrnn)
    sat = rewrite(*nasrnn)
    assert seq.stats["max_error"] < 1e-4
    assert sat.stats["cost_after"] <= seq.stats["cost_after"] * (1 + 1e-9)


def test_limits_stop_saturation():
    model, inputs = make_model("bert", "tiny")
    assert rewrite(model, inputs, RewriteConfig(iterations=1)).stats["stop"] == "iterations"
    assert rewrite(model, inputs, RewriteConfig(node_limit=10)).stats["stop"] == "nodes"


def test_search_time_limit_counts_saturation_in(monkeypatch):
    """The ILP gets what saturation left of the search's limit, and never less than
    MIN_ILP_S, so that a slow saturation still ends with more than the greedy program."""
    from graphopt.rewrite import api

    given = []

    def spy(ec, cost, time_limit, seed, hint):
        given.append(time_limit)
        return extract_ilp(ec, cost, time_limit, seed, hint=hint)

    monkeypatch.setattr(api, "extract_ilp", spy)
    model, inputs = make_model("bert", "tiny")
    res = rewrite(model, inputs, RewriteConfig(search_time_limit=30.0))
    assert 30.0 - res.stats["saturate_s"] - res.stats["extract_s"] < given[0] < 30.0
    rewrite(model, inputs, RewriteConfig(search_time_limit=1e-3))
    assert given[1] == api.MIN_ILP_S


def test_node_limit_is_never_passed():
    """The iteration that passes the limit is undone: the e-graph stays within it, and
    the program is still rewritten by the iterations before."""
    model, inputs = make_model("rnnlm-2", "tiny")
    free = rewrite(model, inputs, RewriteConfig(iterations=4))
    limit = free.stats["enodes"] - 1
    res = rewrite(model, inputs, RewriteConfig(iterations=4, node_limit=limit))
    assert res.stats["stop"] == "nodes" and res.stats["iterations"] < 4
    assert res.stats["enodes"] <= limit
    assert res.stats["max_error"] < 1e-4


@pytest.mark.parametrize("name", list(ZOO_BENCH))
def test_zoo_models_rewrite_to_equal_programs(name):
    """The zoo's models (gated dilated convolutions, LSTM cells, embeddings, relative
    attention: shapes the rules were not written for) come back computing their loss."""
    model, inputs = make_model(name, "tiny")
    res = rewrite(model, inputs)
    assert res.stats["cost_after"] <= res.stats["cost_before"] * (1 + 1e-9)
    with torch.no_grad():
        torch.testing.assert_close(res.module(*inputs), model(*inputs), rtol=1e-4, atol=1e-5)


def test_bad_config_and_unexportable_module(nasrnn):
    with pytest.raises(GraphoptError, match="extractor"):
        rewrite(*nasrnn, RewriteConfig(extractor="best"))

    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum().item() > 0 else x  # data-dependent: export refuses

    with pytest.raises(RewriteError, match="torch.export failed"):
        rewrite(Branchy(), (torch.randn(3),))


def test_cli_rewrites_and_round_trips(tmp_path):
    from graphopt.cli import app

    out, stats = tmp_path / "n.pt2", tmp_path / "s.json"
    r = CliRunner().invoke(app, ["rewrite", "nasrnn", "--size", "tiny", "-o", str(out),
                                 "--stats", str(stats), "--extractor", "greedy"])
    assert r.exit_code == 0, r.output
    assert json.loads(stats.read_text())["max_error"] < 1e-4
    model, (x,) = make_model("nasrnn", "tiny")
    with torch.no_grad():
        torch.testing.assert_close(torch.export.load(out).module()(x), model(x))
    # the saved program is an input too
    r = CliRunner().invoke(app, ["rewrite", str(out), "-o", str(tmp_path / "m.pt2"),
                                 "--iterations", "1", "--extractor", "greedy"])
    assert r.exit_code == 0, r.output
    for args in (["bogus", "-o", str(out)], ["nasrnn", "-o", str(tmp_path / "x.txt")],
                 ["nasrnn", "--size", "tiny", "-o", str(out), "--search-time-limit", "0"]):
        r = CliRunner().invoke(app, ["rewrite", *args])
        assert r.exit_code == 2 and "error:" in r.output, (args, r.output)


def test_cli_bench_writes_results_and_docs(tmp_path):
    from graphopt.cli import app

    out, docs = tmp_path / "r.json", tmp_path / "b.md"
    docs.write_text("# Benchmarks\n")
    r = CliRunner().invoke(app, ["bench", "rewrite", "--size", "tiny", "--models", "nasrnn",
                                 "--repeats", "2", "--warmup", "0", "--out", str(out),
                                 "--docs", str(docs)])
    assert r.exit_code == 0, r.output
    assert any(line.startswith("[1/1] nasrnn: ") and line.endswith(" s")
               for line in r.output.splitlines()), r.output  # a line per row (issue 37)
    res = json.loads(out.read_text())
    assert [row["model"] for row in res["rows"]] == ["nasrnn"]
    assert len(res["machine"]["load_average"]) == 2  # what else ran is on record
    text = docs.read_text()
    assert "<!-- rewrite-tiny:start -->" in text and "Load average (1 min)" in text


_FUSED_OPS = ("mkldnn._convolution_pointwise.default", "mkldnn._linear_pointwise.default")


def _targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.skipif(not fused_kernels(), reason="this PyTorch has no oneDNN fused kernels")
@pytest.mark.parametrize("name", ["vgg-19", "squeezenet", "resnext-50"])
def test_activations_fuse_into_kernels(name):
    """conv + relu (after BN folding on ResNeXt) and linear + relu become oneDNN's fused
    kernels, and the program still computes the original's outputs."""
    model, inputs = make_model(name, "tiny")
    res = rewrite(model, inputs)
    targets = _targets(res.module)
    assert _FUSED_OPS[0] in targets
    assert "aten.batch_norm.default" not in targets
    if name == "vgg-19":
        assert _FUSED_OPS[1] in targets
        assert "aten.relu.default" not in targets
    assert res.stats["rule_matches"]["conv-relu-fuse"] > 0
    assert res.stats["max_error"] < 1e-4


def test_fused_ops_fall_back_to_pairs(monkeypatch):
    """Without oneDNN a fused op is built as the op and its activation."""
    monkeypatch.setattr(codegen, "fused_kernels", lambda: False)
    model, inputs = make_model("vgg-19", "tiny")
    res = rewrite(model, inputs)
    targets = _targets(res.module)
    assert not set(_FUSED_OPS) & set(targets)
    assert res.stats["rule_matches"]["conv-relu-fuse"] > 0
    assert targets.count("aten.relu.default") == 16 + 2
    with torch.no_grad():
        torch.testing.assert_close(res.module(*inputs), model(*inputs), rtol=1e-4, atol=1e-5)


def test_fused_op_is_priced_below_the_pair_and_measured_as_itself(monkeypatch):
    model, inputs = make_model("vgg-19", "tiny")
    tr = to_terms(export_module(model, inputs))
    eg, _ = saturate(tr, RewriteConfig())
    ec = read_egraph(eg, tr)
    from graphopt.hardware import load_cluster

    cost = Costs(load_cluster("cpu:1")).of(ec)
    pairs = 0
    for nodes in ec.nodes.values():
        fused = [n for n in nodes if n.op == "T.conv_act"]
        for f in fused:
            relu = next(n for n in nodes if n.op == "T.un")
            conv = next(n for n in ec.nodes[relu.args[1]] if n.op == "T.conv")
            assert cost[f] < cost[conv] + cost[relu]
            pairs += 1
    assert pairs == 16
    # measured: every op the rules know runs as the rewritten program runs it
    monkeypatch.setattr(extract, "_MEASURED", {})  # nothing timed before in this process
    ran = []
    real = extract.run_call
    monkeypatch.setattr(extract, "run_call", lambda t, a, op: ran.append(t) or real(t, a, op))
    measured = Costs(load_cluster("cpu:1"), measure=True, repeats=1).of(ec)
    assert all(v >= 0 for v in measured.values())
    # timed once per process: another rewriter's costs are the same
    assert Costs(load_cluster("cpu:1"), measure=True, repeats=1).of(ec) == measured
    fused_target = codegen.call_of("T.conv_act", next(
        n for ns in ec.nodes.values() for n in ns if n.op == "T.conv_act").args,
        lambda c: ec.values[c], tr)[0]
    assert fused_target in ran


@pytest.mark.skipif(not fused_kernels(), reason="this PyTorch has no oneDNN fused kernels")
def test_unfuse_gives_back_the_pairs():
    """What torch.compile gets: the same program with ATen ops only."""
    model, inputs = make_model("vgg-19", "tiny")
    res = rewrite(model, inputs)
    plain = codegen.unfuse(res.module)
    assert not set(_FUSED_OPS) & set(_targets(plain))
    assert _targets(plain).count("aten.relu.default") == 16 + 2
    assert _FUSED_OPS[0] in _targets(res.module)  # the rewritten program is left as it was
    with torch.no_grad():
        torch.testing.assert_close(plain(*inputs), res.module(*inputs), rtol=1e-5, atol=1e-6)


def test_fused_kernels_only_for_their_dtypes():
    """oneDNN's fused kernels reject float64: a float64 program keeps its pairs."""
    model, (x,) = make_model("vgg-19", "tiny")
    res = rewrite(model.double(), (x.double(),))
    assert not set(_FUSED_OPS) & set(_targets(res.module))
    assert res.stats["max_error"] < 1e-10


def test_rewritten_program_keeps_the_original_order_of_ops():
    """Ops are emitted in the input program's order, not depth-first from the outputs
    (which took the decoder's ops into the encoder's and cost GNMT-2 9% on a CPU)."""

    class Branches(torch.nn.Module):
        def forward(self, x):
            a = torch.sin(x)
            b = torch.cos(x)
            return a + torch.exp(b)  # depth-first from here: cos, exp, sin, add

    x = torch.randn(4, 4)
    res = rewrite(Branches(), (x,))
    assert _targets(res.module) == _targets(res.original)
    assert _targets(res.module)[:2] == ["aten.sin.default", "aten.cos.default"]
