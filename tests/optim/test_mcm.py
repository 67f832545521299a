"""Multi-chip partitioning: constraints, repair, baselines and the learned policy."""

from __future__ import annotations

import numpy as np
import pytest

from graphopt.errors import GraphoptError
from graphopt.hardware import load_cluster
from graphopt.ir.generate import layered_graph
from graphopt.optim.base import Budget, optimize
from graphopt.optim.partition import (
    RepairModel,
    check_partition,
    solve_throughput,
    valid_partitions,
)
from graphopt.optim.partition.constraints import chip_memory, pipeline_units
from graphopt.optim.partition.methods import cut_contiguous, greedy_contiguous
from graphopt.sim import Problem
from graphopt.sim.pipeline import pipeline_cost

PLACE = frozenset({"placement"})


@pytest.fixture(scope="module")
def prob():
    return Problem(layered_graph(6, 4, seed=2), load_cluster("mcm-ring4"))


def test_checker_names_each_broken_constraint(prob):
    n, g = prob.num_nodes, prob.graph
    assert check_partition(prob, np.zeros(n, int)) == []
    back = np.zeros(n, int)
    back[g.src[0]] = 1
    (msg,) = check_partition(prob, back)
    assert msg.startswith("acyclic dataflow") and str(g.names[g.src[0]]) in msg
    gap = np.zeros(n, int)
    gap[-1] = 2  # the last op (a sink) on chip 2, chip 1 empty
    assert any(m.startswith("no skipping chips: chip 2") for m in check_partition(prob, gap))
    small = Problem(prob.graph, prob.cluster.with_memory(chip_memory(prob, np.zeros(n, int))[0, 0]
                                                          / 2))
    assert any(m.startswith("SRAM: chip 0") for m in check_partition(small, np.zeros(n, int)))
    out = np.zeros(n, int)
    out[0] = 7
    assert "the module has chips 0..3" in check_partition(prob, out)[0]


def test_valid_partitions_agrees_with_the_checker(prob):
    rng = np.random.default_rng(0)
    n, d = prob.num_nodes, prob.num_devices
    rows = np.concatenate([rng.integers(0, d, (20, n)), np.sort(rng.integers(0, d, (20, n)), 1),
                           np.zeros((1, n), int)])
    mask = valid_partitions(prob, rows)
    assert mask.any() and not mask.all()
    assert mask.tolist() == [check_partition(prob, r) == [] for r in rows]


def test_units_are_acyclic_and_cover_every_op(prob):
    u = pipeline_units(prob)
    assert len(u) == prob.num_nodes and set(u.tolist()) == set(range(u.max() + 1))
    assert (u[prob.graph.src] <= u[prob.graph.dst]).all()


def test_repair_makes_any_proposal_valid_and_keeps_valid_ones(prob):
    units = pipeline_units(prob)
    model = RepairModel(prob, units, time_limit=1.0)
    rng = np.random.default_rng(1)
    props = rng.integers(0, prob.num_devices, (4, model.num_units))
    out = model.repair(props)
    assert out.valid.all() and valid_partitions(prob, out.placement[:, units]).all()
    good = np.sort(props, axis=1)
    good = model.project(good, np.ones(good.shape))  # valid: sorted and renumbered
    assert valid_partitions(prob, good[:, units]).all()
    again = model.repair(good)
    assert (again.placement == good).all() and (again.seconds == 0).all()


def test_repair_weights_follow_confidence(prob):
    units = pipeline_units(prob)
    model = RepairModel(prob, units, time_limit=2.0)
    n = model.num_units
    prop = np.zeros(n, int)
    prop[0] = 3  # the first unit alone on the last chip: invalid (its consumers are earlier)
    conf = np.ones(n)
    keep = model.repair(prop[None], conf[None])
    assert keep.placement[0, 0] < 3  # cheapest: move the one unit back (part way or all)
    conf[0] = 1000.0  # now moving it costs more than moving every other unit
    moved = model.repair(prop[None], conf[None])
    assert moved.placement[0, 0] == 3 and moved.changed[0] > keep.changed[0]
    assert valid_partitions(prob, np.concatenate([keep.placement, moved.placement])[:, units]).all()


def test_sram_that_no_chip_holds_is_refused(prob):
    tiny = Problem(prob.graph, prob.cluster.with_memory(1024.0))
    with pytest.raises(GraphoptError, match="SRAM"):
        RepairModel(tiny)


