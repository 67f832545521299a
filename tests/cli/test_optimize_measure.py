"""``graphopt optimize --measure``: each method's plan run for real beside the simulator."""

import json

import pytest
from typer.testing import CliRunner

from graphopt.cli import app

runner = CliRunner()


def test_measure_adds_measured_columns_and_report_fields(tmp_path):
    r = runner.invoke(app, ["optimize", "zoo:rnnlm-2-quick", "-c", "cpu:1", "--methods",
                            "single,expert", "--budget", "5", "--measure", "--devices", "cpu:1",
                            "--measure-steps", "1", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "measured ms" in r.output and "median of 1 steps" in r.output
    rows = json.loads((tmp_path / "report.json").read_text())["rows"]
    for row in rows:
        m = row["measured"]
        assert m["steps"] == 1 and m["devices"] == "cpu:1" and 0 < m["min"] <= m["median"] <= m["max"]
    assert rows[0]["measured"]["speedup_vs_single"] == 1.0
    rec = json.loads((tmp_path / "report.json").read_text())["recommended"]
    assert rec["default"] == "single" and rec["method"] in ("single", "expert")
    assert "recommended:" in r.output


def test_measure_runs_one_device_beside_the_methods_asked_for(tmp_path):
    r = runner.invoke(app, ["optimize", "zoo:rnnlm-2-quick", "-c", "cpu:1", "--methods",
                            "expert", "--budget", "5", "--measure", "--devices", "cpu:1",
                            "--measure-steps", "2", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert [row["method"] for row in report["rows"]] == ["single", "expert"]
    # the recommendation is read off the measured steps in the report
    rec = report["recommended"]
    median = {row["method"]: row["measured"]["median"] for row in report["rows"]}
    assert rec["fastest"] == min(median, key=median.get)
    assert rec["fastest_margin"] == pytest.approx(median["single"] / median[rec["fastest"]])
    assert rec["noise"] >= 0 and rec["method"] in median


def test_measure_refuses_before_searching(tmp_path):
    r = runner.invoke(app, ["optimize", "example:mlp", "--methods", "sa", "--measure"])
    assert r.exit_code == 2 and "--measure: graph 'example:mlp'" in r.output
    assert "Traceback" not in r.output and "running" not in r.output
    r = runner.invoke(app, ["optimize", "zoo:rnnlm-2-quick", "-c", "cpu:2", "--methods", "single",
                            "--measure", "--devices", "cpu:1"])
    assert r.exit_code == 2 and "--devices cpu:1 has 1 device(s); the cluster has 2" in r.output
    r = runner.invoke(app, ["optimize", "example:mlp", "--devices", "cpu:1"])
    assert r.exit_code == 2 and "only with --measure" in r.output
