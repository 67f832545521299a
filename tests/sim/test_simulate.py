"""The simulator: docs/design.md "Simulator semantics" checked as properties on random DAGs,
on tiny hand-built graphs whose figures are computed by hand, and on bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphopt.errors import GraphError, PlanError
from graphopt.hardware import Cluster, Device, topology
from graphopt.ir import Graph, GraphBuilder
from graphopt.ir.generate import layered_graph, mlp_training_graph
from graphopt.ir.ops import FUSIBLE_CONSUMER, FUSIBLE_PRODUCER, op_class
from graphopt.sim import Plan, Problem, SimResult, simulate, simulate_batch
from graphopt.sim.problem import DUPLICABLE, EXPENSIVE
from tests.conftest import CLUSTER_SPECS, cluster, coloc_respecting, graphs, placements

REL = 1e-9


# -- helpers ------------------------------------------------------------------------------
@st.composite
def plans(draw, graph: Graph, num_devices: int, respect_coloc: bool = True) -> Plan:
    """A plan with a random placement, no/random/tied priorities, default/off/random fusion."""
    n = graph.num_nodes
    place = draw(placements(graph, num_devices, respect_coloc))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    prio = draw(st.sampled_from(["fifo", "random", "ties"]))
    priority = (None if prio == "fifo" else rng.normal(size=n) if prio == "random"
                else rng.integers(0, 3, size=n).astype(float))
    fus = draw(st.sampled_from(["default", "off", "random"]))
    fusion = None if fus == "default" else np.zeros(n) if fus == "off" else rng.uniform(-1, 1, n)
    return Plan(placement=place, priority=priority, fusion=fusion)


@st.composite
def problems(draw, specs=CLUSTER_SPECS, **graph_kw) -> Problem:
    return Problem(draw(graphs(**graph_kw)), cluster(draw(st.sampled_from(specs))))


@st.composite
def problem_and_plan(draw, respect_coloc: bool = True, **graph_kw) -> tuple[Problem, Plan]:
    prob = draw(problems(**graph_kw))
    return prob, draw(plans(prob.graph, prob.num_devices, respect_coloc))


def placement_of(prob: Problem, plan: Plan) -> np.ndarray:
    return np.zeros(prob.num_nodes, np.int64) if plan.placement is None else plan.placement


def assert_same_result(a: SimResult, b: SimResult) -> None:
    """Bit-for-bit equality of two results (timelines included when present)."""
    assert a.step_time == b.step_time
    assert a.valid == b.valid and a.reason == b.reason
    assert a.peak_memory.tobytes() == b.peak_memory.tobytes()
    assert a.busy.tobytes() == b.busy.tobytes()
    assert a.bytes_moved == b.bytes_moved and a.num_kernels == b.num_kernels
    assert a.lower_bound == b.lower_bound
    assert (a.timeline is None) == (b.timeline is None)
    if a.timeline is not None:
        for k in vars(a.timeline):
            x, y = getattr(a.timeline, k), getattr(b.timeline, k)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), k


def kernel_edges(prob: Problem, tl) -> list[tuple[int, int, int]]:
    """``(u, ku, kv)`` for every edge between kernels: node u's output, of kernel ku, read
    in kernel kv. An edge into a duplicated op counts once per kernel holding a copy; a
    duplicated op's own output never leaves the kernels its copies are in."""
    g, group, dup = prob.graph, tl.group, tl.duplicated
    out = []
    for u, v in zip(g.src.tolist(), g.dst.tolist()):
        if dup[u]:
            continue
        ku = int(group[u])
        kvs = {int(group[c]) for c in g.successors(v)} if dup[v] else {int(group[v])}
        out += [(u, ku, kv) for kv in sorted(kvs) if kv != ku]
    return out


def kernel_members(prob: Problem, tl) -> dict[int, list[int]]:
    """Each kernel's members: the nodes of its group and a copy of each duplicated op one
    of them reads."""
    g, group, dup = prob.graph, tl.group, tl.duplicated
    members: dict[int, list[int]] = {int(k): [] for k in tl.kernel}
    for i in range(g.num_nodes):
        if not dup[i]:
            members[int(group[i])].append(i)
    for u in np.flatnonzero(dup):
        for k in sorted({int(group[c]) for c in g.successors(u)}):
            members[k].append(int(u))
    return members


