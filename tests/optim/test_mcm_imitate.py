"""MCM learning from search: targets, the chain-aware imitation loss, resume, the CLI."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.errors import GraphoptError
from graphopt.optim.learned.go.imitate import matched_cross_entropy
from graphopt.optim.learned.mcm.imitate import (chain_cross_entropy, imitate, load_targets,
                                                search_targets)
from graphopt.optim.learned.mcm.method import load_mcm_policy
from graphopt.optim.partition.constraints import valid_partitions

runner = CliRunner()
SOURCES = ("example:layered-40-s0", "example:layered-40-s1")


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mcm-targets")
    search_targets(SOURCES, ("mcm-ring4",), folder, budget=6, repair_seconds=0.05)
    return folder


def test_targets_are_valid_partitions_no_worse_than_the_start_and_resume(targets):
    items = load_targets(targets)
    assert [e["graph"] for _, _, e in items] == ["layered-40-s0", "layered-40-s1"]
    for problem, plan, e in items:
        assert valid_partitions(problem, np.asarray(plan.placement)[None])[0]
        assert e["interval"] <= e["start_interval"] and e["budget"] == 6
    before = (targets / "targets.json").read_text()
    search_targets(SOURCES, ("mcm-ring4",), targets, budget=6, repair_seconds=0.05)
    assert (targets / "targets.json").read_text() == before  # every item done: nothing rerun


def test_chain_loss_is_positional_ordinal_and_ignores_unit_order():
    rng = np.random.default_rng(0)
    z = torch.as_tensor(rng.normal(size=(7, 16)), dtype=torch.float32)
    t, w = rng.integers(0, 4, 7), rng.random(7)
    loss, _ = chain_cross_entropy(z, t, w, 4)
    perm = rng.permutation(7)
    loss_p, _ = chain_cross_entropy(z[torch.as_tensor(perm)], t[perm], w[perm], 4)
    assert float(loss) == pytest.approx(float(loss_p), rel=1e-6)
    # a unit proposed one chip off its target costs less than one three chips off
    one = torch.tensor([[0.0, 6.0, 0.0, 0.0]])
    three = torch.tensor([[0.0, 0.0, 0.0, 6.0]])
    assert chain_cross_entropy(one, np.array([0]), np.ones(1), 4)[0] < \
        chain_cross_entropy(three, np.array([0]), np.ones(1), 4)[0]
    # a pipeline's chips are positional: the stages reversed are not the same partition
    # (GO's matched loss forgives the renumbering; this one does not)
    z = torch.tensor([[0.0, 8.0], [8.0, 0.0]])  # proposes the target's chips swapped
    t, w = np.array([0, 1]), np.array([0.5, 0.5])
    assert float(matched_cross_entropy(z, t, w, 2)[0]) < 0.01
    assert float(chain_cross_entropy(z, t, w, 2)[0]) > 5


def test_imitation_learns_the_targets_and_resumes(targets, tmp_path):
    items = load_targets(targets)
    rows = []
    imitate(items, tmp_path / "a", epochs=8, lr=1e-2, dim=16, progress=rows.append)
    assert rows[-1]["loss"] < rows[0]["loss"] and rows[-1]["accuracy"] > rows[0]["accuracy"]
    # a run stopped after 3 epochs and resumed ends with the same weights
    imitate(items, tmp_path / "b", epochs=3, lr=1e-2, dim=16)
    imitate(items, tmp_path / "b", epochs=8, lr=1e-2, dim=16)
    pa, info = load_mcm_policy(tmp_path / "a")
    pb, _ = load_mcm_policy(tmp_path / "b")
    for (k, va), vb in zip(pa.state_dict().items(), pb.state_dict().values()):
        assert torch.equal(va, vb), k
    assert info["method"] == "mcm-imitate" and len(info["history"]) == 8


def test_cli_targets_imitate_and_finetune(targets, tmp_path):
    r = runner.invoke(app, ["corpus", "mcm-targets", "--out", str(targets), "--sources",
                            ",".join(SOURCES), "--presets", "mcm-ring4", "--budget", "6",
                            "--repair-seconds", "0.05"])
    assert r.exit_code == 0, r.output
    assert "2 targets" in r.output
    r = runner.invoke(app, ["train", "mcm-imitate", str(targets), "--epochs", "2",
                            "--out", str(tmp_path / "im")])
    assert r.exit_code == 0, r.output
    info = json.loads((tmp_path / "im" / "policy.json").read_text())["info"]
    assert info["command"].startswith("graphopt train mcm-imitate") and info["epochs"] == 2
    # PPO continues from the imitation policy on the targets' graphs and presets
    r = runner.invoke(app, ["train", "mcm", "--corpus", str(targets), "--init",
                            str(tmp_path / "im"), "--updates", "2", "--num-samples", "4",
                            "--repair-seconds", "0.05", "--out", str(tmp_path / "ppo")])
    assert r.exit_code == 0, r.output
    info = json.loads((tmp_path / "ppo" / "policy.json").read_text())["info"]
    assert len(info["graphs"]) == 2 and info["graphs"][0].endswith("@mcm-ring4")
    assert info["updates"] == 2 and info["init"] == str(tmp_path / "im")
    r = runner.invoke(app, ["optimize", "example:layered-40-s5", "-c", "mcm-ring4", "--methods",
                            "mcm-finetune", "--budget", "8", "-p",
                            f"mcm-finetune.checkpoint={tmp_path / 'im'}",
                            "-p", "mcm-finetune.num_samples=4", "-p", "mcm-finetune.dim=16"])
    assert r.exit_code == 0, r.output


def test_cli_bad_input_is_one_line(tmp_path):
    r = runner.invoke(app, ["train", "mcm-imitate", str(tmp_path / "none"),
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "mcm-targets" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["corpus", "mcm-targets", "--out", str(tmp_path / "t"),
                            "--presets", "nope8"])
    assert r.exit_code == 2 and "nope8" in r.output and "Traceback" not in r.output


def test_a_pair_without_valid_partition_is_recorded_and_skipped(tmp_path, monkeypatch):
    import graphopt.optim.base as base

    def no_fit(*args, **kwargs):
        raise GraphoptError("op 'emb' needs 981.0 MiB of SRAM; no chip of mcm-ring4 holds it")

    monkeypatch.setattr(base, "optimize", no_fit)
    doc = search_targets(SOURCES[:1], ("mcm-ring4",), tmp_path, budget=6)
    assert "981.0 MiB" in doc["entries"]["layered-40-s0@mcm-ring4"]["error"]
    with pytest.raises(GraphoptError, match="no MCM targets"):
        load_targets(tmp_path)  # nothing to imitate
