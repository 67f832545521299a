"""Options come from one source: each method's and trainer's dataclass fields (type,
default, help) make the command's ``-p METHOD.KEY=VALUE`` keys and ``train``'s options."""

import dataclasses

import pytest
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.costmodel.config import TrainConfig
from graphopt.optim import get_optimizer, list_optimizers
from graphopt.rl.config import PPOConfig

runner = CliRunner()


@pytest.mark.parametrize("cls", [PPOConfig, TrainConfig] + [
    type(get_optimizer(name)) for name in list_optimizers()])
def test_every_hyperparameter_has_help(cls):
    fields = dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ()
    assert [f.name for f in fields if not f.metadata.get("help")] == []


def test_methods_lists_a_methods_hyperparameters():
    r = runner.invoke(app, ["methods", "sa"])
    assert r.exit_code == 0 and "chains" in r.output and "16" in r.output


def test_bad_value_names_the_option():
    r = runner.invoke(app, ["optimize", "example:mlp", "--methods", "sa", "-p", "sa.chains=foo"])
    assert r.exit_code == 2 and "sa.chains expects int, got 'foo'" in r.output
    assert "Traceback" not in r.output


def test_train_options_are_ppo_fields():
    r = runner.invoke(app, ["train", "--help"], terminal_width=200)
    assert r.exit_code == 0
    for f in dataclasses.fields(PPOConfig):
        assert f"--{f.name.replace('_', '-')}" in r.output