def check_timeline(prob: Problem, plan: Plan, r: SimResult) -> None:
    """Every timing rule of docs/design.md §1, §3 and §6 on one simulated plan."""
    tl = r.timeline
    g, place = prob.graph, placement_of(prob, plan)
    bw, lat = prob.cluster.bandwidth, prob.cluster.latency
    group = tl.group
    roots = np.flatnonzero(group == np.arange(g.num_nodes))
    assert np.array_equal(np.sort(tl.kernel), roots) and len(roots) == r.num_kernels
    assert np.array_equal(tl.device, place[tl.kernel])
    assert (tl.start >= 0).all() and (tl.end >= tl.start).all()
    kstart = dict(zip(tl.kernel.tolist(), tl.start.tolist()))
    kend = dict(zip(tl.kernel.tolist(), tl.end.tolist()))
    # one kernel at a time per device; busy time adds up
    for d in range(prob.num_devices):
        on = tl.device == d
        s, e = tl.start[on], tl.end[on]
        o = np.lexsort((e, s))
        assert (s[o][1:] >= e[o][:-1]).all(), f"kernels overlap on device {d}"
        assert r.busy[d] == pytest.approx((e - s).sum(), rel=REL, abs=1e-15)
    # transfers: after their kernel, once per destination, one at a time per link
    ntr = len(tl.transfer_kernel)
    for k in ("transfer_src", "transfer_dst", "transfer_start", "transfer_end", "transfer_bytes"):
        assert len(getattr(tl, k)) == ntr
    pairs = set(zip(tl.transfer_kernel.tolist(), tl.transfer_dst.tolist()))
    assert len(pairs) == ntr, "an output goes to each destination device once"
    arrive = {}
    for j in range(ntr):
        k, a, b = int(tl.transfer_kernel[j]), int(tl.transfer_src[j]), int(tl.transfer_dst[j])
        assert a == place[k] != b
        assert tl.transfer_start[j] >= kend[k]
        assert tl.transfer_end[j] - tl.transfer_start[j] == pytest.approx(
            lat[a, b] + tl.transfer_bytes[j] / bw[a, b], rel=REL, abs=1e-15)
        arrive[(k, b)] = tl.transfer_end[j]
    for a in range(prob.num_devices):
        for b in range(prob.num_devices):
            on = (tl.transfer_src == a) & (tl.transfer_dst == b)
            s, e = tl.transfer_start[on], tl.transfer_end[on]
            o = np.lexsort((e, s))
            assert (s[o][1:] >= e[o][:-1]).all(), f"transfers overlap on link {a}->{b}"
    assert r.bytes_moved == pytest.approx(tl.transfer_bytes.sum(), rel=REL)
    # a kernel starts once every input is on its device
    needed = set()
    for _, ku, kv in kernel_edges(prob, tl):
        if place[ku] == place[kv]:
            assert kstart[kv] >= kend[ku]
        else:
            assert (ku, int(place[kv])) in arrive, "a needed output is sent"
            assert kstart[kv] >= arrive[(ku, int(place[kv]))]
            needed.add((ku, int(place[kv])))
    assert needed == set(arrive), "nothing is sent that no kernel needs"
    ends = [*tl.end.tolist(), *tl.transfer_end.tolist()]
    assert r.step_time == (max(ends) if ends else 0.0)


def check_fusion(prob: Problem, plan: Plan, tl) -> None:
    """Fused kernels respect devices, op classes, size and shape, and never make a cycle
    (docs/design.md §5, docs/simulator.md "Fusion")."""
    g, place, group, dup = prob.graph, placement_of(prob, plan), tl.group, tl.duplicated
    n = g.num_nodes
    assert ((group >= np.arange(n)) & (group < n)).all(), "a root comes last in its group"
    assert np.array_equal(group[group], group), "roots are their own group"
    assert np.array_equal(place[group], place), "a group never spans devices"
    members = kernel_members(prob, tl)
    assert max(map(len, members.values()), default=0) <= prob.max_fusion_size
    edges = kernel_edges(prob, tl)
    leaves = {u for u, _, _ in edges} | set(np.flatnonzero(g.out_degree == 0).tolist())
    cls = [op_class(str(o)) for o in g.op]
    for u in np.flatnonzero(dup):
        assert cls[u] in DUPLICABLE and str(g.op[u]) not in EXPENSIVE
        succ = g.successors(u)
        assert len(succ) >= 2 and not dup[succ].any(), "a copy goes into ops that are kept"
        assert (place[succ] == place[u]).all() and all(cls[c] in FUSIBLE_CONSUMER for c in succ)
    fused = (group != np.arange(n)) & ~dup
    for k, ms in members.items():
        exits = [m for m in ms if m in leaves and not dup[m]]
        assert exits and max(exits) == k and len({int(prob.level[m]) for m in exits}) == 1, \
            "a kernel's exits share one level, its root the last"
        for m in ms:
            if dup[m] or m in leaves:
                continue
            succ = g.successors(m)  # inside: its one consumer took it
            assert len(succ) == 1 and group[succ[0]] == k and cls[m] in FUSIBLE_PRODUCER
            assert cls[succ[0]] in FUSIBLE_CONSUMER
    if plan.fusion is not None and fused.any():
        # every duplicated op, every producer fused into its consumer, and every shared
        # input of merged siblings had a positive fusion priority
        assert (plan.fusion[dup] > 0).all()
        inner = [m for m in np.flatnonzero(fused) if m not in leaves]
        assert (plan.fusion[inner] > 0).all(), "a fusion priority <= 0 never fuses"
    # no cycle between kernels: Kahn's algorithm empties the kernel graph
    succ_k: dict[int, set[int]] = {k: set() for k in members}
    indeg = dict.fromkeys(members, 0)
    for _, ku, kv in edges:
        if kv not in succ_k[ku]:
            succ_k[ku].add(kv)
            indeg[kv] += 1
    todo = [k for k, d in indeg.items() if d == 0]
    seen = 0
    while todo:
        k = todo.pop()
        seen += 1
        for c in succ_k[k]:
            indeg[c] -= 1
            if indeg[c] == 0:
                todo.append(c)
    assert seen == len(members), "fusion made a cycle between kernels"


