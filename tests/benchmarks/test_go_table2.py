"""The go-table2 benchmark on its quick (CI) sizes: structure, checkpoint and resume,
and the markdown section it writes."""

import json

from graphopt.benchmarks import go_table2


def test_quick_rows_checkpoint_resume_and_docs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_CACHE", str(tmp_path / "cache"))
    out, docs = tmp_path / "r.json", tmp_path / "b.md"
    rows, methods = ("rnnlm-2", "wavenet-2x18"), ("single", "expert", "sa")
    res = go_table2.run("p100", methods, budget=40, quick=True, rows=rows, out=out,
                        progress=False)
    assert [r["model"] for r in res["rows"]] == list(rows)
    for row in res["rows"]:
        assert row["devices"] == 2 and row["reported"] is None  # resized: no paper figures
        for m in methods:
            r = row["methods"][m]
            assert r["valid"] and r["step_time"] >= row["lower_bound"] > 0
        # the search starts from a plan at least as good as one device and never loses it
        assert row["methods"]["sa"]["step_time"] <= row["methods"]["single"]["step_time"] + 1e-12
        assert row["methods"]["sa"]["evals"] <= 40
    saved = json.loads(out.read_text())
    assert saved["rows"] == json.loads(json.dumps(res["rows"]))
    # resume with the same settings reuses the rows on disk
    saved["rows"][0]["methods"]["single"]["step_time"] = 123.0
    out.write_text(json.dumps(saved))
    again = go_table2.run("p100", methods, budget=40, quick=True, rows=rows, out=out,
                          resume=True, progress=False)
    assert again["rows"][0]["methods"]["single"]["step_time"] == 123.0
    go_table2.update_docs(res, docs)
    go_table2.update_docs(res, docs)
    text = docs.read_text()
    assert text.count("<!-- go-table2-quick:start -->") == 1
    assert "| rnnlm-2 |" in text and "geomean vs expert" in text


def test_resume_adds_methods_to_chosen_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_CACHE", str(tmp_path / "cache"))
    out, docs = tmp_path / "r.json", tmp_path / "b.md"
    rows = ("transformer-xl-2", "wavenet-2x18")
    go_table2.run("p100", ("single", "expert"), budget=16, quick=True, rows=rows, out=out,
                  progress=False, command="first")
    saved = json.loads(out.read_text())
    saved["rows"][1]["methods"]["single"]["step_time"] = 123.0  # must survive the resume
    out.write_text(json.dumps(saved))
    small = {"hidden": 8, "progress": False}
    res = go_table2.run("p100", ("rl-lstm", "hdp"), budget=16, quick=True, rows=rows[:1],
                        out=out, resume=True, progress=False, command="second",
                        params={"rl-lstm": small, "hdp": small})
    assert res["settings"]["methods"] == ["single", "expert", "rl-lstm", "hdp"]
    assert res["commands"] == ["first", "second"]
    first, second = res["rows"]
    assert second["methods"]["single"]["step_time"] == 123.0 and "hdp" not in second["methods"]
    for m in ("rl-lstm", "hdp"):
        r = first["methods"][m]
        assert r["valid"] and r["evals"] == 16 and r["params"] == small
        assert 0 < r["evals_to_within_2pct"] <= 16 and r["seconds_to_within_2pct"] >= 0
    assert json.loads(out.read_text())["rows"] == json.loads(json.dumps(res["rows"]))
    # nothing left to run: the file is unchanged but for the command
    again = go_table2.run("p100", ("rl-lstm",), budget=16, quick=True, rows=rows[:1], out=out,
                          resume=True, progress=False, params={"rl-lstm": small})
    assert again["rows"] == res["rows"]
    go_table2.update_docs(res, docs)
    text = docs.read_text()
    assert "`first`; then `second`" in text and "evals to 2%" in text
    assert "| wavenet-2x18 | 1,786 |" not in text  # quick sizes
    table = text.split("| wavenet-2x18 |")[1].split("\n")[0]
    assert table.count("| - ") == 2  # rl-lstm and hdp not run on this row
