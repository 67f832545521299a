"""Issue 13: Ctrl-C during a search ends with the best plan so far written, never a
traceback; the next methods are skipped and the exit code is 130."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from graphopt.evaluate.interrupt import stop_on_interrupt, stop_requested
from graphopt.evaluate.local import LocalEvaluator
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim import Budget
from graphopt.optim.compare import compare
from graphopt.sim import Problem


def test_evaluator_refuses_batches_once_a_stop_is_requested():
    import numpy as np

    ev = LocalEvaluator(Problem(layered_graph(3, 2), load_cluster("p100:2")))
    with stop_on_interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs at the main thread's next bytecode
        assert stop_requested() and not ev.exhausted()  # its first batch still runs
        ev.evaluate(np.zeros((1, ev.problem.num_nodes), int))
        assert ev.exhausted()
    assert not stop_requested()  # cleared with the block
    assert ev.evaluate(np.zeros((1, ev.problem.num_nodes), int)).valid.all()


def test_compare_stops_with_the_best_so_far_and_skips_the_rest():
    prob = Problem(layered_graph(10, 6, seed=0), load_cluster("p100:2"))
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        out = compare(prob, ["single", "sa", "metis"], budget=Budget(evals=10**9))
    finally:
        timer.cancel()
    assert 1 <= len(out) < 3 and out[-1].stats["interrupted"]
    assert all(r.result.valid for r in out)


def test_ctrl_c_in_optimize_writes_the_report_and_exits_130(tmp_path):
    # wherever the interrupt lands after start-up, what ran is written and metis is skipped
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "optimize", "example:layered-300",
                          "-c", "p100:2", "--methods", "single,sa,metis", "--budget", "1000000000",
                          "--out", str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while len(os.listdir(f"/proc/{p.pid}/task")) <= 4 and time.monotonic() < deadline:
        time.sleep(0.2)  # numba's worker threads start with the simulator
    time.sleep(3.0)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert "Traceback" not in out and p.returncode == 130, out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] and "metis" not in [r["method"] for r in report["rows"]]
    assert (tmp_path / report["rows"][-1]["method"] / "plan.json").is_file()


def test_sigterm_in_the_pipeline_task_keeps_the_plans_and_exits_130(tmp_path):
    # wherever the signal lands once the task runs (building, planning or measuring on
    # worker processes), the plans are written without measured figures
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "optimize",
                          "pipe:mlp:layers=4,hidden=16,batch=8", "--task", "pipeline",
                          "--stages", "2", "--measure", "--measure-steps", "50", "--out",
                          str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    deadline = time.monotonic() + 120
    while not _children(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)  # worker processes: the runtime's overhead or the plans measured
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    assert "Traceback" not in out and p.returncode == 130, out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] and report["task"] == "pipeline"
    assert all("measured" not in row for row in report["rows"])
    assert (tmp_path / "exact" / "pipeline.json").is_file()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_kill_9_of_the_pipeline_task_leaves_no_worker(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "optimize",
                          "pipe:mlp:layers=4,hidden=16,batch=8", "--task", "pipeline",
                          "--stages", "2", "--measure", "--measure-steps", "50", "--out",
                          str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _children(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = _children(p.pid)
    assert workers
    p.kill()
    p.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{w}").exists() and "Z" not in _state(w) for w in workers) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [w for w in workers if Path(f"/proc/{w}").exists() and "Z" not in _state(w)]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_sigterm_while_measuring_placements_keeps_the_plans_and_exits_130(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "graphopt.cli", "optimize", "zoo:rnnlm-2-quick",
                          "-c", "cpu:2", "--methods", "single,expert", "--budget", "5",
                          "--measure", "--measure-steps", "500", "--out", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    while not _children(p.pid) and time.monotonic() < deadline:
        time.sleep(0.1)  # the worker processes start with the measuring
    time.sleep(3.0)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=180)
    assert "Traceback" not in out and p.returncode == 130, out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["interrupted"] and [r["method"] for r in report["rows"]] == ["single", "expert"]
    assert (tmp_path / "expert" / "plan.json").is_file()
