"""Benchmarks leave the docs alone unless told: a quick run writes its results under
--out and changes no Markdown file; --docs FILE writes that file's section. No script
in bench/ reaches into the CLI's private helpers."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from graphopt.cli import app

ROOT = Path(__file__).resolve().parents[2]


def _quick_table2(tmp_path: Path, *extra: str):
    return CliRunner().invoke(app, ["bench", "go-table2", "--quick", "--rows", "rnnlm-2",
                                    "--methods", "single,expert", "--budget", "5",
                                    "--out", str(tmp_path / "r.json"), *extra])


def test_a_quick_bench_leaves_the_docs_untouched(tmp_path, monkeypatch):
    docs = ROOT / "docs" / "benchmarks.md"
    before = docs.read_bytes()
    monkeypatch.chdir(tmp_path)  # a default docs path, were there one, would land here
    run = _quick_table2(tmp_path)
    assert run.exit_code == 0, run.output
    assert docs.read_bytes() == before
    assert (tmp_path / "r.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    lines = run.output.splitlines()
    assert lines[0].startswith("bench go-table2: 2 methods on 1 rows (quick sizes)")
    assert "no docs file changes" in lines[0]
    assert any(re.fullmatch(r"\[1/1\] rnnlm-2 \(single, expert\): [0-9.]+ s", x) for x in lines)


def test_docs_file_is_written_only_when_named(tmp_path):
    docs = tmp_path / "bench.md"
    docs.write_text("# Benchmarks\n\nkept\n")
    run = _quick_table2(tmp_path, "--docs", str(docs))
    assert run.exit_code == 0, run.output
    text = docs.read_text()
    assert "kept" in text and "<!-- go-table2-quick:start -->" in text and f"--docs {docs}" in text
    assert f"tables into {docs}" in run.output.splitlines()[0]


def test_no_bench_script_imports_the_cli_helpers():
    """What bench/ needs from the library is public API (graphopt.benchmarks,
    graphopt._files, ...), never the command line's private helpers (``graphopt.cli``)."""
    offenders = [p.name for p in sorted((ROOT / "bench").glob("*.py"))
                 if re.search(r"graphopt\.cli\b|from graphopt import cli\b", p.read_text())]
    assert offenders == []


def test_bench_scripts_write_no_docs_by_default():
    """Every script's --docs defaults to none: a docs file changes only when named."""
    for p in sorted((ROOT / "bench").glob("*.py")):
        text = p.read_text()
        defaults = re.findall(r'add_argument\("--docs",[^)]*?default=([^,)\s]+)', text)
        assert set(defaults) <= {"None", '""'}, (p.name, defaults)
        assert 'replace_section("docs/' not in text, p.name


def test_bench_scripts_are_short():
    """A script in bench/ parses its arguments and calls the library (graphopt.benchmarks):
    under 150 lines each."""
    long = {p.name: n for p in sorted((ROOT / "bench").glob("*.py"))
            if (n := len(p.read_text().splitlines())) >= 150}
    assert long == {}


def test_publish_saves_prints_and_rewrites_only_its_section(tmp_path, capsys):
    import json

    from graphopt.benchmarks import publish

    docs = tmp_path / "bench.md"
    docs.write_text("# Benchmarks\n\n<!-- other:start -->\nkept\n<!-- other:end -->\n")
    out = tmp_path / "r.json"
    publish({"x": 1}, "| a |", out, None, "demo", "Demo", "python bench/demo.py")
    assert json.loads(out.read_text()) == {"x": 1} and "| a |" in capsys.readouterr().out
    assert "demo" not in docs.read_text()  # no --docs, no docs
    publish({"x": 2}, "| b |", out, docs, "demo", "Demo", "python bench/demo.py")
    text = docs.read_text()
    assert "kept" in text and "## Demo" in text and "| b |" in text
    assert f"`python bench/demo.py --docs {docs}`" in text
