"""The hf: graph source and the zoo's NAME:key=value overrides."""

import sys

import pytest

from graphopt.errors import GraphoptError
from graphopt.frontends import load_source
from graphopt.zoo import get_entry
from graphopt.zoo.hf import parse_spec

TINY_BERT = ("hf:bert:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,"
             "intermediate_size=64,seq=8,batch=1")


def test_parse_spec():
    assert parse_spec("bert") == ("bert", {})
    assert parse_spec("bert:num_hidden_layers=2,seq=128,x=true") == \
        ("bert", {"num_hidden_layers": 2, "seq": 128, "x": True})
    for bad in (":a=1", "bert:layers", "bert:a=1,a=2", "bert:=3", "bert:a="):
        with pytest.raises(GraphoptError):
            parse_spec(bad)


def test_zoo_overrides():
    assert get_entry("gnmt-2-quick:layers=3").config["layers"] == 3
    with pytest.raises(GraphoptError, match="not a size of the gnmt family"):
        get_entry("gnmt-2:depth=3")


def test_missing_transformers_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(GraphoptError, match=r"pip install 'graphopt\[hf\]'"):
        load_source(TINY_BERT)


def test_bad_shape_override_before_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(GraphoptError, match="batch=0 must be an integer"):
        load_source("hf:bert:batch=0")


def test_tiny_bert_training_step():
    pytest.importorskip("transformers")
    graph = load_source(TINY_BERT)
    assert graph.num_nodes > 100
    assert graph.meta["hf"]["model_type"] == "bert"
    assert graph.meta["hf"]["shape"] == {"batch": 1, "seq": 8, "samples": 4000}
    kinds = set(graph.op_class_names()) if hasattr(graph, "op_class_names") else None
    assert kinds is None or kinds


@pytest.mark.parametrize("spec, message", [
    ("hf:no_such_model", "unknown transformers model type 'no_such_model'"),
    ("hf:bert:no_such_field=3", "'no_such_field' is not a field of BertConfig"),
])
def test_hf_errors(spec, message):
    pytest.importorskip("transformers")
    with pytest.raises(GraphoptError, match=message):
        load_source(spec)


def test_hf_cli_error_exits_2():
    pytest.importorskip("transformers")
    from typer.testing import CliRunner

    from graphopt.cli import app

    r = CliRunner().invoke(app, ["info", "hf:no_such_model"])
    assert r.exit_code == 2 and "unknown transformers model type" in r.output
