"""Issue 37: a kill (or a full disk) at every write of a short training run with
checkpoints and of ``optimize --out``, in process: the k-th ``os.replace`` into the run's
folder raises. Afterwards every file there is a complete version that was written whole
(the previous one or the new one, never a partial), and the same run, started again,
resumes and ends as a run never stopped.

A killed process runs no cleanup: where ``kind`` is ``kill`` the replaced write's
temporary file is left behind as a real kill would leave it (the exception that stands
for the kill is a ``BaseException`` no graphopt code catches).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

from graphopt.errors import WriteError

UPDATES = 2


class Killed(BaseException):
    """The process was killed here."""


class Writes:
    """``os.replace`` counting the replacements into ``folder`` (and below), failing the
    ``k``-th as ``kind`` says, and keeping every version it put in place."""

    def __init__(self, folder: Path, k: int | None = None, kind: str = "kill"):
        self.folder, self.k, self.kind, self.count = folder.resolve(), k, kind, 0
        self.versions: dict[Path, list[bytes]] = {}
        self.real = os.replace

    def __call__(self, src, dst, **kw):
        dst = Path(dst).resolve()
        if self.folder in dst.parents:
            self.count += 1
            if self.count == self.k:
                if self.kind == "kill":
                    if Path(src).name.endswith(".tmp"):  # what the killed write leaves
                        os.link(src, Path(src).with_name(f".{dst.name}.killed.tmp"))
                    raise Killed
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        out = self.real(src, dst, **kw)
        if self.folder in dst.parents:
            self.versions.setdefault(dst, []).append(dst.read_bytes())
        return out


def _check_whole(folder: Path, writes: Writes) -> None:
    """Every file in ``folder`` is the last version put in place under its name."""
    for p in folder.rglob("*"):
        if p.is_file() and not p.name.endswith(".tmp") and p.name != ".graphopt.lock":
            assert p.resolve() in writes.versions, f"{p} was never written whole"
            assert p.read_bytes() == writes.versions[p.resolve()][-1], f"{p} is not whole"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny networks: torch's thread pool only costs time here (60 runs of the trainer)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- a training run with a checkpoint after every update ----------------------------------------------
@pytest.fixture(scope="module")
def prob():
    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import layered_graph
    from graphopt.sim import Problem

    return Problem(layered_graph(3, 2, seed=3), load_cluster("p100:2"))


def _train(prob, folder: Path | None):
    from graphopt.optim.learned.go.env import GOEnv
    from graphopt.optim.learned.go.method import new_policy
    from graphopt.rl.ppo import PPOConfig, train

    policy = new_policy(0, dim=8)
    out = train(policy, [GOEnv(prob, frozenset({"placement"}))],
                PPOConfig(num_samples=2, anneal_lr=False), seed=0, updates=UPDATES,
                checkpoint_dir=None if folder is None else str(folder), checkpoint_every=1,
                progress=False)
    return policy, out


@pytest.fixture(scope="module")
def straight(prob):
    return _train(prob, None)


def _curve(state, envs, path, label):  # the chart, cheaply: one more write of the same writer
    from graphopt._files import atomic_write

    atomic_write(path, lambda f: f.write(json.dumps(state["curve"]).encode()))


#: writes of the run: per save the pending weights, the metadata, the weights, the log and
#: the chart; a save after each update and one at the end
TRAIN_WRITES = 5 * (UPDATES + 1)


@pytest.mark.parametrize("kind", ["kill", "full disk"])
@pytest.mark.parametrize("k", range(1, TRAIN_WRITES + 1))
def test_a_training_run_killed_at_any_write_resumes_as_one_never_stopped(
        prob, straight, tmp_path, monkeypatch, k, kind):
    from graphopt.runs.checkpoint import read_checkpoint

    monkeypatch.setattr("graphopt.rl.ppo._plot", _curve)
    folder = tmp_path / "run"
    writes = Writes(folder, k, kind)
    monkeypatch.setattr(os, "replace", writes)
    with pytest.raises(Killed if kind == "kill" else WriteError):
        _train(prob, folder)
    assert writes.count == k
    _check_whole(folder, writes)
    monkeypatch.setattr(os, "replace", writes.real)
    if (folder / "checkpoint.json").exists():
        meta, _ = read_checkpoint(folder)  # a whole checkpoint: the previous or the new one
        assert 1 <= meta["state"]["update"] <= UPDATES
    policy, out = _train(prob, folder)  # the same command again
    want_policy, want = straight
    assert out["updates"] == UPDATES and not out["interrupted"]
    for a, b in zip(policy.parameters(), want_policy.parameters()):
        assert torch.equal(a, b)
    assert [r["charts/best_ratio"] for r in out["log"]] == \
        [r["charts/best_ratio"] for r in want["log"]]
    assert sorted(p.name for p in folder.iterdir()) == [
        "checkpoint.json", "curve.png", "log.csv", "weights.safetensors"], \
        "a killed save's leftovers were not removed"


def test_the_table_counts_every_write(prob, tmp_path, monkeypatch):
    monkeypatch.setattr("graphopt.rl.ppo._plot", _curve)
    writes = Writes(tmp_path / "run")
    monkeypatch.setattr(os, "replace", writes)
    _train(prob, tmp_path / "run")
    assert writes.count == TRAIN_WRITES


# -- optimize --out: the report writer, over a previous run's files ----------------------------------
@pytest.fixture(scope="module")
def results():
    import dataclasses

    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.optim.compare import compare
    from graphopt.sim import Problem

    prob = Problem(mlp_training_graph(layers=1, hidden=8, batch=2), load_cluster("p100:2"))
    found = compare(prob, ["single", "expert"])

    def run(n):  # run n's results: its plans say so
        return [dataclasses.replace(r, plan=r.plan.replace(meta={**r.plan.meta, "run": n}))
                for r in found]
    return prob, run


def _chart(problem, result, path, title=""):  # the Gantt chart, cheaply, by the same writer
    from graphopt._files import atomic_write

    atomic_write(path, lambda f: f.write(f"{title}: {result.step_time!r}".encode()))


#: per method a plan, a trace and a chart, and the report: each written, then put in place
OPTIMIZE_WRITES = 2 * (2 * 3 + 1)


def _check_report(out: Path) -> None:
    """A report in ``out`` and every plan it names are one run's."""
    if not (out / "report.json").exists():
        return
    run = json.loads((out / "report.json").read_text())["run"]
    for row in json.loads((out / "report.json").read_text())["rows"]:
        plan = json.loads((out / row["method"] / "plan.json").read_text())
        assert plan["meta"]["run"] == run, "a report beside another run's plans"


