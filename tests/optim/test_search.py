"""Search baselines: valid plans that keep colocation groups whole, never worse than the
start, reproducible, within budget, interruptible; CP-SAT proven optimal against brute
force on graphs small enough to enumerate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from graphopt.errors import GraphoptError
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.optim import Budget, get_optimizer, list_optimizers
from graphopt.optim.search import BRKGA, CPSAT
from graphopt.optim.search._space import SearchSpace
from graphopt.sim import Plan, Problem, simulate, simulate_batch
from tests.conftest import cluster

SEARCHES = ("random-search", "local-search", "sa", "brkga")
METHODS = (*SEARCHES, "cpsat")
PLACE_SCHED = frozenset({"placement", "scheduling"})
ALL = frozenset({"placement", "scheduling", "fusion"})
#: Fast settings for the tests: small batches and populations, one reproducible solver.
SMALL = {"random-search": {"batch_size": 16}, "local-search": {"batch_size": 32},
         "sa": {"chains": 16}, "brkga": {"population": 20},
         "cpsat": {"time_limit": 2.0, "workers": 1}}


def method(name: str, **kw):
    return get_optimizer(name, **{**SMALL[name], **kw})


def tasks_of(name: str) -> list[frozenset[str]]:
    return [PLACE_SCHED] if name == "cpsat" else [frozenset({"placement"}), ALL]


#: A 24-op random DAG, and a 26-op training step with two colocation groups, on 4 V100s.
PROBLEMS = {"layered": Problem(layered_graph(6, 4, seed=3), cluster("dgx1-v100:4")),
            "mlp": Problem(mlp_training_graph(layers=2, hidden=256, batch=32),
                           cluster("dgx1-v100:4"))}


def assert_colocated(problem: Problem, placement: np.ndarray) -> None:
    for g in np.unique(problem.coloc[problem.coloc >= 0]):
        assert len(np.unique(placement[problem.coloc == g])) == 1, f"group {g} split"


def test_registered():
    assert set(METHODS) <= set(list_optimizers())


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("graph", sorted(PROBLEMS))
def test_valid_plan_keeps_groups_whole(name, graph):
    prob = PROBLEMS[graph]
    for task in tasks_of(name):
        plan, stats = method(name).optimize(prob, task, Budget(evals=60), seed=1)
        r = simulate(prob, plan)
        assert r.valid, r.reason
        assert_colocated(prob, plan.placement)
        assert stats["evals"] <= 60 and stats["valid"] and not stats["interrupted"]
        assert r.step_time == pytest.approx(stats["step_time"])
        assert stats["step_time"] <= stats["initial_step_time"]
        assert plan.priority is None or "scheduling" in task
        assert plan.fusion is None or "fusion" in task
        evals, seconds, best = np.array(stats["history"], dtype=float).T
        assert (np.diff(evals) > 0).all() and (np.diff(best) <= 0).all()


@pytest.mark.parametrize("name", METHODS)
def test_never_worse_than_init_and_parts_outside_task_kept(name):
    prob = PROBLEMS["mlp"]
    n = prob.num_nodes
    # a deliberately poor but valid start: units alternate devices, FIFO, fusion off
    space = SearchSpace(prob, PLACE_SCHED)
    init = Plan(placement=(np.arange(space.num_units) % 4)[space.unit_of], fusion=np.zeros(n))
    t0 = simulate(prob, init).step_time
    plan, stats = method(name).optimize(prob, PLACE_SCHED, Budget(evals=100), seed=0, init=init)
    assert stats["initial_step_time"] == pytest.approx(t0)
    assert simulate(prob, plan).step_time <= t0
    assert np.array_equal(plan.fusion, init.fusion)  # fusion is not in the task


@pytest.mark.parametrize("name", SEARCHES)
def test_split_group_init_is_repaired(name):
    prob = PROBLEMS["mlp"]
    bad = np.arange(prob.num_nodes) % 2  # splits every colocation group: invalid
    assert not simulate(prob, Plan(placement=bad)).valid
    plan, stats = method(name).optimize(prob, frozenset({"placement"}), Budget(evals=60), seed=0,
                                        init=Plan(placement=bad))
    assert not stats["initial_valid"] and stats["valid"]
    assert simulate(prob, plan).valid


@pytest.mark.parametrize("name", METHODS)
def test_same_seed_same_plan(name):
    prob = (PROBLEMS["layered"] if name != "cpsat"  # the exact model: a smaller graph
            else Problem(layered_graph(4, 3, seed=2), cluster("dgx1-v100:4")))
    task = tasks_of(name)[-1]
    a, sa = method(name).optimize(prob, task, Budget(evals=80), seed=7)
    b, sb = method(name).optimize(prob, task, Budget(evals=80), seed=7)
    assert a == b and sa["step_time"] == sb["step_time"] and sa["evals"] == sb["evals"]


def test_a_space_searched_twice_gives_the_same_plan():
    # a caller may price several distributions with BRKGA on one space: the second
    # search must start where the first did (it once started from everything on device 0)
    prob = Problem(layered_graph(8, 6, seed=1), cluster("p100:4"))
    space = SearchSpace(prob, PLACE_SCHED)
    runs = [BRKGA().evolve(space, Budget(evals=300), seed=3) for _ in range(2)]
    fresh = BRKGA().evolve(SearchSpace(prob, PLACE_SCHED), Budget(evals=300), seed=3)
    assert runs[0][0] == runs[1][0] == fresh[0]


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("evals", [1, 2, 5, 37])
def test_budget_respected(name, evals):
    prob = PROBLEMS["layered"]
    plan, stats = method(name).optimize(prob, ALL, Budget(evals=evals), seed=0)
    assert stats["evals"] <= evals
    assert simulate(prob, plan).valid


def test_time_budget_stops():
    prob = PROBLEMS["layered"]
    plan, stats = method("sa").optimize(prob, ALL, Budget(evals=None, seconds=0.3), seed=0)
    assert stats["seconds"] < 5 and stats["evals"] > 0


@pytest.mark.parametrize("name", SEARCHES)
def test_interrupt_returns_best_so_far(name, monkeypatch):
    import graphopt.evaluate.local as local

    calls = {"n": 0}

    def flaky(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return simulate_batch(*args, **kw)

    monkeypatch.setattr(local, "simulate_batch", flaky)
    prob = PROBLEMS["mlp"]
    plan, stats = method(name).optimize(prob, PLACE_SCHED, Budget(evals=1000), seed=0)
    assert stats["interrupted"] and stats["evals"] < 1000
    assert simulate(prob, plan).step_time == pytest.approx(stats["step_time"])


# -- CP-SAT against brute force ------------------------------------------------------------
def linear_extensions(prob: Problem) -> np.ndarray:
    """Every topological order of the graph (rows). With priorities ``N - position``,
    they give every schedule the simulator's list scheduler can produce: the order of a
    schedule's start times (ties by index) is a topological order that reproduces it."""
    n = prob.num_nodes
    preds = [set(prob.pred_idx[prob.pred_ptr[i]:prob.pred_ptr[i + 1]].tolist()) for i in range(n)]
    out: list[list[int]] = []

    def extend(order: list[int], done: set[int]) -> None:
        if len(order) == n:
            out.append(order.copy())
        for i in range(n):
            if i not in done and preds[i] <= done:
                order.append(i)
                done.add(i)
                extend(order, done)
                order.pop()
                done.remove(i)

    extend([], set())
    return np.array(out)