# -- the lower bound ----------------------------------------------------------------------
@given(problem_and_plan(respect_coloc=False))
@settings(max_examples=50)
def test_step_time_is_at_least_the_lower_bound(pp):
    prob, plan = pp
    r = simulate(prob, plan)
    assert r.lower_bound == prob.lower_bound >= 0
    assert r.step_time >= prob.lower_bound * (1 - REL)
    for variant in (Plan(placement=plan.placement), plan.replace(fusion=np.zeros(prob.num_nodes))):
        assert simulate(prob, variant).step_time >= prob.lower_bound * (1 - REL)


@given(problems(max_nodes=30))
def test_lower_bound_holds_on_one_device_with_every_fusion_setting(prob):
    n = prob.num_nodes
    for fusion in (None, np.zeros(n), np.ones(n), np.linspace(-1, 1, n)):
        r = simulate(prob, Plan(fusion=fusion))
        assert r.step_time >= prob.lower_bound * (1 - REL)


# -- one device -------------------------------------------------------------------------------
@given(problems(), st.integers(0, 2**32 - 1), st.booleans())
def test_one_device_without_fusion_runs_every_op_back_to_back(prob, seed, with_priority):
    n = prob.num_nodes
    rng = np.random.default_rng(seed)
    plan = Plan(placement=np.zeros(n, np.int64), fusion=np.zeros(n),
                priority=rng.normal(size=n) if with_priority else None)
    r = simulate(prob, plan, timeline=True)
    total = prob.costs.time[:, 0].sum()
    assert r.step_time == pytest.approx(total, rel=REL, abs=1e-15)
    assert r.busy[0] == pytest.approx(total, rel=REL, abs=1e-15) and (r.busy[1:] == 0).all()
    assert r.bytes_moved == 0.0 and len(r.timeline.transfer_kernel) == 0
    assert r.num_kernels == n
    assert (r.peak_memory[1:] == 0).all()
    check_timeline(prob, plan, r)


# -- moving nothing changes nothing ---------------------------------------------------------
@given(problem_and_plan())
def test_the_same_plan_gives_the_same_result_every_time(pp):
    prob, plan = pp
    first = simulate(prob, plan, timeline=True)
    # other plans in between must leave no trace in the reused work arrays
    simulate(prob, Plan(placement=np.arange(prob.num_nodes) % prob.num_devices))
    simulate(prob, Plan(fusion=np.zeros(prob.num_nodes)), timeline=True)
    assert_same_result(first, simulate(prob, plan, timeline=True))
    fresh = Problem(prob.graph, prob.cluster)  # a fresh problem from the same inputs
    assert_same_result(first, simulate(fresh, plan, timeline=True))


@given(problems(), st.sampled_from(["fifo", "random"]), st.sampled_from(["default", "off"]))
def test_all_on_device_zero_equals_the_default_plan(prob, prio, fus):
    n = prob.num_nodes
    kw = {"priority": np.linspace(1, 0, n) if prio == "random" else None,
          "fusion": None if fus == "default" else np.zeros(n)}
    assert_same_result(simulate(prob, Plan(**kw), timeline=True),
                       simulate(prob, Plan(placement=np.zeros(n, np.int64), **kw), timeline=True))
    if prio == "fifo" and fus == "default":
        assert_same_result(simulate(prob), simulate(prob, Plan()))


# -- memory ---------------------------------------------------------------------------------------
@given(problem_and_plan(respect_coloc=False), st.lists(st.floats(0.0, 1.2), min_size=1,
                                                         max_size=4))
def test_tighter_memory_never_makes_an_invalid_plan_valid(pp, fractions):
    prob, plan = pp
    base = simulate(prob, plan)
    top = float(base.peak_memory.max())
    caps = sorted({f * top for f in fractions} | {top, 2 * top + 1})
    valid = []
    for cap in caps:
        tight = Problem(prob.graph, prob.cluster.with_memory(max(cap, 1.0)))
        r = simulate(tight, plan)
        assert np.array_equal(r.peak_memory, base.peak_memory), "peak does not depend on capacity"
        assert r.step_time == base.step_time
        if r.valid:
            assert (r.peak_memory <= max(cap, 1.0)).all() and r.reason == ""
        elif r.reason.startswith("OOM"):
            d = int(np.argmax(r.peak_memory > max(cap, 1.0)))
            assert prob.cluster.devices[d].name in r.reason
        valid.append(r.valid)
    # validity can only switch from False to True as capacity grows
    assert valid == sorted(valid)
    if base.valid:
        assert valid[-1]


@given(problem_and_plan())
def test_peak_memory_covers_persistent_bytes_and_every_live_output(pp):
    prob, plan = pp
    r = simulate(prob, plan)
    place = placement_of(prob, plan)
    g = prob.graph
    persistent = np.bincount(place, weights=g.persistent_bytes, minlength=prob.num_devices)
    assert (r.peak_memory >= persistent * (1 - REL)).all()
    for i in range(g.num_nodes):  # while op i runs, its temp bytes and persistent sum are live
        assert r.peak_memory[place[i]] >= (persistent[place[i]] + g.temp_bytes[i]) * (1 - REL)


