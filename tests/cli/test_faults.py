"""Issue 37, faults and hostile inputs: a full disk at each writer, a kill between a
checkpoint's two files, SIGTERM and SIGHUP during a search, two runs into one folder, and
inputs that asked for unbounded memory or time. Each case ends in one line and exit 2, or
in the right recovery; none leaves a partial file where a whole one was promised.

The full disk is ``ulimit -f`` in a subprocess (Python ignores SIGXFSZ, so a write past
the limit fails with EFBIG as one on a full disk fails with ENOSPC), or ``os.replace``
raising ENOSPC in process.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from graphopt._files import atomic_write
from graphopt.errors import GraphFormatError, GraphoptError, WriteError

SRC = str(Path(__file__).parents[2] / "src")
LIMIT = 64  # bytes: every output below is larger, a lock file's pid is not


def graphopt(*argv: str, fsize: int | None = None, **kw) -> subprocess.CompletedProcess:
    """Run the ``graphopt`` command (its real entry point), under ``ulimit -f fsize``."""
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    kw = kw if "stdout" in kw else {"capture_output": True, **kw}
    return subprocess.run([sys.executable, "-m", "graphopt.cli", *argv],
                          text=True, preexec_fn=limit, env=env, timeout=300, **kw)


def files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    """A plan of example:mlp, for the writers that take one."""
    out = tmp_path_factory.mktemp("plan")
    r = graphopt("optimize", "example:mlp", "-c", "p100:2", "--methods", "expert", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    return out / "expert" / "plan.json"


# -- a full disk at every writer: one line naming the file, exit 2, nothing left -----------------
FULL_DISK = [  # (argv, the file named); {d} the output folder, {plan} a plan of example:mlp
    ("optimize example:mlp -c p100:2 --methods single,expert --out {d}/o", "{d}/o/single/plan.json"),
    ("import example:mlp -o {d}/g.npz", "{d}/g.npz"),
    ("import example:mlp -o {d}/g.json", "{d}/g.json"),
    ("simulate example:mlp -c p100:2 --json {d}/s.json", "{d}/s.json"),
    ("simulate example:mlp -c p100:2 --trace {d}/t.json", "{d}/t.json"),
    ("simulate example:mlp -c p100:2 --gantt {d}/g.png", "{d}/g.png"),
    ("profile example:mlp --repeats 1 -o {d}/p.json", "{d}/p.json"),
    ("export {plan} -g example:mlp -f device-map -o {d}/m.json", "{d}/m.json"),
    ("train --corpus example:mlp@p100:2 --updates 1 --out {d}/t", "{d}/t/weights.safetensors"),
]


@pytest.mark.parametrize("argv, named", FULL_DISK, ids=[a.split(" -")[0] for a, _ in FULL_DISK])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path, plan, argv, named):
    r = graphopt(*argv.format(d=tmp_path, plan=plan).split(), fsize=LIMIT)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert out.strip().splitlines()[-1] == \
        f"error: {named.format(d=tmp_path)}: cannot write (File too large)", out
    assert files(tmp_path) in ([], ["o/.graphopt.lock"], ["t/.graphopt.lock"]), files(tmp_path)


def test_atomic_write_on_a_full_disk_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "plan.json"
    target.write_text("old")

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr("graphopt._files.os.replace", full)
    with pytest.raises(WriteError) as err:
        atomic_write(target, lambda f: f.write(b"new"))
    assert str(err.value) == f"{target}: cannot write (No space left on device)"
    assert isinstance(err.value, OSError) and err.value.errno == errno.ENOSPC  # caches still tolerate it
    assert files(tmp_path) == ["plan.json"] and target.read_text() == "old"


def test_optimize_outputs_are_all_or_nothing(tmp_path, monkeypatch):
    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.optim.compare import compare, write_outputs
    from graphopt.sim import Problem

    prob = Problem(mlp_training_graph(layers=1, hidden=8, batch=2), load_cluster("p100:2"))
    results = compare(prob, ["single", "expert"])
    real, calls = __import__("graphopt.viz", fromlist=["gantt"]).gantt, []

    def gantt_then_full(*args, **kw):  # the disk fills at the second method's chart
        calls.append(1)
        if len(calls) == 2:
            raise WriteError(f"{args[2]}: cannot write (No space left on device)")
        return real(*args, **kw)
    monkeypatch.setattr("graphopt.viz.gantt", gantt_then_full)
    with pytest.raises(WriteError):
        write_outputs(prob, results, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- a kill between a checkpoint's two files ------------------------------------------------------
def test_a_torn_checkpoint_is_refused_and_stale_temporaries_are_removed(tmp_path):
    from graphopt.runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

    def saved(folder, step):
        net = torch.nn.Linear(2, 2)
        opt = torch.optim.Adam(net.parameters())
        net(torch.ones(1, 2)).sum().backward()
        opt.step()
        return save_checkpoint(folder, {"lr": 1}, {"net": net}, opt, None, {"update": step})

    old, new = saved(tmp_path / "old", 50), saved(tmp_path / "new", 100)
    # killed after the weights' rename, before the metadata's: update-100 weights, update-50 metadata
    (old / "weights.safetensors").write_bytes((new / "weights.safetensors").read_bytes())
    (old / ".checkpoint.json.abc123.tmp").write_text('{"half')
    net = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match="torn checkpoint: weights.safetensors is not the "
                                              "file checkpoint.json was saved with"):
        load_checkpoint(old, {"lr": 1}, {"net": net}, torch.optim.Adam(net.parameters()), None)
    saved(old, 51)  # a new save makes it whole and removes the killed write's leftovers
    assert files(old) == ["checkpoint.json", "weights.safetensors"]
    assert load_checkpoint(old, {"lr": 1}, {"net": net}, torch.optim.Adam(net.parameters()),
                           None) == {"update": 51}


# -- signals and a second run ---------------------------------------------------------------------
def _wait_for_search(p: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while len(os.listdir(f"/proc/{p.pid}/task")) <= 4 and time.monotonic() < deadline:
        time.sleep(0.2)  # numba's worker threads start with the simulator
    time.sleep(3.0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_in_optimize_save_the_best_plan_like_ctrl_c(tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "optimize", "example:layered-300",
                          "-c", "p100:2", "--methods", "single,sa,metis", "--budget", "1000000000",
                          "--out", str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONPATH": SRC})
    _wait_for_search(p)
    p.send_signal(sig)
    out, _ = p.communicate(timeout=120)
    assert "Traceback" not in out and p.returncode == 130, out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] and "metis" not in [r["method"] for r in report["rows"]]
    assert (tmp_path / "single" / "plan.json").is_file()


def test_a_second_run_into_one_folder_is_refused(tmp_path):
    from graphopt.cli.locks import lock_folder

    held = lock_folder(tmp_path / "out")
    with pytest.raises(GraphoptError, match=f"another graphopt run \\(pid {os.getpid()}\\)"):
        lock_folder(tmp_path / "out")
    r = graphopt("optimize", "example:mlp", "-c", "p100:2", "--methods", "single",
                 "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stdout.strip().splitlines() == [
        f"error: --out {tmp_path}/out: another graphopt run (pid {os.getpid()}) is writing "
        "there; wait for it to end or choose another folder"], r.stdout + r.stderr
    held.close()
    lock_folder(tmp_path / "out").close()  # free again once the first run ends


def test_train_after_ctrl_c_says_so_and_exits_130(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "train", "--corpus",
                          "example:mlp@p100:2", "--updates", "100000",
                          "--out", str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": SRC})
    _wait_for_search(p)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in out, out
    assert "interrupted after update" in out and "resumes the run" in out, out
    assert (tmp_path / "checkpoint.json").is_file()


def test_the_learning_rate_anneals_by_updates_not_the_clock():
    # a --minutes bound beside --updates used to decay the rate by elapsed time, so a run
    # stopped by it and resumed learned otherwise than one that never stopped
    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import layered_graph
    from graphopt.optim.learned.go.method import new_policy
    from graphopt.optim.learned.go.env import GOEnv
    from graphopt.rl.ppo import PPOConfig, train
    from graphopt.sim import Problem

    prob = Problem(layered_graph(4, 3, seed=0), load_cluster("p100:2"))
    cfg = PPOConfig(num_samples=4, anneal_lr=True)
    env = GOEnv(prob, frozenset({"placement"}))
    timed_policy, straight_policy = new_policy(0, dim=16), new_policy(0, dim=16)
    timed = train(timed_policy, [env], cfg, seed=0, updates=4, seconds=1e6, progress=False)
    straight = train(straight_policy, [env], cfg, seed=0, updates=4, progress=False)
    assert [r["charts/learning_rate"] for r in timed["log"]] == \
        [r["charts/learning_rate"] for r in straight["log"]] == [cfg.lr * (1 - k / 4) for k in range(4)]
    for a, b in zip(timed_policy.parameters(), straight_policy.parameters()):
        assert torch.equal(a, b)


# -- inputs that asked for unbounded memory or time -----------------------------------------------
@pytest.mark.parametrize("big", [6 * 10**8, 10**12, 2**63 - 1])
def test_huge_colocation_ids_are_renumbered_not_allocated(tmp_path, big):
    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.ir.io import graph_to_dict, load_graph
    from graphopt.optim import Budget, optimize
    from graphopt.sim import Problem

    g = graph_to_dict(mlp_training_graph(layers=2, hidden=8, batch=2))
    groups = sorted({n["coloc"] for n in g["nodes"] if n["coloc"] >= 0})
    for n in g["nodes"]:
        if n["coloc"] >= 0:
            n["coloc"] = big - groups.index(n["coloc"])  # the largest id 2^63-1: no overflow
    (tmp_path / "g.json").write_text(json.dumps(g))
    graph = load_graph(tmp_path / "g.json")
    assert sorted(set(graph.coloc.tolist()) - {-1}) == list(range(len(groups)))
    prob = Problem(graph, load_cluster("p100:2"))
    for method in ("m-etf", "heft", "sa"):
        plan, _ = optimize(prob, method, budget=Budget(evals=50))
        grouped = graph.coloc >= 0
        for c in set(graph.coloc[grouped].tolist()):  # each group stays on one device
            assert len(set(plan.placement[graph.coloc == c].tolist())) == 1


def test_profile_honours_its_time_limit_whatever_the_repeats():
    from graphopt.cost.profile import profile_graph
    from graphopt.ir.generate import mlp_training_graph

    start = time.perf_counter()
    p = profile_graph(mlp_training_graph(layers=1, hidden=8, batch=4), repeats=10**9,
                      time_limit=0.5, progress=False)
    assert time.perf_counter() - start < 5 and p.meta["repeats_cut"] == 1 and len(p.entries) == 1


def test_a_tpugraphs_file_declaring_millions_of_nodes_is_refused_unread(tmp_path):
    from graphopt.errors import GraphFormatError
    from graphopt.frontends.tpugraphs.npz import load_tpugraphs_npz

    n = 6_000_000
    np.savez_compressed(tmp_path / "big.npz", node_feat=np.zeros((n, 1), np.float32),
                        node_opcode=np.zeros(n, np.uint8), edge_index=np.zeros((0, 2), np.int64),
                        config_runtime=np.ones(1), node_config_feat=np.zeros((1, 0, 18), np.float32),
                        node_config_ids=np.zeros(0, np.int64))
    assert (tmp_path / "big.npz").stat().st_size < 100_000
    start = time.perf_counter()
    with pytest.raises(GraphFormatError, match="'node_feat' declares 6,000,000 rows, more than "
                                               "the 1,000,000"):
        load_tpugraphs_npz(tmp_path / "big.npz")
    assert time.perf_counter() - start < 1


def test_a_cost_model_file_without_configurations_is_one_line(tmp_path):
    from graphopt.costmodel.data import CostModelError, load_dataset

    np.savez(tmp_path / "none.npz", node_feat=np.zeros((3, 140), np.float32),
             node_opcode=np.full(3, 63, np.uint8), edge_index=np.array([[1, 0], [2, 1]]),
             config_runtime=np.zeros(0), node_config_feat=np.zeros((0, 2, 18), np.float32),
             node_config_ids=np.array([0, 1]))
    with pytest.raises(CostModelError, match="none.npz: no configurations"):
        load_dataset(tmp_path / "none.npz")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) >= 64, reason="64 workers fit this machine")
def test_calibrate_takes_at_most_a_worker_per_core(tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    r = CliRunner().invoke(app, ["calibrate", "--devices", "cpu:64", "-o", str(tmp_path / "c.toml")])
    assert r.exit_code == 2 and "calibration measures one worker per core" in r.output, r.output
    assert not (tmp_path / "c.toml").exists()
    r = CliRunner().invoke(app, ["calibrate", "--help"], terminal_width=400)
    assert "at most one per core this machine gives graphopt" in " ".join(
        r.output.replace("│", " ").split()), r.output


def _sigint_default() -> None:
    """SIGINT as a terminal's foreground process has it: a suite started in the
    background of a shell (``make test &``) inherits it ignored, and the child then
    never sees the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGINT, True),
                                        (signal.SIGHUP, False)],
                         ids=["SIGTERM", "Ctrl-C", "SIGHUP"])