@pytest.mark.parametrize("method", ["mcm-greedy", "mcm-random", "mcm-sa"])
def test_baselines_return_valid_partitions_deterministically(prob, method):
    kw = {"batch_size": 4} if method == "mcm-random" else {"chains": 4} if method == "mcm-sa" else {}
    plan, stats = optimize(prob, method, "placement", Budget(9), seed=3, **kw)
    again, _ = optimize(prob, method, "placement", Budget(9), seed=3, **kw)
    assert (plan.placement == again.placement).all()
    assert check_partition(prob, plan.placement) == []
    assert stats["interval"] == pytest.approx(pipeline_cost(prob, plan.placement).interval[0])
    units = pipeline_units(prob)
    starts = len(np.unique(np.stack([greedy_contiguous(prob, units),
                                     greedy_contiguous(prob, units, False),
                                     cut_contiguous(prob, units)]), axis=0))
    assert stats["evals"] == (starts if method == "mcm-greedy" else 9)
    assert stats["valid_after_repair"] == 1.0
    assert not plan.fusion.any()


def test_search_beats_or_matches_its_greedy_start(prob):
    _, greedy = optimize(prob, "mcm-greedy", "placement", Budget(1), seed=0)
    _, sa = optimize(prob, "mcm-sa", "placement", Budget(17), seed=0, chains=4)
    assert sa["interval"] <= greedy["interval"]


def test_sa_from_random_starts_ignores_the_heuristic(prob):
    """``start="random"`` (the MCM paper's SA): the first batch is one repaired random
    proposal per chain, not the contiguous candidates (the default's first batch), and
    the result is valid and reproducible."""
    plan, stats = optimize(prob, "mcm-sa", "placement", Budget(12), seed=1, chains=4, start="random")
    again, _ = optimize(prob, "mcm-sa", "placement", Budget(12), seed=1, chains=4, start="random")
    assert (plan.placement == again.placement).all()
    assert check_partition(prob, plan.placement) == []
    _, best = optimize(prob, "mcm-sa", "placement", Budget(12), seed=1, chains=4)
    units = pipeline_units(prob)
    starts = {pipeline_cost(prob, p[units]).interval[0] for p in
              (greedy_contiguous(prob, units), greedy_contiguous(prob, units, False),
               cut_contiguous(prob, units))}
    assert best["history"][0][2] in starts
    assert stats["history"][0][0] == 4  # one batch of four random proposals, then moves
    with pytest.raises(GraphoptError, match="start"):
        optimize(prob, "mcm-sa", "placement", Budget(4), seed=1, start="greedy")


def test_cpsat_model_is_exact_on_a_chain_and_no_worse_than_greedy(prob):
    units = pipeline_units(prob)
    start = greedy_contiguous(prob, units)
    part, stats = solve_throughput(prob, units, time_limit=10, hint=start)
    assert stats["status"] == "OPTIMAL" and valid_partitions(prob, part[units][None])[0]
    _, res = optimize(prob, "mcm-cpsat", "placement", Budget(4), seed=0, time_limit=10)
    assert res["interval"] <= pipeline_cost(prob, start[units]).interval[0] * (1 + 1e-9)


def test_methods_need_placement_in_the_task(prob):
    with pytest.raises(GraphoptError, match="placement"):
        optimize(prob, "mcm-random", "scheduling", Budget(4), seed=0)


def test_learned_policy_trains_on_repaired_partitions(prob):
    plan, stats = optimize(prob, "mcm-one", "placement", Budget(8), seed=0, dim=16,
                           num_samples=4, progress=False)
    assert stats["updates"] == 2 and stats["valid_after_repair"] == 1.0
    assert check_partition(prob, plan.placement) == []
    assert stats["interval"] == pytest.approx(pipeline_cost(prob, plan.placement).interval[0])


def test_chiplet_prior_starts_at_the_contiguous_partition(prob):
    import torch

    from graphopt.optim.learned.mcm.method import MCMEnv, new_policy

    env = MCMEnv(prob, PLACE)
    policy = new_policy(0, dim=16)
    with torch.no_grad():
        chips = policy(*env.inputs(), tasks=("placement",))["placement"].argmax(1).numpy()
    assert chips[0] == 0 and chips[-1] == prob.num_devices - 1
    assert (np.diff(chips) >= -1).all()  # close to a staircase: the repair keeps most of it
    out = env.repairer.repair(chips[None])
    assert out.valid[0] and out.changed[0] <= env.num_units // 4