def reference_peak(prob: Problem, plan: Plan, r: SimResult) -> np.ndarray:
    """Peak memory per device recomputed from the timeline by docs/design.md §4.

    Each tensor is an interval [allocated, released) on one device: a kernel's output from
    its start until its last local consumer and its outgoing transfers have finished; its
    scratch (the members' sum) while it runs; a received tensor from its transfer's start
    until its last consumer there has finished. Persistent bytes hold all step. Needs
    every kernel and transfer to take positive time, so that no release ties with an
    allocation of the same instant.
    """
    g, tl = prob.graph, r.timeline
    place = placement_of(prob, plan)
    kstart = dict(zip(tl.kernel.tolist(), tl.start.tolist()))
    kend = dict(zip(tl.kernel.tolist(), tl.end.tolist()))
    members = kernel_members(prob, tl)
    edges = kernel_edges(prob, tl)
    consumers: dict[int, set[int]] = {k: set() for k in kstart}
    for _, ku, kv in edges:
        consumers[ku].add(kv)
    # a kernel's output: its exits' outputs (read outside it, or by no one), freed together
    leaves = {u for u, _, _ in edges} | set(np.flatnonzero(g.out_degree == 0).tolist())
    spans = []  # (device, allocated, released, bytes)
    for k, start in kstart.items():
        d = place[k]
        local = [kend[c] for c in consumers[k] if place[c] == d]
        sent = tl.transfer_end[tl.transfer_kernel == k].tolist()
        out = sum(g.out_bytes[m] for m in members[k] if m in leaves and not tl.duplicated[m])
        spans.append((d, start, max([kend[k], *local, *sent]), out))
        spans.append((d, start, kend[k], sum(g.temp_bytes[m] for m in members[k])))
    for j, (k, b) in enumerate(zip(tl.transfer_kernel.tolist(), tl.transfer_dst.tolist())):
        release = max(kend[c] for c in consumers[k] if place[c] == b)
        spans.append((b, tl.transfer_start[j], release, tl.transfer_bytes[j]))
    peak = np.bincount(place, weights=g.persistent_bytes, minlength=prob.num_devices)
    for d in range(prob.num_devices):
        mine = [s for s in spans if s[0] == d]
        level = [sum(x for _, a, z, x in mine if a <= t < z) for _, t, _, _ in mine]
        peak[d] += max(level, default=0.0)
    return peak


@given(problem_and_plan(respect_coloc=False))
@settings(max_examples=50)
def test_peak_memory_matches_the_lifetimes_of_every_tensor(pp):
    prob, plan = pp
    # inputs and views take no time; make them ordinary kernels so that every interval
    # has positive length and the reference needs no tie-breaking rules
    prob = without_free_ops(prob)
    r = simulate(prob, plan, timeline=True)
    tl = r.timeline
    assert (tl.end > tl.start).all() and (tl.transfer_end > tl.transfer_start).all()
    assert r.peak_memory == pytest.approx(reference_peak(prob, plan, r), rel=1e-12)


def without_free_ops(prob: Problem) -> Problem:
    """The same problem with inputs and views turned into ordinary (timed) kernels."""
    g = prob.graph
    free = np.isin([op_class(str(o)) for o in g.op], ["input", "view"])
    return Problem(g.replace(op=np.where(free, "my_custom_op", g.op)), prob.cluster)


@given(problem_and_plan(respect_coloc=False))
@settings(max_examples=50)
def test_devices_never_idle_while_a_kernel_is_ready_and_pick_by_priority(pp):
    prob, plan = pp
    prob = without_free_ops(prob)  # one dispatch round per instant: no zero-time kernels
    r = simulate(prob, plan, timeline=True)
    tl = r.timeline
    place = placement_of(prob, plan)
    kstart = dict(zip(tl.kernel.tolist(), tl.start.tolist()))
    kend = dict(zip(tl.kernel.tolist(), tl.end.tolist()))
    arrive = {(int(k), int(b)): e for k, b, e in zip(tl.transfer_kernel, tl.transfer_dst,
                                                    tl.transfer_end)}
    ready = dict.fromkeys(kstart, 0.0)
    for _, ku, kv in kernel_edges(prob, tl):
        t = kend[ku] if place[ku] == place[kv] else arrive[(ku, int(place[kv]))]
        ready[kv] = max(ready[kv], t)
    prio = None
    if plan.priority is not None:  # a kernel's priority is its members' highest
        prio = np.full(prob.num_nodes, -np.inf)
        for k, ms in kernel_members(prob, tl).items():
            prio[k] = plan.priority[ms].max()
    for d in range(prob.num_devices):
        ks = sorted((k for k in kstart if place[k] == d), key=lambda k: kstart[k])
        idle = [(0.0, kstart[ks[0]])] if ks else []
        idle += [(kend[a], kstart[b]) for a, b in itertools.pairwise(ks)]
        for k in ks:
            assert ready[k] <= kstart[k], "a kernel starts only when its inputs are there"
            for lo, hi in idle:
                assert not (lo < hi and ready[k] < hi and lo < kstart[k]), \
                    f"device {d} idle in [{lo}, {hi}) while kernel {k} was ready"
            waiting = [w for w in ks if ready[w] <= kstart[k] < kstart[w]]
            for w in waiting:
                if prio is None:  # first ready, first run
                    assert ready[w] >= ready[k]
                else:
                    assert (prio[w], -w) < (prio[k], -k), "the highest priority starts first"


def chain_problem(nodes, one: Cluster, fusion_off=True) -> tuple[Problem, Plan]:
    b = GraphBuilder("hand")
    for name, kw in nodes:
        b.add_node(name, kw.pop("op", "my_custom_op"), **kw)
    g = b.build()
    return Problem(g, one), Plan(fusion=np.zeros(g.num_nodes) if fusion_off else None)