def brute_force_optimum(prob: Problem) -> float:
    """The fastest valid step time over every placement of the colocation units and every
    priority order, fusion off."""
    n, d = prob.num_nodes, prob.num_devices
    space = SearchSpace(prob, PLACE_SCHED)
    orders = linear_extensions(prob)
    prios = np.empty(orders.shape)
    np.put_along_axis(prios, orders, np.arange(n, 0, -1.0)[None], axis=1)
    units = np.array(list(itertools.product(range(d), repeat=space.num_units)))
    places = np.repeat(units[:, space.unit_of], len(orders), axis=0)
    prios = np.tile(prios, (len(units), 1))
    r = simulate_batch(prob, places, prios, np.zeros_like(prios))
    return float(r.step_time[r.valid].min())


# Graphs of 6 to 12 ops on 2 GPUs over one NVLink pair, and on 3 K80s under a PCIe tree.
# Every edge of a producer carries the same bytes, so the model's transfer sizes are
# exact; the model lets devices and links idle, which these optima do not need.
TINY = {"layered-0": (layered_graph(4, 2, seed=0), "dgx1-v100:2"),
        "layered-1": (layered_graph(4, 2, seed=1), "dgx1-v100:2"),
        "layered-3": (layered_graph(4, 2, seed=3), "dgx1-v100:2"),
        "layered-k80": (layered_graph(2, 3, seed=1), "k80:3"),
        "mlp": (mlp_training_graph(layers=1, hidden=1024, batch=32), "dgx1-v100:2")}