@pytest.mark.parametrize("kind", ["kill", "full disk"])
@pytest.mark.parametrize("k", range(1, OPTIMIZE_WRITES + 1))
def test_optimize_out_killed_at_any_write_keeps_one_whole_run(results, tmp_path, monkeypatch,
                                                               k, kind):
    from graphopt.optim.compare import STAGING, output_paths, write_outputs

    prob, run = results
    out = tmp_path / "out"
    writes = Writes(tmp_path, None, kind)
    monkeypatch.setattr("graphopt.viz.gantt", _chart)
    monkeypatch.setattr(os, "replace", writes)
    write_outputs(prob, run(1), out, {"run": 1})  # the previous run, whole
    writes.k = writes.count + k
    with pytest.raises(Killed if kind == "kill" else WriteError) as err:
        write_outputs(prob, run(2), out, {"run": 2})
    if kind == "full disk":  # one line naming the file in --out, not the staging folder
        assert STAGING not in str(err.value) and str(out) in str(err.value)
    _check_whole(out, writes)
    _check_report(out)
    if k <= OPTIMIZE_WRITES // 2:  # failed while writing: the previous run is untouched
        assert json.loads((out / "report.json").read_text())["run"] == 1
    monkeypatch.setattr(os, "replace", writes.real)
    write_outputs(prob, run(2), out, {"run": 2})  # the same command again
    _check_report(out)
    assert json.loads((out / "report.json").read_text())["run"] == 2
    assert sorted(p for p in out.rglob("*") if p.is_file()) == sorted(
        output_paths(out, ["single", "expert"])), "a killed run's leftovers were not removed"


def test_optimize_writes_are_counted(results, tmp_path, monkeypatch):
    from graphopt.optim.compare import write_outputs

    prob, run = results
    writes = Writes(tmp_path)
    monkeypatch.setattr("graphopt.viz.gantt", _chart)
    monkeypatch.setattr(os, "replace", writes)
    write_outputs(prob, run(1), tmp_path / "out", {"run": 1})
    assert writes.count == OPTIMIZE_WRITES


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_policy_save_killed_at_any_write_loads_the_old_or_the_new_policy(tmp_path, monkeypatch, k):
    from graphopt.runs.checkpoint import load_policy, save_policy

    def build(config):
        return torch.nn.Linear(2, config["out"])

    old, new = torch.nn.Linear(2, 3), torch.nn.Linear(2, 3)
    save_policy(tmp_path, old, {"out": 3}, {"which": "old"})
    writes = Writes(tmp_path, k)
    monkeypatch.setattr(os, "replace", writes)
    with pytest.raises(Killed):
        save_policy(tmp_path, new, {"out": 3}, {"which": "new"})
    monkeypatch.setattr(os, "replace", writes.real)
    module, info = load_policy(tmp_path, build)
    want = new if k == 3 else old  # the metadata (the 2nd write, done once the 3rd is reached) is the commit
    assert info["which"] == ("new" if k == 3 else "old")
    assert torch.equal(module.weight, want.weight)


#: temporary files in a run's folder: (name, whether the next save removes it). A trainer
#: removes only what a killed write of its own files left (issue 49: it removed every
#: ``.*.tmp``, another tool's too).
STALE = [(".checkpoint.json.k1.tmp", True), (".weights.safetensors.k2.tmp", True),
         ("..weights.safetensors.pending.k3.tmp", True), (".log.csv.k4.tmp", True),
         (".curve.png.k5.tmp", True), (".policy.json.k6.tmp", True),
         (".policy.safetensors.k7.tmp", True), ("..policy.safetensors.pending.k8.tmp", True),
         (".notes.md.abc.tmp", False), (".report.json.x.tmp", False), (".plan.json.1.tmp", False),
         (".checkpoint.json.tmp", False), ("checkpoint.json.k9.tmp", False),
         (".graphopt.lock.z.tmp", False), (".targets.json.q.tmp", False)]


@pytest.mark.parametrize("name, removed", STALE, ids=[n for n, _ in STALE])
def test_a_save_removes_only_its_own_stale_temporaries(tmp_path, name, removed):
    from graphopt.runs.checkpoint import save_checkpoint

    (tmp_path / name).write_text("left by a kill")
    net = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path, {"a": 1}, {"net": net}, torch.optim.SGD(net.parameters(), lr=0.1),
                    None, {"update": 1})
    assert (tmp_path / name).exists() != removed
    assert (tmp_path / "checkpoint.json").is_file()