def test_peak_memory_of_a_chain(one_device):
    # a -> b -> c on one device, FIFO, no fusion.
    #   a runs:  out_a + temp_a            = 100 + 10        = 110
    #   b runs:  out_a + out_b + temp_b    = 100 + 200 + 20  = 320   <- peak
    #   c runs:  out_b + out_c + temp_c    = 200 + 50 + 5    = 255
    # plus persistent bytes for the whole step: 1000 (b) + 7 (c)  => 1327
    prob, plan = chain_problem([
        ("a", {"out_bytes": 100, "temp_bytes": 10}),
        ("b", {"out_bytes": 200, "temp_bytes": 20, "persistent_bytes": 1000, "inputs": ["a"]}),
        ("c", {"out_bytes": 50, "temp_bytes": 5, "persistent_bytes": 7, "inputs": ["b"]}),
    ], one_device)
    r = simulate(prob, plan)
    assert r.peak_memory.tolist() == [1327.0]
    assert r.valid and r.num_kernels == 3


def test_peak_memory_of_a_diamond(one_device):
    # a -> {b, c} -> d, one device, FIFO: a, b, c, d.
    #   a: 100;  b: a + b = 300;  c: a (still needed by c) + b + c = 600 <- peak;
    #   then a is freed when c ends; d: b + c + d = 510.
    prob, plan = chain_problem([
        ("a", {"out_bytes": 100}),
        ("b", {"out_bytes": 200, "inputs": ["a"]}),
        ("c", {"out_bytes": 300, "inputs": ["a"]}),
        ("d", {"out_bytes": 10, "inputs": ["b", "c"]}),
    ], one_device)
    r = simulate(prob, plan, timeline=True)
    assert r.peak_memory.tolist() == [600.0]
    order = r.timeline.kernel[np.argsort(r.timeline.start, kind="stable")]
    assert prob.graph.names[order].tolist() == ["a", "b", "c", "d"]


def test_peak_memory_with_an_unconsumed_output_and_scratch(one_device):
    # x (input: free, zero time) -> y;  z independent, runs between x and y (FIFO: ready first).
    #   x: 64;  z: x + z = 64 + 16 = 80, z's output dies with z (no consumer);
    #   y: x + y + temp_y = 64 + 32 + 1000 = 1096 <- peak;  persistent 500 (z)  => 1596
    prob, plan = chain_problem([
        ("x", {"op": "input", "out_bytes": 64}),
        ("y", {"out_bytes": 32, "temp_bytes": 1000, "inputs": ["x"]}),
        ("z", {"out_bytes": 16, "persistent_bytes": 500}),
    ], one_device)
    assert simulate(prob, plan).peak_memory.tolist() == [1596.0]
    assert simulate(prob, Plan(priority=[0.0, 0.0, 1.0])).peak_memory.tolist() == [1596.0]


def test_a_view_keeps_its_base_until_its_readers_are_done(one_device):
    # a -> v (a view of a: no bytes of its own) -> c; b runs between v and c (FIFO).
    #   a: 100;  v: 100;  b: a (kept: v is still to be read) + b = 100 + 50 = 150;
    #   c: a + b + c = 100 + 50 + 30 = 180 <- peak.  Were a freed when v ended: 80.
    prob, plan = chain_problem([
        ("a", {"out_bytes": 100}),
        ("v", {"op": "view", "inputs": ["a"]}),
        ("b", {"out_bytes": 50, "inputs": ["a"]}),
        ("c", {"out_bytes": 30, "inputs": ["v", "b"]}),
    ], one_device)
    assert prob.alias.tolist() == [-1, 0, -1, -1]
    assert simulate(prob, plan).peak_memory.tolist() == [180.0]
    # a view with no reader frees its base at once; a view of a view keeps the first base
    prob, plan = chain_problem([
        ("a", {"out_bytes": 100}),
        ("v", {"op": "view", "inputs": ["a"]}),
        ("w", {"op": "view", "inputs": ["v"]}),
        ("b", {"out_bytes": 50}),
        ("c", {"out_bytes": 30, "inputs": ["w", "b"]}),
    ], one_device)
    assert simulate(prob, plan).peak_memory.tolist() == [180.0]


def test_step_buffers_hold_transfers_for_the_whole_step():
    # a on dev 0 -> b -> c on dev 1; d -> e on dev 0, d long, starting when a ends.
    #   own rule: dev 0 frees out_a (100) once its transfer ends (during d): e runs with
    #   d + e = 5 + 200 = 205; dev 1 frees the received 100 when b ends: 100 + 40 = 140.
    #   step buffers: dev 0 keeps out_a to the end: 100 + 5 + 200 = 305; dev 1 holds the
    #   received 100 from the start: 100 + b 40 + c 20 = 160.
    g = GraphBuilder("t")
    g.add_node("a", "my_custom_op", flops=1e6, out_bytes=100)
    g.add_node("b", "my_custom_op", flops=1e6, out_bytes=40, inputs=["a"])
    g.add_node("c", "my_custom_op", flops=1e6, out_bytes=20, inputs=["b"])
    g.add_node("d", "my_custom_op", flops=1e9, out_bytes=5)
    g.add_node("e", "my_custom_op", flops=1e6, out_bytes=200, inputs=["d"])
    prob = Problem(g.build(), toy_cluster(2))
    plan = Plan(placement=[0, 1, 1, 0, 0], fusion=np.zeros(5))
    own = simulate(prob, plan)
    held = simulate(prob.with_step_buffers(), plan)
    assert own.peak_memory.tolist() == [205.0, 140.0]
    assert held.peak_memory.tolist() == [305.0, 160.0]
    assert held.step_time == own.step_time and prob.step_buffers.size == 0
    # a sender that packs a's output into a copy (per destination) holds it to the end
    copied = simulate(prob.with_step_buffers(np.array([30.0, 0, 0, 0, 0])), plan)
    assert copied.peak_memory.tolist() == [335.0, 160.0]