@pytest.mark.parametrize("graph", sorted(TINY))
def test_cpsat_proves_brute_force_optimum(graph):
    pytest.importorskip("ortools")
    g, spec = TINY[graph]
    prob = Problem(g, cluster(spec))
    init = Plan(fusion=np.zeros(prob.num_nodes))
    best = brute_force_optimum(prob)
    plan, stats = method("cpsat").optimize(prob, PLACE_SCHED, Budget(evals=20), seed=0, init=init)
    assert stats["status"] == "OPTIMAL" and stats["optimality_gap"] == 0.0
    assert simulate(prob, plan).step_time == pytest.approx(best, rel=1e-12)
    assert stats["model_value"] == pytest.approx(best, rel=1e-4)  # integer time steps
    for name in SEARCHES:
        other, _ = method(name).optimize(prob, PLACE_SCHED, Budget(evals=64), seed=0, init=init)
        assert simulate(prob, other).step_time >= best * (1 - 1e-12), name


def test_cpsat_ctrl_c_keeps_best_solution(monkeypatch):
    cp_model = pytest.importorskip("ortools.sat.python.cp_model")
    import os
    import signal

    prob = Problem(mlp_training_graph(layers=8, hidden=4096, batch=256), cluster("dgx1-v100:4"))
    # Ctrl-C once the solver has a solution: a delay from the start (or from the solve's
    # start) made the test depend on the machine's speed, and failed in fresh clones
    solve = cp_model.CpSolver.solve

    class CtrlCOnFirstSolution(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            if not getattr(self, "sent", False):
                self.sent = True
                os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model: solve(self, model, CtrlCOnFirstSolution()))
    # Ctrl-C as a foreground terminal delivers it: a suite started in the background of
    # a shell (`make test &`) inherits SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        plan, stats = CPSAT(time_limit=60).optimize(prob, PLACE_SCHED, Budget(evals=20), seed=0)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stats["interrupted"] and stats["status"] != "OPTIMAL", (
        stats, signal.getsignal(signal.SIGINT))
    assert simulate(prob, plan).step_time <= stats["initial_step_time"]


def test_cpsat_refuses_large_graphs_and_fusion():
    pytest.importorskip("ortools")
    big = Problem(layered_graph(30, 10), cluster("dgx1-v100:2"))
    with pytest.raises(GraphoptError, match="max_ops=200"):
        CPSAT().optimize(big, PLACE_SCHED, Budget(evals=10), seed=0)
    with pytest.raises(GraphoptError, match="fusion"):
        CPSAT().optimize(PROBLEMS["mlp"], ALL, Budget(evals=10), seed=0)


def test_cpsat_memory_capacity_is_respected():
    pytest.importorskip("ortools")
    g = mlp_training_graph(layers=2, hidden=2048, batch=32)
    # 40 MiB per GPU: one device needs 49 MiB (two 16 MiB weights and their gradients),
    # the best split about 33 MiB; fusion off as in the model
    prob = Problem(g, cluster("dgx1-v100:2").with_memory(40 * 2**20))
    init = Plan(placement=np.zeros(prob.num_nodes, int), fusion=np.zeros(prob.num_nodes))
    assert not simulate(prob, init).valid
    plan, stats = method("cpsat").optimize(prob, PLACE_SCHED, Budget(evals=20), seed=0, init=init)
    assert stats["status"] == "OPTIMAL" and not stats["initial_valid"]
    assert simulate(prob, plan).valid


# -- BRKGA's per-gene distributions (REGAL's interface) ------------------------------------
def test_brkga_per_gene_arrays():
    prob = PROBLEMS["layered"]
    lay = BRKGA.layout(prob, PLACE_SCHED)
    genes = lay["scheduling"].stop
    assert lay["placement"] == slice(0, prob.num_nodes)
    alpha, beta = np.ones(genes), np.ones(genes)
    alpha[lay["placement"]] = 50.0  # mutants' placement keys near 1: the last device
    opt = BRKGA(population=20, mutant_fraction=0.5, mutant_alpha=alpha, mutant_beta=beta,
                inheritance=np.full(genes, 0.6))
    plan, stats = opt.optimize(prob, PLACE_SCHED, Budget(evals=60), seed=0)
    assert stats["evals"] == 60 and simulate(prob, plan).valid
    with pytest.raises(GraphoptError, match=f"{genes} values"):
        BRKGA(mutant_alpha=np.ones(3)).optimize(prob, PLACE_SCHED, Budget(evals=10), seed=0)
    with pytest.raises(GraphoptError, match="inheritance"):
        BRKGA(inheritance=1.5).optimize(prob, PLACE_SCHED, Budget(evals=10), seed=0)


