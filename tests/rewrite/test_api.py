"""rewrite() and sequential_rewrite() end to end on tiny versions of Tensat's models, the
extractors, the limits, and the command line."""

import json

import pytest
import torch
from typer.testing import CliRunner

from graphopt.errors import GraphoptError
from graphopt.rewrite import RewriteConfig, RewriteError, rewrite, sequential_rewrite
from graphopt.rewrite.api import export_module, saturate
from graphopt.rewrite.extract import (Costs, dag_cost, extract_greedy, extract_ilp,
                                      read_egraph)
from graphopt.rewrite.models import make_model
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
                 ["nasrnn", "--size", "tiny", "-o", str(out), "--ilp-time-limit", "0"]):
        r = CliRunner().invoke(app, ["rewrite", *args])
        assert r.exit_code == 2 and "error:" in r.output, (args, r.output)
