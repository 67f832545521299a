"""The options several commands share (graphopt.cli.options): one definition each, their
bounds, their one-line errors, and the one default-cluster rule."""

import json

import pytest
import typer
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.cli.errors import OneLineUsageErrors
from graphopt.cli.options import (MAX_BUDGET, MAX_TRIALS, budget_option, cluster_option,
                                  default_cluster, methods_option, seed_option, split_item,
                                  trials_option)
from graphopt.errors import MAX_SEED

runner = CliRunner()

# a group with graphopt's one handler of errors, as the graphopt command has
probe = typer.Typer(cls=OneLineUsageErrors)


@probe.callback()
def _group() -> None:
    pass


@probe.command("probe")
def _probe(cluster: str | None = cluster_option(), seed: int = seed_option(),
           budget: int = budget_option(10), trials: int = trials_option(16),
           methods: str = methods_option("sa")) -> None:
    print(json.dumps([cluster, seed, budget, trials, methods]))


def _run(*args: str):
    return runner.invoke(probe, ["probe", *args])


def _one_line_error(r, text: str) -> None:
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and text in lines[0], r.output


def test_defaults_and_largest_values_pass():
    r = _run()
    assert r.exit_code == 0 and json.loads(r.output) == [None, 0, 10, 16, "sa"]
    r = _run("--seed", str(MAX_SEED), "--budget", str(MAX_BUDGET), "--trials", str(MAX_TRIALS),
             "-c", "h100:8", "--methods", "metis,sa")
    assert r.exit_code == 0 and json.loads(r.output) == ["h100:8", MAX_SEED, MAX_BUDGET,
                                                         MAX_TRIALS, "metis,sa"]


@pytest.mark.parametrize("args, text", [
    (("--seed", "-1"), "--seed -1: expected a whole number in 0..4,294,967,295"),
    (("--seed", str(2**32)), "--seed 4294967296"),
    (("--budget", "0"), "--budget 0: expected a whole number in 1..1,000,000,000"),
    (("--budget", str(10**9 + 1)), "--budget 1000000001"),
    (("--trials", "0"), "--trials 0: expected a whole number in 1..10,000"),
    (("--trials", "10001"), "--trials 10001"),
    (("-c", "h100:٢"), "device count '٢' is not ASCII digits"),
    (("--cluster", "h100:+2"), "device count '+2' is not ASCII digits"),
    (("--methods", "sa,metis, sa"), "sa is named twice"),
])
def test_out_of_bounds_is_one_line_and_exit_2(args, text):
    _one_line_error(_run(*args), text)


@pytest.mark.parametrize("args, text", [
    (("simulate", "example:mlp", "-c", "h100:٢"), "--cluster 'h100:٢'"),
    (("optimize", "example:mlp", "--methods", "sa,sa"), "--methods 'sa,sa': sa is named twice"),
    (("optimize", "example:mlp", "--seed", "-1"), "--seed -1"),
    (("tune", "example:mlp", "--trials", "0"), "--trials 0"),
    (("optimize", "example:mlp", "--budget", "0"), "--budget 0"),
])
def test_the_commands_use_them(args, text):
    _one_line_error(runner.invoke(app, list(args)), text)


def test_default_cluster_rule():
    assert default_cluster("zoo:gnmt-2") == "dgx1-v100:2"
    assert default_cluster("zoo:gnmt-8") == "dgx1-v100:8"
    assert default_cluster("example:mlp") == "dgx1-v100:4"
    assert default_cluster("graph.npz") == "dgx1-v100:4"
    assert split_item("zoo:gnmt-2", None) == ("zoo:gnmt-2", "dgx1-v100:2")
    assert split_item("zoo:gnmt-2", "p100:4") == ("zoo:gnmt-2", "p100:4")
    assert split_item("zoo:gnmt-2@p100:3", None) == ("zoo:gnmt-2", "p100:3")


def test_simulate_without_cluster_takes_the_default(tmp_path):
    r = runner.invoke(app, ["simulate", "example:mlp", "--json", str(tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r.json").read_text())["cluster"] == "dgx1-v100:4"


@pytest.mark.parametrize("command", ["simulate", "optimize", "tune"])
def test_help_states_the_default_rule(command):
    cmd = typer.main.get_command(app).commands[command]
    (option,) = [p for p in cmd.params if p.name == "cluster"]
    assert "zoo:gnmt-2 gets dgx1-v100:2" in option.help and option.default is None
