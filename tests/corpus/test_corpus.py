"""The corpus: its items and split, a resumable build, its manifest and the CLI."""

import json

import pytest
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.corpus import (HELD_OUT_FAMILIES, HF_HELD_OUT, HF_TRAIN, VERSION, CorpusItem,
                             build_corpus, default_items, load_manifest, split_of, summarize)
from graphopt.errors import GraphoptError
from graphopt.frontends import load_source

runner = CliRunner()

FAST = [CorpusItem("example:layered-40-s0", "layered"), CorpusItem("example:layered-40-s1", "layered"),
        CorpusItem("example:nope", "broken")]


def test_held_out_families_are_never_in_train():
    items = default_items()
    assert len(items) >= 300
    for item in items:
        assert (item.split == "held-out") == (item.family in HELD_OUT_FAMILIES), item
    train = {i.family for i in items if i.split == "train"}
    assert len(train) >= 25
    assert not train & (set(HF_HELD_OUT) | {"wavenet", "amoebanet"})
    assert {"bert", "gpt2", "t5", "vit", "llama", "bart", "whisper", "resnet", "mistral", "qwen2",
            "wavenet", "amoebanet"} <= HELD_OUT_FAMILIES
    assert not set(HF_TRAIN) & HELD_OUT_FAMILIES
    assert len({i.id for i in items}) == len(items)
    assert split_of("gnmt") == "train"


def test_families_filter():
    assert {i.family for i in default_items(families=["gnmt", "layered"])} == {"gnmt", "layered"}
    assert default_items(families=["nothing"]) == []


def test_build_writes_manifest_and_graphs_and_resumes(tmp_path):
    seen = []
    manifest = build_corpus(tmp_path, FAST, progress=lambda d, n, i, r: seen.append((d, n, r)))
    assert [s[:2] for s in seen] == [(1, 3), (2, 3), (3, 3)]
    doc = load_manifest(tmp_path)
    assert doc == manifest and doc["version"] == VERSION
    built = [r for r in doc["items"].values() if r["status"] == "built"]
    assert len(built) == 2
    for record in built:
        graph = load_source(str(tmp_path / record["file"]))
        assert graph.num_nodes == record["nodes"] and graph.num_edges == record["edges"]
        assert record["split"] == "train" and record["seconds"] >= 0
    (skipped,) = [r for r in doc["items"].values() if r["status"] == "skipped"]
    assert "unknown example graph" in skipped["reason"] and "\n" not in skipped["reason"]
    # resumed: nothing rebuilt, the build recorded
    again = build_corpus(tmp_path, FAST)
    assert again["builds"][-1]["reused"] == 3 and again["builds"][-1]["built"] == 0
    assert len(again["builds"]) == 2
    # a lost graph file is rebuilt
    (tmp_path / built[0]["file"]).unlink()
    assert build_corpus(tmp_path, FAST)["builds"][-1]["built"] == 1
    rows = summarize(again)
    assert [(r["family"], r["built"], r["skipped"]) for r in rows] == [("broken", 0, 1),
                                                                       ("layered", 2, 0)]


def test_manifest_of_another_format_or_version(tmp_path):
    with pytest.raises(GraphoptError, match="not a corpus"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "graphopt-corpus",
                                                        "version": 99, "items": {}}))
    with pytest.raises(GraphoptError, match="version 99"):
        load_manifest(tmp_path)


def test_cli_build_and_list(tmp_path, monkeypatch):
    import graphopt.corpus as corpus

    monkeypatch.setattr(corpus, "default_items", lambda quick, families: FAST[:2])
    out = tmp_path / "c"
    r = runner.invoke(app, ["corpus", "build", "--out", str(out), "--quick"])
    assert r.exit_code == 0, r.output
    assert "[2/2] built" in r.output and "built 2, skipped 0" in r.output
    r = runner.invoke(app, ["corpus", "build", "--out", str(out), "--quick"])
    assert "[1/2] kept" in r.output and "kept 2" in r.output
    for command in ("list", "info"):
        r = runner.invoke(app, ["corpus", command, str(out)])
        assert r.exit_code == 0, r.output
        assert "layered" in r.output and "train: 2 graphs from 1 families" in r.output


def test_cli_errors_are_one_line(tmp_path):
    r = runner.invoke(app, ["corpus", "list", str(tmp_path)])
    assert r.exit_code == 2 and "not a corpus" in r.output
    r = runner.invoke(app, ["corpus", "build", "--out", str(tmp_path), "--families", "nope"])
    assert r.exit_code == 2 and "no item of these families" in r.output


def test_seeded_layered_source():
    a, b = load_source("example:layered-100-s1"), load_source("example:layered-100-s2")
    assert a.num_nodes == b.num_nodes == 100 and a.meta["seed"] == 1
    assert load_source("example:layered-100").meta["seed"] == 0
    for bad in ("example:layered-100-s", "example:layered-100-s-1", "example:layered-100-sx"):
        with pytest.raises(GraphoptError, match="SEED"):
            load_source(bad)