def test_keys_round_trip():
    prob = PROBLEMS["mlp"]
    space = SearchSpace(prob, ALL)
    rng = np.random.default_rng(0)
    dec = space.decode(rng.random((5, space.num_genes)))
    again = space.decode(space.encode(dec))
    r1 = simulate_batch(prob, space.placements(dec), dec.priority, dec.fusion)
    r2 = simulate_batch(prob, space.placements(again), again.priority, again.fusion)
    assert np.array_equal(space.placements(dec), space.placements(again))
    assert np.array_equal(r1.step_time, r2.step_time)


def test_fusion_reorder_moves_swap_neighbours_in_the_pass_order():
    """Searches can reorder XLA's fusion pass, not only turn a node's fusion on or off:
    a reorder swaps two fusing nodes adjacent in the pass's order, and no other."""
    from graphopt.optim.search._space import FUSE, REORDER, Decisions

    prob = PROBLEMS["layered"]
    space = SearchSpace(prob, frozenset({"fusion"}))
    assert REORDER in space.kinds and len(space.fusible) > 2
    dec = Decisions(fusion=np.arange(1.0, prob.num_nodes + 1)[None])
    moves = space.moves(dec)
    reorders = moves[moves[:, 0] == REORDER]
    assert len(moves[moves[:, 0] == FUSE]) == len(space.fusible)
    assert len(reorders) == len(space.fusible) - 1
    kind, a, b = reorders[0]
    after = space.apply(dec, reorders[:1]).fusion[0]
    assert after[a] == dec.fusion[0, b] and after[b] == dec.fusion[0, a]
    changed = np.flatnonzero(after != dec.fusion[0])
    assert sorted(changed) == sorted([a, b])
    # adjacent: no fusing node lies strictly between the two in the pass order
    lo, hi = sorted(dec.fusion[0, [a, b]])
    between = dec.fusion[0, space.fusible]
    assert not ((between > lo) & (between < hi)).any()
    rng = np.random.default_rng(0)
    random = space.random_moves(dec.take(np.zeros(64, np.int64)), rng)
    assert {int(k) for k in random[:, 0]} == {FUSE, REORDER}


def test_sa_spends_its_budget_on_the_parts_that_pay():
    """With several parts searched, sa's odds follow each part's gains: on this graph
    placement pays and priorities hardly do, so most proposals move units; with fixed
    odds (adapt=0) the parts share them evenly. One part searched: adapt changes nothing."""
    prob = PROBLEMS["layered"]
    split = {a: method("sa", adapt=a).optimize(prob, PLACE_SCHED, Budget(800), seed=0)[1]
             for a in (0.0, 0.9)}
    even, adapted = split[0.0]["proposals"], split[0.9]["proposals"]
    assert abs(even["placement"] - even["scheduling"]) < 0.1 * sum(even.values())
    assert adapted["scheduling"] < 0.2 * sum(adapted.values())
    assert split[0.9]["step_time"] <= split[0.0]["step_time"]
    place = frozenset({"placement"})
    alone = [method("sa", adapt=a).optimize(prob, place, Budget(300), seed=0) for a in (0.0, 0.9)]
    assert np.array_equal(alone[0][0].placement, alone[1][0].placement)
    assert alone[0][1]["proposals"] == alone[1][1]["proposals"]
    assert list(alone[0][1]["proposals"]) == ["placement"]


def test_sa_on_a_program_that_takes_no_time():
    """An identity program simulates to 0 s: relative changes have no meaning there, and
    sa must neither divide by zero nor draw moves at NaN odds."""
    import warnings

    jnp = pytest.importorskip("jax.numpy")
    from graphopt.frontends.jax import from_jax

    prob = Problem(from_jax(lambda x: x, jnp.ones(3)), cluster("p100:2"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, stats = method("sa").optimize(prob, ALL, Budget(50), seed=0)
    assert stats["step_time"] == 0.0


@pytest.mark.parametrize("name, key", [("sa", "chains"), ("brkga", "population"),
                                       ("random-search", "batch_size")])
def test_population_sizes_are_bounded_but_tuned_near_the_default(name, key):
    """A population's "limit" refuses 10^9 (an allocation of 164 GiB for a 22-op graph);
    unlike "max", tuning does not search up to it: the space stays within 4x the default."""
    from graphopt.optim.tune import search_space

    with pytest.raises(GraphoptError, match=rf"{name}.{key}=1000000000: expected <= 10000"):
        get_optimizer(name, **{key: 10**9})
    knob, default = search_space(name)[key], getattr(get_optimizer(name), key)
    assert knob.log and knob.high == 4 * default