def toy_cluster(d: int = 2, bw: float = 1e9, lat: float = 1e-6, memory: float = 1e12) -> Cluster:
    devs = tuple(Device(f"dev:{i}", "toy", {"float32": 1e12}, 1e11, 1e11, memory, 1e-6)
                 for i in range(d))
    b, l_ = topology.all_to_all(d, bw, lat)
    return Cluster("toy", devs, b, l_)


def test_transfer_timing_and_memory_on_two_devices():
    # a on dev 0 -> b on dev 1.
    #   step = time(a) + latency + 100 B / bandwidth + time(b)
    #   dev 0 holds out_a from a's start until the transfer ends: 100 (+3 persistent)
    #   dev 1 holds the received 100 B from the transfer's start until b ends, plus
    #   out_b + temp_b while b runs: 100 + 40 + 7 = 147 (+1000 persistent)
    c = toy_cluster(2, bw=1e9, lat=2e-6)
    b = GraphBuilder("two")
    b.add_node("a", "my_custom_op", flops=1e6, out_bytes=100, persistent_bytes=3)
    b.add_node("b", "my_custom_op", flops=2e6, out_bytes=40, temp_bytes=7, persistent_bytes=1000,
               inputs=["a"])
    prob = Problem(b.build(), c)
    plan = Plan(placement=[0, 1], fusion=np.zeros(2))
    r = simulate(prob, plan, timeline=True)
    t = prob.costs.time
    assert r.step_time == pytest.approx(t[0, 0] + 2e-6 + 100 / 1e9 + t[1, 1], rel=1e-12)
    assert r.peak_memory.tolist() == [103.0, 1147.0]
    assert r.bytes_moved == 100.0
    check_timeline(prob, plan, r)


def test_an_output_is_sent_once_per_destination_device():
    b = GraphBuilder("fan")
    b.add_node("src", "my_custom_op", out_bytes=1000)
    for i in range(3):
        b.add_node(f"use{i}", "my_custom_op", inputs=[("src", 1000.0 - i)])
    prob = Problem(b.build(), toy_cluster(3))
    plan = Plan(placement=[0, 1, 1, 2], fusion=np.zeros(4))
    r = simulate(prob, plan, timeline=True)
    assert sorted(r.timeline.transfer_dst.tolist()) == [1, 2]
    assert r.bytes_moved == 1000.0 + 998.0
    check_timeline(prob, plan, r)


def test_out_of_memory_names_the_device():
    c = toy_cluster(2, memory=1000.0)
    b = GraphBuilder("oom")
    b.add_node("small", "my_custom_op", out_bytes=10)
    b.add_node("big", "my_custom_op", persistent_bytes=5000, inputs=["small"])
    prob = Problem(b.build(), c)
    r = simulate(prob, Plan(placement=[0, 1]))
    assert not r.valid and r.reason.startswith("OOM on dev:1")
    assert simulate(prob, Plan(placement=[1, 0])).reason.startswith("OOM on dev:0")
    batch = simulate_batch(prob, np.array([[0, 1], [1, 0], [0, 0]]))
    assert batch.valid.tolist() == [False, False, False]
    assert batch.reason_code.tolist() == [1, 1, 1] and batch.reason_arg.tolist() == [1, 0, 0]


def test_a_split_colocation_group_is_invalid():
    b = GraphBuilder("coloc")
    b.add_node("weight", "parameter", persistent_bytes=8, coloc="layer")
    b.add_node("update", "sgd_update", inputs=["weight"], coloc="layer")
    prob = Problem(b.build(), toy_cluster(2))
    assert simulate(prob, Plan(placement=[1, 1])).valid
    r = simulate(prob, Plan(placement=[0, 1]))
    assert not r.valid and "colocation group" in r.reason
    assert "weight" in r.reason and "update" in r.reason
    batch = simulate_batch(prob, np.array([[1, 1], [0, 1]]))
    assert batch.valid.tolist() == [True, False] and batch.reason_code.tolist() == [0, 2]


# -- scheduling ---------------------------------------------------------------------------------
def fan_problem(one: Cluster) -> Problem:
    b = GraphBuilder("fan")
    b.add_node("root", "my_custom_op", flops=1e6, out_bytes=8)
    for nm in ("x", "y", "z"):
        b.add_node(nm, "my_custom_op", flops=1e6, out_bytes=8, inputs=["root"])
    return Problem(b.build(), one)


def run_order(prob: Problem, plan: Plan) -> list[str]:
    tl = simulate(prob, plan, timeline=True).timeline
    return prob.graph.names[tl.kernel[np.argsort(tl.start, kind="stable")]].tolist()