def test_pretrained_policy_zero_shot_and_finetuned(prob, tmp_path_factory):
    from graphopt.optim.learned.mcm.method import load_mcm_policy
    from graphopt.optim.learned.mcm.train import pretrain

    folder = tmp_path_factory.mktemp("mcm")
    pretrain([prob], folder, updates=2, progress=False, dim=16, command="test")
    policy, info = load_mcm_policy(folder)
    assert info["command"] == "test" and info["updates"] == 2 and policy.config.max_devices == 16
    plan, zero = optimize(prob, "mcm", "placement", Budget(8), seed=0, checkpoint=str(folder),
                          samples=4)
    assert zero["evals"] == 4 and check_partition(prob, plan.placement) == []
    plan, tuned = optimize(prob, "mcm-finetune", "placement", Budget(8), seed=0,
                           checkpoint=str(folder), num_samples=4, progress=False)
    assert tuned["evals"] == 8 and tuned["updates"] == 2
    assert check_partition(prob, plan.placement) == []


@pytest.mark.parametrize("args, fault", [
    (["bench", "mcm", "--methods", "sa"], "--methods: sa"),
    (["train", "mcm", "--corpus", "resnet-50"], "GRAPH@PRESET"),
    (["train", "mcm", "--corpus", "resnet-50@nope"], "unknown cluster preset 'nope'"),
])
def test_cli_refuses_bad_input_in_one_line(args, fault, tmp_path):
    from typer.testing import CliRunner

    from graphopt.cli import app

    res = CliRunner().invoke(app, args + (["--out", str(tmp_path / "o")] if "train" in args
                                          else []))
    assert res.exit_code == 2 and fault in res.output and "Traceback" not in res.output


def test_greedy_prior_brings_proposals_near_the_greedy_partition(prob):
    import torch

    from graphopt.optim.learned.mcm.method import MCMEnv, load_mcm_policy
    from graphopt.rl.ppo import sample

    plain = MCMEnv(prob, PLACE)
    greedy = greedy_contiguous(prob, plain.unit)
    anchored = MCMEnv(prob, PLACE, anchor=greedy)
    assert anchored.x.shape[1] == plain.x.shape[1] + 2
    policy = load_mcm_policy()[0]
    moved, off = [], []
    for env in (plain, anchored):
        if env is anchored:
            policy.reset_width(0.35)
        with torch.no_grad():
            logits = policy(*env.inputs(), tasks=("placement",))
        prop = sample(logits, 16, torch.Generator().manual_seed(0))["placement"]
        probs = torch.softmax(logits["placement"], 1).numpy()
        rep = env.repairer.repair(prop, probs[np.arange(env.num_units), prop])
        assert rep.valid.all()
        moved.append(rep.changed.mean())
        off.append((prop != greedy).sum(1).mean())
    # anchored proposals differ from greedy in fewer units, and the repair moves fewer
    assert off[1] < off[0] / 2 and moved[1] < moved[0] / 2


@pytest.mark.parametrize("method", ["mcm", "mcm-finetune"])
def test_learned_methods_start_from_greedy_and_never_end_below_it(prob, method):
    _, greedy = optimize(prob, "mcm-greedy", "placement", Budget(3), seed=0)
    kw = {"samples": 4} if method == "mcm" else {"num_samples": 4, "progress": False}
    for seed in (0, 1, 2):
        plan, stats = optimize(prob, method, "placement", Budget(9), seed=seed, **kw)
        assert check_partition(prob, plan.placement) == []
        assert stats["interval"] <= greedy["interval"]
        assert stats["history"][0][0] == greedy["evals"]
        assert stats["history"][0][2] == pytest.approx(greedy["interval"])
        assert stats["interval"] == pytest.approx(pipeline_cost(prob, plan.placement).interval[0])
    again, same = optimize(prob, method, "placement", Budget(9), seed=2, **kw)
    assert (again.placement == plan.placement).all() and same["interval"] == stats["interval"]