def test_a_signal_to_calibrate_is_one_line_without_worker_tracebacks(tmp_path, sig, group):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it), SIGTERM or SIGHUP
    while calibrate's workers run: one line, exit 130, no worker left behind (their
    tracebacks of a broken pipe were 90 lines)."""
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "calibrate", "--devices", "cpu:2",
                          "-o", str(tmp_path / "c.toml")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**os.environ, "PYTHONPATH": SRC}, preexec_fn=_sigint_default)
    deadline = time.monotonic() + 60
    while len(_children(p.pid)) < 3 and time.monotonic() < deadline:  # a tracker, 2 workers
        time.sleep(0.2)
    workers = _children(p.pid)
    time.sleep(4.0)  # the workers import torch, then measure
    os.killpg(p.pid, sig) if group else p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert (p.returncode, err) == (130, "graphopt: interrupted\n"), out + err
    assert not (tmp_path / "c.toml").exists()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{w}").exists() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{w}").exists() for w in workers)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_train_regal_after_a_signal_says_so_and_exits_130(tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "train", "regal", "--corpus",
                          "layered:4x3:0", "--updates", "100000", "--samples", "2", "--evals", "20",
                          "--dim", "8", "--out", str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": SRC})
    _wait_for_search(p)
    p.send_signal(sig)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 130 and "Traceback" not in out, out
    assert "interrupted after update" in out and "resumes the run" in out, out
    assert (tmp_path / "checkpoint.json").is_file() and (tmp_path / "policy.json").is_file()


def test_a_run_that_failed_before_any_result_leaves_no_folder_it_made(tmp_path):
    """A folder this run made and wrote nothing in but its lock is removed (and the folders
    above it it made); a folder that was there stays; in process the lock is released
    when the command ends (Typer runs commands on its own copy of click)."""
    from typer.testing import CliRunner

    from graphopt.cli import app
    from graphopt.cli.locks import lock_folder

    bad = ["optimize", "example:layered-0", "-c", "p100:2", "--methods", "single", "--out"]
    r = graphopt(*bad, str(tmp_path / "new" / "out"))
    assert r.returncode == 2 and "example:layered-0" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "new").exists()
    (tmp_path / "there").mkdir()
    r = CliRunner().invoke(app, [*bad, str(tmp_path / "there" / "out")])
    assert r.exit_code == 2 and files(tmp_path) == [] and (tmp_path / "there").is_dir()
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("mine")
    r = CliRunner().invoke(app, [*bad, str(tmp_path / "kept")])
    assert r.exit_code == 2 and files(tmp_path / "kept") == ["notes.txt"]  # no lock left
    r = graphopt(*bad, str(tmp_path / "kept"))  # the same through the real entry point
    assert r.returncode == 2 and files(tmp_path / "kept") == ["notes.txt"], r.stdout + r.stderr
    lock_folder(tmp_path / "kept").close()  # released: free again
    r = CliRunner().invoke(app, ["optimize", "example:mlp", *bad[2:], str(tmp_path / "ok")])
    assert r.exit_code == 0 and "single/plan.json" in files(tmp_path / "ok"), r.output
    assert ".graphopt.lock" not in files(tmp_path / "ok")  # a run that ended leaves no lock


def test_a_lock_file_removed_by_the_run_that_held_it_is_not_taken_over(tmp_path, monkeypatch):
    """The ending run removes its lock file while holding it; a run that had opened that
    file just before gets its lock only once it is gone, and must take a new file (else it
    and a third run that made the new one would both write the folder)."""
    import fcntl

    from graphopt.cli import locks

    (tmp_path / locks.LOCK_FILE).write_text("1\n")
    real_flock, calls = fcntl.flock, []

    def flock(f, op):  # the holder ends between our open and our flock: its file is gone
        if not calls:
            os.unlink(tmp_path / locks.LOCK_FILE)
        calls.append(op)
        return real_flock(f, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    held = locks.lock_folder(tmp_path)
    assert len(calls) == 2 and locks._same_file(held, tmp_path / locks.LOCK_FILE)
    held.close()


# -- values that mean nothing: a damaged archive, sizes past int64, a reshape that adds
# elements, format versions no graphopt wrote. Each is one line naming the file and the
# field (node, tensor or member), exit 2.
def _cli(*argv: str):
    from typer.testing import CliRunner

    from graphopt.cli import app

    r = CliRunner().invoke(app, list(argv), env={"COLUMNS": "400"})
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and "Traceback" not in r.output and len(lines) == 1, r.output
    return lines[0]


def test_a_flipped_bit_in_a_pt2_is_refused_by_the_zip_crc(tmp_path):
    import zipfile

    good, bad = tmp_path / "good.pt2", tmp_path / "bad.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(8, 4), (torch.randn(2, 8),)), good)
    data = bytearray(good.read_bytes())
    k = data.index(b"aten.linear")
    data[k + 2] ^= 0x01  # "aten" becomes "atdn": another op, if it were read
    bad.write_bytes(bytes(data))
    with zipfile.ZipFile(bad) as z:
        member = z.testzip()
    assert member is not None and member.endswith("models/model.json")
    assert _cli("info", str(bad)) == (f"error: {bad}: member {member} is corrupt (its CRC-32 does "
                                      "not match the archive's); the file was damaged")


def _onnx_file(path: Path, x_dims, w_dims, reshape_to=None) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f, x_dims)
    if reshape_to is None:
        w = TensorProto(name="w", data_type=f, dims=w_dims)
        nodes, inits = [helper.make_node("Add", ["x", "w"], ["y"], name="add")], [w]
    else:
        s = numpy_helper.from_array(np.array(reshape_to, np.int64), "s")
        nodes, inits = [helper.make_node("Reshape", ["x", "s"], ["y"], name="resh")], [s]
    nodes.append(helper.make_node("Relu", ["y"], ["z"], name="relu"))
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("z", f, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_uint64_dimensions_are_refused_not_read_as_minus_one(tmp_path):
    """A size of 2^64-1 written unsigned has the bytes of int64 -1: every reader of sizes
    refuses it (or a negative one) naming the file and the node or tensor."""
    from graphopt.frontends import tpugraphs as tg
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.ir.io import graph_to_dict, save_graph
    from tests.frontends.test_tpugraphs import _example_module, _module, _shape

    onnx_in = _onnx_file(tmp_path / "in.onnx", [-1, 4], [2, 4])  # dim_value is int64
    assert _cli("info", str(onnx_in)) == (
        f"error: {onnx_in}: tensor 'x' (graph input) has shape [-1, 4]: a size must be 0 or more "
        "(one over 2^63-1, written unsigned, reads as negative)")
    onnx_w = _onnx_file(tmp_path / "w.onnx", [2, 4], [-1, 4])
    assert "tensor 'w' (initializer) has shape [-1, 4]" in _cli("info", str(onnx_w))

    g = mlp_training_graph(layers=1, hidden=8, batch=2)
    save_graph(g, tmp_path / "g.npz")
    with np.load(tmp_path / "g.npz") as z:
        arrays = dict(z)
    arrays["shape"] = arrays["shape"].astype(np.uint64)
    arrays["shape"][0, 0] = 2**64 - 1
    np.savez(tmp_path / "u64.npz", **arrays)
    assert _cli("info", str(tmp_path / "u64.npz")) == (
        f"error: {tmp_path}/u64.npz: array 'shape': node 0 ('x') holds 18,446,744,073,709,551,615, "
        "more than 2^63-1 (an unsigned size that would read as negative)")
    doc = graph_to_dict(g)
    doc["nodes"][0]["shape"] = [2**64 - 1, 8]
    (tmp_path / "u64.json").write_text(json.dumps(doc))
    assert _cli("info", str(tmp_path / "u64.json")) == (
        f"error: {tmp_path}/u64.json: node 0 ('x') has shape [18446744073709551615, 8]; every "
        "size must be 1 to 2^63-1")

    pytest.importorskip("google.protobuf")
    comps = _example_module()
    comps[0][3][1].update(shape=_shape(-1, 16))
    module = _module(comps)
    assert b"\xff" * 9 + b"\x01" in module  # int64 -1 is the varint of the uint64 2^64-1
    with pytest.raises(GraphFormatError, match=r"m.pb: module 'm', computation 'main', instruction "
                                               r"'p1': shape has a negative dimension \[-1, 16\]"):
        tg.hlo_module_to_graph(module, source="m.pb")

    from tests.costmodel.conftest import write_tile
    feat = np.zeros((6, 140), np.float32)
    feat[:, 13], feat[:, 21] = 1, 4
    feat[3, 22] = 1.8e19  # a uint64 dimension stored as a float feature
    tile = write_tile(tmp_path / "t.npz", node_feat=feat)
    assert _cli("info", str(tile)) == (
        f"error: {tile}: key 'node_feat': node 3 has dimension 1 = 1.8e+19 (column 22); a size "
        "must be 0 to 2^63-1")


def test_an_onnx_reshape_that_changes_the_element_count_is_refused(tmp_path):
    bad = _onnx_file(tmp_path / "r.onnx", [8], None, reshape_to=[9])
    assert _cli("info", str(bad)) == (
        f"error: {bad}: node 'resh' (Reshape) turns 'x' of shape [8] (8 elements) into 'y' of "
        "shape [9] (9 elements); a Reshape keeps the element count")
    ok = _onnx_file(tmp_path / "ok.onnx", [8], None, reshape_to=[2, 4])
    from graphopt.frontends.onnx import from_onnx
    assert from_onnx(ok).shape_of(2) == (2, 4)


@pytest.mark.parametrize("version", [-7, -5, 0, True, 1.0, 2])
def test_format_versions_no_graphopt_wrote_are_refused(tmp_path, version):
    from graphopt.corpus.build import load_manifest
    from graphopt.cost.profile import Profile
    from graphopt.ir.generate import mlp_training_graph
    from graphopt.ir.io import graph_to_dict
    from graphopt.runs.checkpoint import CheckpointError, load_policy, read_checkpoint, save_policy

    doc = graph_to_dict(mlp_training_graph(layers=1, hidden=8, batch=2))
    (tmp_path / "g.json").write_text(json.dumps({**doc, "version": version}))
    got = _cli("info", str(tmp_path / "g.json"))
    assert got.startswith(f"error: {tmp_path}/g.json: ") and "version" in got, got
    plan = {"format": "graphopt.plan", "version": version, "placement": [0] * len(doc["nodes"])}
    (tmp_path / "p.json").write_text(json.dumps(plan))
    got = _cli("simulate", "example:mlp", "-c", "p100:2", "--plan", str(tmp_path / "p.json"))
    assert got.startswith(f"error: {tmp_path}/p.json: ") and "version" in got, got

    net = torch.nn.Linear(2, 2)
    folder = save_policy(tmp_path / "pol", net, {"dim": 2}, {})
    meta = json.loads((folder / "policy.json").read_text())
    (folder / "policy.json").write_text(json.dumps({**meta, "version": version}))
    with pytest.raises(CheckpointError, match=f"policy.json: field 'version' is {version!r}"):
        load_policy(folder, lambda cfg: torch.nn.Linear(2, 2))
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "checkpoint.json").write_text(json.dumps(
        {"format": "graphopt.rl.checkpoint", "version": version}))
    (tmp_path / "ck" / "weights.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match=f"checkpoint.json: field 'version' is {version!r}"):
        read_checkpoint(tmp_path / "ck")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "manifest.json").write_text(json.dumps(
        {"format": "graphopt-corpus", "version": version, "items": {}}))
    with pytest.raises(GraphoptError, match="manifest.json: field 'version'"):
        load_manifest(tmp_path / "c")
    (tmp_path / "prof.json").write_text(json.dumps(
        {"format": "graphopt.profile", "version": version, "device_kind": "cpu", "entries": []}))
    with pytest.raises(GraphoptError, match=f"prof.json: version {version!r} is not supported"):
        Profile.load(tmp_path / "prof.json")


# -- issue 49: a lock file that is not a file of its own; outputs that are not regular files;
# every --out claimed. Each hostile case is one line and exit 2, or a write in place.
LOCK_PATHS = {  # what stands where the lock file goes -> what the one line says
    "live link": "is a symbolic link",
    "dangling link": "is a symbolic link",
    "link to a folder": "is a symbolic link",
    "link to /dev/null": "is a symbolic link",
    "link to itself": "is a symbolic link",
    "folder": "is a folder",
    "fifo": "not a regular file",
    "socket": "cannot open",
    "hard link": "has 2 names (a hard link)",
}


def _hostile_lock(kind: str, out: Path, victim: Path) -> Path:
    import socket

    lock = out / ".graphopt.lock"
    if kind == "live link":
        lock.symlink_to(victim)
    elif kind == "dangling link":
        lock.symlink_to(out.parent / "made-through-the-link")
    elif kind == "link to a folder":
        lock.symlink_to(out.parent)
    elif kind == "link to /dev/null":
        lock.symlink_to("/dev/null")
    elif kind == "link to itself":
        lock.symlink_to(lock)
    elif kind == "folder":
        lock.mkdir()
    elif kind == "fifo":
        os.mkfifo(lock)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(lock))
        s.close()
    elif kind == "hard link":
        os.link(victim, lock)
    return lock


@pytest.mark.parametrize("kind", LOCK_PATHS)
def test_a_lock_path_that_is_not_a_file_of_its_own_is_refused(tmp_path, kind):
    from graphopt.cli.locks import lock_folder

    victim, out = tmp_path / "victim.txt", tmp_path / "out"
    victim.write_text("mine")
    out.mkdir()
    lock = _hostile_lock(kind, out, victim)
    before = os.lstat(lock)
    with pytest.raises(GraphoptError) as err:
        lock_folder(out)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"--out {out}: .graphopt.lock") and \
        LOCK_PATHS[kind] in msg, msg
    assert victim.read_text() == "mine" and not (tmp_path / "made-through-the-link").exists()
    after = os.lstat(lock)  # left as it was: not replaced, not written
    assert (after.st_ino, after.st_mode, after.st_size) == (before.st_ino, before.st_mode, before.st_size)


@pytest.mark.parametrize("kind", ["live link", "dangling link", "folder", "fifo", "hard link"])
def test_a_hostile_lock_path_through_the_command_line_is_one_line(tmp_path, kind):
    victim, out = tmp_path / "victim.txt", tmp_path / "out"
    victim.write_text("mine")
    out.mkdir()
    _hostile_lock(kind, out, victim)
    line = _cli("optimize", "example:mlp", "-c", "p100:2", "--methods", "single", "--out", str(out))
    assert line.startswith(f"error: --out {out}: .graphopt.lock") and LOCK_PATHS[kind] in line, line
    assert victim.read_text() == "mine" and not (out / "single").exists()


def _fifo_reader(path: Path, got: list):
    """A reader of the pipe ``path``, there before any writer: appends what it reads to
    ``got`` until the writer closes."""
    import threading

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # there at once, before any writer
    os.set_blocking(fd, True)

    def read() -> None:
        chunks, deadline = [], time.time() + 60
        while time.time() < deadline:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                chunks.append(chunk)
            elif chunks:  # the writer closed
                break
            else:  # no writer yet: a pipe without one reads as its end
                time.sleep(0.01)
        os.close(fd)
        got.append(b"".join(chunks))
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


@pytest.fixture(scope="module")
def export_plan(tmp_path_factory) -> Path:
    """A plan of example:mlp (every op on device 0), for ``export``."""
    from graphopt.frontends import load_source
    from graphopt.sim import Plan

    path = tmp_path_factory.mktemp("xplan") / "plan.json"
    Plan(placement=np.zeros(load_source("example:mlp").num_nodes, np.int64)).save(path)
    return path


#: writers given a name that is not a regular file: (argv with {out}, what the output holds)
SPECIAL_WRITERS = {
    "export": ("export {plan} -g example:mlp -f device-map -o {out}", b'": 0'),
    "simulate --json": ("simulate example:mlp -c p100:2 --json {out}", b'"step_time"'),
    "simulate --trace": ("simulate example:mlp -c p100:2 --trace {out}", b'"traceEvents"'),
}
#: names that are not regular files, made by the test: how the write must end
SPECIAL_TARGETS = ["/dev/fd/N of a log opened to append", "/proc/self/fd/N", "a link to /dev/fd/N",
                   "/dev/null (a link to it)", "a fifo with a reader", "a terminal (pty)"]


@pytest.mark.parametrize("target", SPECIAL_TARGETS)
@pytest.mark.parametrize("writer", SPECIAL_WRITERS)
def test_a_writer_writes_in_place_to_what_is_not_a_regular_file(tmp_path, export_plan, writer, target):
    argv, holds = SPECIAL_WRITERS[writer]
    log = tmp_path / "log"
    log.write_bytes(b"earlier line\n")
    inode, got, reader, master = log.stat().st_ino, [], None, None
    f = open(log, "ab")  # noqa: SIM115 -- a shell's >> log
    try:
        if target.startswith("/dev/fd"):
            out = f"/dev/fd/{f.fileno()}"
        elif target.startswith("/proc"):
            out = f"/proc/self/fd/{f.fileno()}"
        elif target.startswith("a link to /dev/fd"):
            out = str(tmp_path / "out.json")
            os.symlink(f"/dev/fd/{f.fileno()}", out)
        elif target.startswith("/dev/null"):
            out = str(tmp_path / "null.json")
            os.symlink("/dev/null", out)
        elif target.startswith("a fifo"):
            out = str(tmp_path / "fifo")
            os.mkfifo(out)
            reader = _fifo_reader(Path(out), got)
        else:
            master, slave = os.openpty()
            out = os.ttyname(slave)
            os.set_blocking(master, False)
        from typer.testing import CliRunner

        from graphopt.cli import app

        r = CliRunner().invoke(app, argv.format(plan=export_plan, out=out).split())
        assert r.exit_code == 0, r.output + repr(r.exception)
    finally:
        f.close()
    if reader is not None:
        reader.join(10)
        assert holds in got[0]
    elif master is not None:
        seen = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(master, 1 << 16):
                seen += chunk
        assert holds in seen and Path(out).is_char_device()  # written, and still the terminal
        os.close(master)
        os.close(slave)
    elif target.startswith("/dev/null"):
        assert Path("/dev/null").is_char_device() and Path(out).is_symlink()
    else:
        text = log.read_bytes()
        assert log.stat().st_ino == inode and text.startswith(b"earlier line\n") and holds in text
    assert log.stat().st_ino == inode and log.read_bytes().startswith(b"earlier line\n")


@pytest.mark.parametrize("writer", ["export", "simulate --json"])
def test_dev_stdout_appended_to_a_log_keeps_the_log(tmp_path, export_plan, writer):
    """The issue's case, through the real entry point: ``-o /dev/stdout >> log`` renamed
    the result over the log (its earlier lines and its inode gone)."""
    argv, holds = SPECIAL_WRITERS[writer]
    log = tmp_path / "log"
    log.write_bytes(b"earlier line\n")
    inode = log.stat().st_ino
    with open(log, "ab") as f:
        r = graphopt(*argv.format(plan=export_plan, out="/dev/stdout").split(), stdout=f,
                     stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    text = log.read_bytes()
    assert log.stat().st_ino == inode and text.startswith(b"earlier line\n") and holds in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log"]  # no temporary left beside it


SPECIAL_REFUSED = {  # a name that cannot be written in place -> the one line
    "a fifo with no reader": "a pipe with no reader",
    "a socket": "a socket, which graphopt does not write",
    "/dev/full": "/dev/full: cannot write (No space left on device)",
    "/dev/fd/N open for reading only": "open for reading only",
    "/dev/fd/N not open": "is not open",
}


@pytest.mark.parametrize("target", SPECIAL_REFUSED)
def test_a_special_output_that_cannot_be_written_is_one_line(tmp_path, export_plan, target):
    import socket

    f = None
    if target.startswith("a fifo"):
        out = str(tmp_path / "fifo")
        os.mkfifo(out)
    elif target == "a socket":
        out = str(tmp_path / "sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(out)
    elif target == "/dev/full":
        out = "/dev/full"
    elif "reading only" in target:
        (tmp_path / "r").write_text("x")
        f = open(tmp_path / "r", "rb")  # noqa: SIM115
        out = f"/dev/fd/{f.fileno()}"
    else:
        out = "/dev/fd/987"
    try:
        line = _cli("export", str(export_plan), "-g", "example:mlp", "-f", "device-map", "-o", out)
    finally:
        if f is not None:
            f.close()
    assert line.startswith("error: ") and SPECIAL_REFUSED[target] in line, line
    if "reading only" in target:
        assert (tmp_path / "r").read_text() == "x"


def _minimal_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(
        {"format": "graphopt-corpus", "version": 1, "items": {}, "builds": []}))
    return folder


#: every command that writes a folder of results, into a folder another run holds
LOCKED_OUTS = {
    "optimize": "optimize example:mlp -c p100:2 --methods single --out {o}",
    "optimize --task pipeline": "optimize pipe:mlp:layers=4,hidden=16,batch=8 --task pipeline "
                                "-c p100:2 --stages 2 --out {o}",
    "train": "train --corpus example:mlp@p100:2 --updates 1 --out {o}",
    "train imitate": "train imitate {c} --out {o}",
    "train imitate --prior (the corpus)": "train imitate {o} --prior --out {c}/run",
    "train regal": "train regal --corpus example:mlp@p100:2 --updates 1 --out {o}",
    "train regal-imitate": "train regal-imitate {c} --out {o}",
    "train mcm": "train mcm --corpus bert-base@mcm-ring4 --updates 1 --out {o}",
    "train mcm-imitate": "train mcm-imitate {c} --out {o}",
    "corpus build": "corpus build --quick --out {o}",
    "corpus search": "corpus search {o}",
    "corpus regal-targets": "corpus regal-targets {c} --out {o}",
    "corpus mcm-targets": "corpus mcm-targets --out {o}",
}


@pytest.mark.parametrize("command", LOCKED_OUTS)
def test_every_out_folder_is_claimed_a_second_run_refused(tmp_path, command):
    from graphopt.cli.locks import lock_folder

    out, corpus = _minimal_corpus(tmp_path / "out"), _minimal_corpus(tmp_path / "corpus")
    held = lock_folder(out)  # the first run, still running
    try:
        line = _cli(*LOCKED_OUTS[command].format(o=out, c=corpus).split())
    finally:
        held.close()
    assert line.endswith(f"{out}: another graphopt run (pid {os.getpid()}) is writing there; wait "
                         "for it to end or choose another folder"), line
    assert sorted(p.name for p in out.iterdir()) == [".graphopt.lock", "manifest.json"]


# -- issue 49: a full disk during 'corpus build' is the machine's fault, not the item's -----------
@pytest.mark.parametrize("where", ["save_graph", "load_source"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS],
                         ids=["ENOSPC", "EDQUOT", "EFBIG", "EROFS"])
def test_a_full_disk_in_corpus_build_is_not_recorded_as_a_skipped_item(tmp_path, monkeypatch, code, where):
    import graphopt.frontends
    import graphopt.ir
    from graphopt.corpus import CorpusItem, build_corpus, load_manifest

    items = [CorpusItem("example:layered-60-s0", "layered"), CorpusItem("example:layered-60-s1", "layered")]
    real, calls = getattr(graphopt.ir if where == "save_graph" else graphopt.frontends, where), []

    def full(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            err = OSError(code, os.strerror(code))
            raise (err if where == "load_source" else WriteError(f"x: cannot write ({err.strerror})"))
        return real(*args, **kw)
    monkeypatch.setattr(graphopt.ir if where == "save_graph" else graphopt.frontends, where, full)
    with pytest.raises(WriteError, match=os.strerror(code) if where == "load_source" else "cannot write"):
        build_corpus(tmp_path, items)
    records = load_manifest(tmp_path)["items"]
    assert [r["status"] for r in records.values()] == ["built"] and items[1].id not in records
    monkeypatch.undo()
    again = build_corpus(tmp_path, items)  # the space is back: the item is built, not kept skipped
    assert [r["status"] for r in again["items"].values()] == ["built", "built"]


def test_an_item_that_fails_otherwise_is_still_recorded_as_skipped(tmp_path, monkeypatch):
    import graphopt.frontends
    from graphopt.corpus import CorpusItem, build_corpus

    def missing(source):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", source)
    monkeypatch.setattr(graphopt.frontends, "load_source", missing)
    doc = build_corpus(tmp_path, [CorpusItem("example:layered-60-s0", "layered")])
    assert [r["status"] for r in doc["items"].values()] == ["skipped"]


def test_corpus_build_on_a_full_disk_is_one_line(tmp_path):
    r = graphopt("corpus", "build", "--quick", "--families", "layered", "--out", str(tmp_path / "c"),
                 fsize=LIMIT * 8)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert out.strip().splitlines()[-1].startswith(f"error: {tmp_path}/c/") and \
        out.strip().endswith("cannot write (File too large)"), out
    manifest = tmp_path / "c" / "manifest.json"
    assert not manifest.exists() or '"skipped"' not in manifest.read_text()
