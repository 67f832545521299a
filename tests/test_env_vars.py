"""Issue 37: every ``GRAPHOPT_*`` variable that bounds what graphopt reads, at every kind
of bad value, through the command line: one line naming the variable, exit 2; a good
value applies (a file over it is refused naming the file and the variable)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from graphopt.cli import app

BAD = ["", " ", "abc", "-1", "0", "1e9", "1.5", "nan", "inf", "+5", "٢٠٠٠٠٠", "0x100",
       str(2**62 + 1), "9" * 30]
VARIABLES = {"GRAPHOPT_MAX_JSON_BYTES": "g.json", "GRAPHOPT_MAX_NPZ_BYTES": "g.npz"}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.ir.io import graph_to_dict, save_graph

    d = tmp_path_factory.mktemp("g")
    g = mlp_training_graph(layers=1, hidden=8, batch=2)
    (d / "g.json").write_text(json.dumps(graph_to_dict(g)))
    save_graph(g, d / "g.npz")
    assert np.load(d / "g.npz")["op"].size == g.num_nodes
    return d


def _info(graphs, var, value):
    r = CliRunner().invoke(app, ["info", str(graphs / VARIABLES[var])], env={var: value})
    return r, r.output.strip().splitlines()


@pytest.mark.parametrize("value", BAD, ids=[repr(v) for v in BAD])
@pytest.mark.parametrize("var", VARIABLES)
def test_a_bad_limit_is_one_line_naming_the_variable(graphs, var, value):
    r, lines = _info(graphs, var, value)
    assert r.exit_code == 2 and len(lines) == 1, r.output + repr(r.exception)
    assert lines[0].startswith(f"error: ${var}=") and "expected a whole number" in lines[0]


@pytest.mark.parametrize("var", VARIABLES)
def test_a_good_limit_applies(graphs, var):
    r, lines = _info(graphs, var, "1_000_000")
    assert r.exit_code == 0, r.output
    r, lines = _info(graphs, var, "100")
    assert r.exit_code == 2 and len(lines) == 1 and VARIABLES[var] in lines[0], r.output
    assert var in lines[0]


#: Issue 49: the bounds on what an hf: or pipe: model may ask for, read before any work
SIZE_VARIABLES = {"GRAPHOPT_MAX_PARAMS": "parameters", "GRAPHOPT_MAX_BYTES": "bytes"}
MODELS = {"hf": "hf:bert:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,"
                "intermediate_size=64,seq=8,batch=1",
          "pipe": "pipe:mlp:layers=2,hidden=8,batch=4"}


def _size_info(source, var, value):
    r = CliRunner().invoke(app, ["info", MODELS[source]], env={var: value})
    return r, r.output.strip().splitlines()


@pytest.mark.parametrize("value", BAD, ids=[repr(v) for v in BAD])
@pytest.mark.parametrize("var", SIZE_VARIABLES)
@pytest.mark.parametrize("source", MODELS)
def test_a_bad_size_bound_is_one_line_naming_the_variable(source, var, value):
    if source == "hf":
        pytest.importorskip("transformers")
    r, lines = _size_info(source, var, value)
    assert r.exit_code == 2 and len(lines) == 1, r.output + repr(r.exception)
    assert lines[0].startswith(f"error: ${var}=") and \
        f"expected a whole number of {SIZE_VARIABLES[var]}" in lines[0], lines[0]


@pytest.mark.parametrize("var", SIZE_VARIABLES)
@pytest.mark.parametrize("source", MODELS)
def test_a_good_size_bound_applies(source, var):
    if source == "hf":
        pytest.importorskip("transformers")
    r, lines = _size_info(source, var, str(10**12))
    assert r.exit_code == 0, r.output
    r, lines = _size_info(source, var, "100")
    assert r.exit_code == 2 and len(lines) == 1 and MODELS[source] in lines[0], r.output
    assert f"${var}" in lines[0] and "more than the 100 " in lines[0]
