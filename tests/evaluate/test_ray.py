"""RayEvaluator, the Ray backend of the commands and benchmark rows as Ray tasks, on one
local Ray (two CPUs) started once for the module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from graphopt.errors import BudgetExhausted, GraphoptError, PlanError  # noqa: E402
from graphopt.evaluate.backend import use_evaluator  # noqa: E402
from graphopt.evaluate.local import LocalEvaluator  # noqa: E402
from graphopt.evaluate.ray import RayEvaluator, map_tasks, ray_backend  # noqa: E402
from graphopt.hardware import load_cluster  # noqa: E402
from graphopt.ir.generate import layered_graph, mlp_training_graph  # noqa: E402
from graphopt.optim import Budget, optimize  # noqa: E402
from graphopt.sim import Problem, ensure_compiled, simulate_batch  # noqa: E402


@pytest.fixture(scope="module")
def pool():
    ensure_compiled()  # the actors then load the engine from numba's cache
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # ray_backend uses the Ray started here; inside it every method evaluates on the pool
    with ray_backend(workers=2) as p:
        yield p
    ray.shutdown()


@pytest.fixture(scope="module")
def prob():
    return Problem(layered_graph(12, 6, seed=3), load_cluster("p100:4"))


def _local(fn, *args, **kwargs):
    """``fn`` with evaluators of this process: the innermost backend wins."""
    with use_evaluator(LocalEvaluator):
        return fn(*args, **kwargs)


def test_batches_are_split_and_gathered_in_order(pool, prob):
    rng = np.random.default_rng(0)
    place = rng.integers(0, 4, (7, prob.num_nodes))
    prio = rng.random((7, prob.num_nodes))
    got, ref = pool.simulate(prob, place, prio), simulate_batch(prob, place, prio)
    for f in ("step_time", "valid", "peak_memory", "reason_code", "reason_arg"):
        assert np.array_equal(getattr(got, f), getattr(ref, f)), f
    one = pool.simulate(prob, place[:1])  # fewer rows than actors: one part
    assert one.step_time[0] == simulate_batch(prob, place[:1]).step_time[0]


def test_problem_is_sent_once(pool, prob):
    key, ref = pool.send(prob)
    assert pool.send(prob) == (key, ref)
    other = Problem(mlp_training_graph(), load_cluster("p100:2"))
    ev = RayEvaluator(prob, pool=pool)
    assert ev.pool.send(prob) == (key, ref)  # the evaluator's problem: already there
    plans = np.zeros((4, other.num_nodes), dtype=np.int64)
    res = ev.evaluate(plans, problem=other)  # a trainer's other graph: sent on first use
    assert np.array_equal(res.step_time, simulate_batch(other, plans).step_time)
    assert ev.evals == 4 and ev.best_plan is None


def test_budget_accounting_is_the_local_evaluators(pool, prob):
    rng = np.random.default_rng(1)
    plans = rng.integers(0, 4, (6, prob.num_nodes))
    evs = [RayEvaluator(prob, 10, pool=pool), LocalEvaluator(prob, 10)]
    for ev in evs:
        assert len(ev.evaluate(plans).step_time) == 6
        assert len(ev.evaluate(plans).step_time) == 4  # cut to what is left
        with pytest.raises(BudgetExhausted):
            ev.evaluate(plans)
    ray_ev, local_ev = evs
    assert ray_ev.evals == local_ev.evals == 10
    assert ray_ev.best_time == local_ev.best_time
    assert np.array_equal(ray_ev.best_plan.placement, local_ev.best_plan.placement)
    assert [h[0] for h in ray_ev.history] == [h[0] for h in local_ev.history]


def test_a_bad_plan_is_the_simulators_error(pool, prob):
    with pytest.raises(PlanError, match="device 9"):
        pool.simulate(prob, np.full((2, prob.num_nodes), 9))


@pytest.mark.parametrize("method", ["sa", "brkga", "local-search"])
def test_same_seed_same_plan_on_local_and_ray(pool, prob, method):
    plan, stats = optimize(prob, method, "placement,scheduling", Budget(400), seed=5)
    ref, ref_stats = _local(optimize, prob, method, "placement,scheduling", Budget(400), seed=5)
    assert np.array_equal(plan.placement, ref.placement)
    assert np.array_equal(plan.priority, ref.priority)
    assert stats["evals"] == ref_stats["evals"]


def test_a_killed_actor_is_replaced_and_its_batch_rerun(pool, prob, monkeypatch):
    """SIGKILL an actor's process while its part of the third batch of a search is in
    flight: Ray restarts it, the part runs again, the search ends with local's plan."""
    victim = pool.actors[0]
    pid = ray.get(victim.pid.remote())
    real_get, calls = ray.get, []

    def get_and_kill(refs, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(pid, signal.SIGKILL)
        return real_get(refs, *args, **kwargs)

    monkeypatch.setattr(ray, "get", get_and_kill)
    plan, stats = optimize(prob, "sa", "placement", Budget(300), seed=2)
    monkeypatch.undo()
    assert len(calls) > 3  # the kill fell mid-search
    ref, ref_stats = _local(optimize, prob, "sa", "placement", Budget(300), seed=2)
    assert np.array_equal(plan.placement, ref.placement) and stats["evals"] == ref_stats["evals"]
    assert ray.get(victim.pid.remote()) != pid  # a new process took the actor's place


def test_go_pretraining_rollouts_on_ray_match_local(pool, prob, tmp_path):
    from graphopt.optim.learned.go.train import pretrain
    from graphopt.rl.config import PPOConfig

    small = Problem(mlp_training_graph(), load_cluster("p100:2"))
    kw = {"updates": 2, "ppo": PPOConfig(num_samples=4), "progress": False, "dim": 8}
    res = pretrain([prob, small], tmp_path / "ray", **kw)
    ref = _local(pretrain, [prob, small], tmp_path / "local", **kw)
    assert res["total_evals"] == ref["total_evals"] == 8
    key = "charts/mean_ratio"
    assert [r[key] for r in res["log"]] == [r[key] for r in ref["log"]]
    assert (tmp_path / "ray" / "policy.safetensors").read_bytes() == \
        (tmp_path / "local" / "policy.safetensors").read_bytes()


def test_map_tasks_keeps_order_and_unwraps_errors(pool):
    assert list(map_tasks(divmod, [(7, 2), (9, 4), (1, 1)])) == [(3, 1), (2, 1), (1, 0)]

    def bad(x):
        raise GraphoptError(f"row {x} is wrong")

    with pytest.raises(GraphoptError, match="row 3 is wrong"):
        list(map_tasks(bad, [(3,)]))


def test_benchmark_rows_as_ray_tasks_match_local(pool, tmp_path):
    from graphopt.benchmarks import go_table2

    kw = {"cluster": "p100", "methods": ("single", "metis", "sa"), "budget": 40, "quick": True,
              "rows": ("rnnlm-2", "gnmt-2"), "progress": False}
    res = go_table2.run(out=tmp_path / "ray.json", tasks=map_tasks, **kw)
    ref = go_table2.run(**kw)
    for a, b in zip(res["rows"], ref["rows"], strict=True):
        assert a["model"] == b["model"]
        for m in kw["methods"]:
            assert a["methods"][m]["step_time"] == b["methods"][m]["step_time"]
    assert json.loads((tmp_path / "ray.json").read_text())["rows"][1]["model"] == "gnmt-2"


def test_cli_backend_ray_and_bad_backend(pool, tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["optimize", "example:mlp", "-c", "p100:2", "-m", "single,sa",
                              "-b", "50", "--backend", "ray", "-o", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    ref = runner.invoke(app, ["optimize", "example:mlp", "-c", "p100:2", "-m", "single,sa",
                              "-b", "50", "-o", str(tmp_path / "l")])
    plans = [json.loads((tmp_path / d / "sa" / "plan.json").read_text()) for d in ("r", "l")]
    assert ref.exit_code == 0 and plans[0]["placement"] == plans[1]["placement"]
    bad = runner.invoke(app, ["optimize", "example:mlp", "-m", "single", "--backend", "spark"])
    assert bad.exit_code == 2 and "--backend 'spark'" in bad.output
    bad = runner.invoke(app, ["optimize", "example:mlp", "-m", "single", "--address", "auto"])
    assert bad.exit_code == 2 and "only with --backend ray" in bad.output


def test_the_command_line_never_imports_ray():
    code = "import graphopt, graphopt.cli, sys; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_tune_writes_a_file_that_p_reads(pool, tmp_path):
    from graphopt.benchmarks import save_json
    from graphopt.cli.params import method_params
    from graphopt.optim.tune import score, tune

    small = Problem(mlp_training_graph(), load_cluster("p100:2"))
    handler = signal.getsignal(signal.SIGINT)
    # one trial at a time: one worker (graphopt and torch imported once) runs both
    res = tune([small], "sa", trials=2, budget=24, keys=["chains"], seed=1, concurrent=1)
    assert signal.getsignal(signal.SIGINT) is handler  # Tune's own Ctrl-C handler is gone
    assert len(res["trials"]) == 2 and res["ratio"] == res["trials"][0]["ratio"]
    assert res["ratio"] <= res["default_ratio"]
    assert {"config": {"chains": 16}, "ratio": res["default_ratio"], "refused": None} \
        in res["trials"]  # the defaults are always tried
    best = res["params"]["sa"]["chains"]
    assert isinstance(best, int) and 4 <= best <= 64
    assert res["ratio"] == score([small], "sa", {"chains": best}, 24, [0])
    save_json(res, tmp_path / "tuned.json")
    assert method_params([str(tmp_path / "tuned.json")], ["sa"]) == {"sa": {"chains": best}}
    with pytest.raises(GraphoptError, match="not a parameter file"):
        (tmp_path / "bad.json").write_text("[1]")
        method_params([str(tmp_path / "bad.json")], ["sa"])


@pytest.mark.parametrize("command", [
    ["train", "regal", "--corpus", "layered:4x3:0", "--updates", "2", "--samples", "2",
     "--evals", "20", "--dim", "8"],
    ["train", "mcm", "--corpus", "rnnlm-2@mcm-ring4", "--updates", "1", "--num-samples", "2",
     "--repair-seconds", "0.05"],
])
def test_train_regal_and_mcm_on_ray_give_local_policy(pool, tmp_path, command):
    from typer.testing import CliRunner

    from graphopt.cli import app

    runner = CliRunner()
    ray_run = runner.invoke(app, [*command, "--backend", "ray", "--out", str(tmp_path / "r")])
    assert ray_run.exit_code == 0, ray_run.output
    local = runner.invoke(app, [*command, "--out", str(tmp_path / "l")])
    assert local.exit_code == 0, local.output
    assert (tmp_path / "r" / "policy.safetensors").read_bytes() == \
        (tmp_path / "l" / "policy.safetensors").read_bytes()