def test_higher_priority_runs_first_ties_by_index(one_device):
    prob = fan_problem(one_device)
    off = np.zeros(4)
    assert run_order(prob, Plan(fusion=off)) == ["root", "x", "y", "z"]
    assert run_order(prob, Plan(fusion=off, priority=[0, 1, 2, 3])) == ["root", "z", "y", "x"]
    assert run_order(prob, Plan(fusion=off, priority=[0, 5, 1, 5])) == ["root", "x", "z", "y"]
    assert run_order(prob, Plan(fusion=off, priority=[0, 0, 0, 0])) == ["root", "x", "y", "z"]


# -- simulate_batch ------------------------------------------------------------------------------
@given(problems(), st.integers(1, 6), st.integers(0, 2**32 - 1), st.booleans(),
       st.sampled_from(["default", "off", "random"]), st.booleans())
@settings(max_examples=40)
def test_simulate_batch_equals_simulate_plan_by_plan(prob, b, seed, with_prio, fus, tight):
    if tight:  # make some plans run out of memory
        peak = simulate(prob).peak_memory.max()
        prob = Problem(prob.graph, prob.cluster.with_memory(max(peak * 0.6, 1.0)))
    n, d = prob.num_nodes, prob.num_devices
    rng = np.random.default_rng(seed)
    place = rng.integers(0, d, size=(b, n))
    place[0] = coloc_respecting(prob.graph, place[0])
    prio = rng.normal(size=(b, n)) if with_prio else None
    fusion = (None if fus == "default" else np.zeros((b, n)) if fus == "off"
              else rng.uniform(-1, 1, (b, n)))
    batch = simulate_batch(prob, place, prio, fusion)
    assert batch.step_time.shape == batch.valid.shape == (b,)
    assert batch.peak_memory.shape == (b, d)
    for i in range(b):
        r = simulate(prob, Plan(placement=place[i], priority=None if prio is None else prio[i],
                                fusion=None if fusion is None else fusion[i]))
        assert batch.step_time[i] == r.step_time
        assert bool(batch.valid[i]) == r.valid
        assert batch.peak_memory[i].tobytes() == r.peak_memory.tobytes()
        code = 0 if r.valid else 1 if r.reason.startswith("OOM") else 2
        assert batch.reason_code[i] == code


def test_simulate_batch_of_no_plans(small_cluster):
    prob = Problem(layered_graph(3, 2, seed=0), small_cluster)
    out = simulate_batch(prob, np.zeros((0, prob.num_nodes), np.int64))
    assert out.step_time.shape == (0,) and out.peak_memory.shape == (0, 4)


# -- timeline and fusion -----------------------------------------------------------------------
@given(problem_and_plan(respect_coloc=False))
@settings(max_examples=50)
def test_timeline_obeys_every_rule(pp):
    prob, plan = pp
    r = simulate(prob, plan, timeline=True)
    check_timeline(prob, plan, r)
    check_fusion(prob, plan, r.timeline)
    assert_same_result(simulate(prob, plan), r.__class__(**{**vars(r), "timeline": None}))


@given(problems(), st.integers(0, 2**32 - 1))
def test_fusion_off_gives_one_kernel_per_node_and_default_no_more(prob, seed):
    n, d = prob.num_nodes, prob.num_devices
    place = np.random.default_rng(seed).integers(0, d, n)
    off = simulate(prob, Plan(placement=place, fusion=np.zeros(n)), timeline=True)
    assert off.num_kernels == n
    assert np.array_equal(off.timeline.group, np.arange(n))
    default = simulate(prob, Plan(placement=place), timeline=True)
    assert default.num_kernels <= n
    check_fusion(prob, Plan(placement=place), default.timeline)
    one = simulate(prob, Plan(), timeline=True)
    assert one.num_kernels <= default.num_kernels or d == 1, "splitting devices never fuses more"


@given(problems(specs=("dgx1-v100:4",)), st.integers(1, 4))
def test_max_fusion_size_bounds_every_group(prob, size):
    small = Problem(prob.graph, prob.cluster, max_fusion_size=size)
    r = simulate(small, Plan(), timeline=True)
    check_fusion(small, Plan(), r.timeline)
    if size == 1:
        assert r.num_kernels == prob.num_nodes


def test_an_elementwise_chain_fuses_into_one_cheaper_kernel(one_device):
    b = GraphBuilder("chain")
    b.add_node("x", "input", shape=(1024,), out_bytes=4096)
    prev = "x"
    for nm in ("add", "mul", "relu", "exp"):
        b.add_node(f"{nm}0", nm, shape=(1024,), flops=1024, bytes_read=4096, bytes_written=4096,
                   inputs=[prev])
        prev = f"{nm}0"
    prob = Problem(b.build(), one_device)
    fused = simulate(prob, Plan(), timeline=True)
    unfused = simulate(prob, Plan(fusion=np.zeros(5)))
    assert fused.num_kernels < unfused.num_kernels == 5
    assert fused.step_time < unfused.step_time
    launch = one_device.devices[0].launch_overhead
    kernels_with_work = (prob.costs.launch[:, 0] > 0).sum()
    assert unfused.step_time - fused.step_time >= launch * (kernels_with_work - 1) * (1 - REL)