def _chain(sizes):
    """A chain of matmuls, each with its own 4 MB weight, sending ``sizes`` bytes on."""
    from graphopt.ir import GraphBuilder

    b, prev = GraphBuilder("chain"), []
    rng = np.random.default_rng(2)
    for i, out in enumerate(sizes):
        w = b.add_node(f"w{i}", "parameter", out_bytes=4e6, persistent_bytes=4e6)
        prev = [b.add_node(f"x{i}", "matmul", inputs=prev + [w], bytes_read=1e4, out_bytes=out,
                           flops=float(rng.uniform(1, 3) * 5e8))]
    return b.build()


@pytest.mark.parametrize("capacity", [None, 30e6])
def test_cut_contiguous_is_the_best_contiguous_partition_of_a_chain(capacity):
    from itertools import combinations

    # small and large tensors between the matmuls: a large one crossing a cut is the
    # slowest stage, so where the cuts fall matters
    sizes = np.random.default_rng(2).choice([2e3, 4e6], 12).tolist()
    cluster = load_cluster("mcm-ring4")
    prob = Problem(_chain(sizes), cluster if capacity is None else cluster.with_memory(capacity))
    units = pipeline_units(prob)
    n = int(units.max()) + 1
    assert n == 12  # every matmul a unit of its own, with its weight
    every = []  # every contiguous partition of the chain onto the first k chips
    for k in range(1, 5):
        for cuts in combinations(range(1, n), k - 1):
            every.append(np.repeat(np.arange(k), np.diff([0, *cuts, n])))
    place = np.stack(every)[:, units]
    ok = valid_partitions(prob, place)
    assert ok.any() and (capacity is None or not ok.all())
    best = pipeline_cost(prob, place[ok]).interval.min()
    cut = cut_contiguous(prob, units)
    assert valid_partitions(prob, cut[units][None])[0]
    # on a chain every tensor goes to the next chip: the DP's model is the pipeline cost
    assert pipeline_cost(prob, cut[units]).interval[0] == pytest.approx(best, rel=1e-12)
    for memory in (True, False):  # the greedy cuts, blind to the tensors, are slower here
        greedy = greedy_contiguous(prob, units, memory)
        assert pipeline_cost(prob, greedy[units]).interval[0] > 1.2 * best


def test_bench_marks_a_fine_tuning_row_that_measures_no_learning():
    from graphopt.benchmarks.mcm import to_markdown

    def row(chips, start_within, scratch_at, ft_at):
        return {"graph": "g", "chips": chips, "methods": {"mcm-greedy": {"throughput": 1.0}},
                "finetune_to_scratch": {
                    "scratch_interval": 1e-3, "finetune_interval": 1e-3,
                    "scratch_evals_to_within_1pct": scratch_at[0],
                    "scratch_seconds_to_within_1pct": scratch_at[1],
                    "start_within_1pct": start_within,
                    "finetune_evals": ft_at[0], "finetune_seconds": ft_at[1]}}

    res = {"command": "c", "budget": 3, "seed": 0, "machine": "m", "date": "d",
           "rows": [row(4, False, (96, 30.0), (32, 5.0)), row(8, True, (3, 0.01), (3, 0.02)),
                    row(16, False, (144, 50.0), (None, None))]}
    lines = {ln.split(" | ")[1]: ln for ln in to_markdown(res).splitlines()
             if ln.startswith("| g |")}
    assert lines["4"].endswith("| 6.0x | 3.0x |")
    assert lines["8"].endswith("| start | start |")  # both at their start: no speed-up
    assert lines["16"].endswith("| not reached | not reached |")
    assert "Evaluations and seconds to come within 1%" not in to_markdown(res)  # no searches


def test_bench_mcm_says_a_line_per_row_on_a_pipe(tmp_path):
    # issue 37: a benchmark on a pipe printed nothing until its table
    import re

    from typer.testing import CliRunner

    from graphopt.cli import app

    r = CliRunner().invoke(app, ["bench", "mcm", "--graphs", "rnnlm-2", "--presets", "mcm-ring4",
                                 "--methods", "mcm-greedy", "--budget", "4",
                                 "--out", str(tmp_path / "mcm.json")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("bench mcm: 1 methods on 1 graphs x 1 presets")
    assert re.fullmatch(r"\[1/1\] rnnlm-2 on mcm-ring4: [\d.]+ s", lines[1]), r.output