def test_fusion_never_crosses_devices():
    b = GraphBuilder("chain")
    b.add_node("x", "input", out_bytes=64)
    for i in range(4):
        b.add_node(f"r{i}", "relu", flops=16, bytes_read=64, bytes_written=64,
                   inputs=[f"r{i - 1}" if i else "x"])
    prob = Problem(b.build(), toy_cluster(2))
    plan = Plan(placement=[0, 0, 0, 1, 1])
    r = simulate(prob, plan, timeline=True)
    check_fusion(prob, plan, r.timeline)
    assert r.num_kernels == 3  # the input launches no kernel but is not fused either
    assert r.timeline.group.tolist() == [0, 2, 2, 4, 4]


def test_fusion_priorities_pick_what_fuses(one_device):
    b = GraphBuilder("chain")
    for i in range(4):
        b.add_node(f"r{i}", "relu", flops=16, bytes_written=64, inputs=[f"r{i - 1}"] if i else [])
    prob = Problem(b.build(), one_device)
    r = simulate(prob, Plan(fusion=[1.0, 0.0, 1.0, 1.0]), timeline=True)
    assert r.timeline.group.tolist() == [1, 1, 3, 3]


# -- mlp example ---------------------------------------------------------------------------------
def test_mlp_training_step_on_two_gpus(small_cluster):
    g = mlp_training_graph(layers=3, hidden=64, batch=8)
    prob = Problem(g, small_cluster.take(2))
    r = simulate(prob, Plan(), timeline=True)
    assert r.valid and r.step_time >= prob.lower_bound * (1 - REL) and r.bytes_moved == 0.0
    place = coloc_respecting(g, np.arange(g.num_nodes) % 2)
    split = simulate(prob, Plan(placement=place), timeline=True)
    assert split.valid and split.bytes_moved > 0
    check_timeline(prob, Plan(placement=place), split)
    assert r.to_dict()["bound_ratio"] >= 1 - REL


def test_empty_graph(small_cluster):
    prob = Problem(GraphBuilder("empty").build(), small_cluster)
    r = simulate(prob, Plan(), timeline=True)
    assert r.step_time == 0.0 and r.valid and r.num_kernels == 0
    assert simulate_batch(prob, np.zeros((2, 0), np.int64)).step_time.tolist() == [0.0, 0.0]


# -- bad input ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prob4() -> Problem:
    return Problem(layered_graph(4, 3, seed=1), cluster("dgx1-v100:4"))


@pytest.mark.parametrize("field", ["placement", "priority", "fusion"])
@pytest.mark.parametrize("length", [0, 11, 13])
def test_simulate_rejects_a_plan_of_the_wrong_length(prob4, field, length):
    with pytest.raises(PlanError, match=f"{field} has {length} entries.*12 nodes"):
        simulate(prob4, Plan(**{field: np.zeros(length, np.int64)}))


@pytest.mark.parametrize("bad", [-1, 4, 100])
def test_simulate_rejects_a_device_out_of_range(prob4, bad):
    place = np.zeros(12, np.int64)
    place[5] = bad
    with pytest.raises(PlanError, match=f"node 5 on device {bad}.*0..3"):
        simulate(prob4, Plan(placement=place))


@pytest.mark.parametrize("bad", [-1, 4])
def test_simulate_batch_rejects_a_device_out_of_range(prob4, bad):
    place = np.zeros((3, 12), np.int64)
    place[2, 7] = bad
    with pytest.raises(PlanError, match=f"plan 2 places node 7 on device {bad}.*0..3"):
        simulate_batch(prob4, place)


@pytest.mark.parametrize("shape", [(12,), (2, 11), (2, 13), (1, 2, 12)])
def test_simulate_batch_rejects_placements_of_the_wrong_shape(prob4, shape):
    with pytest.raises(PlanError, match=r"placements must have shape \(B, 12\)"):
        simulate_batch(prob4, np.zeros(shape, np.int64))


@pytest.mark.parametrize("name", ["priorities", "fusion"])
def test_simulate_batch_rejects_bad_priority_arrays(prob4, name):
    place = np.zeros((2, 12), np.int64)
    kw = {"priorities": None, "fusion": None}
    kw[name] = np.zeros((2, 11))
    with pytest.raises(PlanError, match=f"{name} must have shape"):
        simulate_batch(prob4, place, **kw)
    kw[name] = np.zeros((2, 12))
    kw[name][1, 3] = np.nan
    with pytest.raises(PlanError, match=f"{name} contains a non-finite"):
        simulate_batch(prob4, place, **kw)


def cyclic_graph() -> Graph:
    b = GraphBuilder("cyc")
    b.add_node("first", "relu", flops=10, bytes_written=8)
    b.add_node("second", "relu", flops=10, bytes_written=8, inputs=["first"])
    g = b.build()
    return g.replace(src=np.array([0, 1]), dst=np.array([1, 0]), edge_bytes=np.array([8.0, 8.0]))


def test_problem_rejects_a_cyclic_graph(small_cluster):
    with pytest.raises(GraphError, match="first"):
        simulate(Problem(cyclic_graph(), small_cluster))


def test_problem_rejects_an_out_of_range_edge(small_cluster):
    g = cyclic_graph().replace(src=np.array([0]), dst=np.array([5]), edge_bytes=np.array([8.0]))
    with pytest.raises(GraphError, match="dst=5"):
        simulate(Problem(g, small_cluster))
