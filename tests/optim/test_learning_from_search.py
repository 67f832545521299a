"""Learning from search: corpus targets, imitation with device-number-free loss, the CLI."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.corpus import CorpusItem, build_corpus
from graphopt.errors import GraphoptError
from graphopt.optim.base import Budget, optimize
from graphopt.optim.learned.go.env import (PRIOR_DEVICE_FEATURES, PRIOR_FEATURES, UNIT_FEATURES,
                                           GOEnv)
from graphopt.optim.learned.go.imitate import imitate, matched_cross_entropy, unit_targets
from graphopt.optim.learned.go.method import load_go_policy, reads_prior
from graphopt.optim.learned.targets import (assign_clusters, load_targets, prior_plans,
                                            search_targets)
from graphopt.sim import Plan, simulate

runner = CliRunner()

ITEMS = [CorpusItem(f"example:layered-60-s{s}", "layered") for s in range(3)] + [
    CorpusItem("example:layered-60-s9", "wavenet")]  # a held-out family: never a target


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    build_corpus(folder, ITEMS)
    search_targets(folder, budget=60, clusters=("p100:2", "p100:4"))
    return folder


def test_targets_are_searched_plans_no_worse_than_expert(corpus):
    doc = json.loads((corpus / "targets.json").read_text())
    entries = doc["entries"]
    assert len(entries) == 3  # the train split only
    assert sorted(e["cluster"] for e in entries.values()) == ["p100:2", "p100:2", "p100:4"]
    targets = load_targets(corpus)
    for t in targets:
        res = simulate(t.problem, t.plan)
        assert res.valid and res.step_time == pytest.approx(t.entry["step_time"])
        assert t.entry["step_time"] <= t.entry["expert_step_time"] * (1 + 1e-9)
        assert t.entry["evals"] <= 60 and t.family == "layered"


def test_search_resumes_and_a_policy_round_never_makes_a_target_worse(corpus, tmp_path):
    before = json.loads((corpus / "targets.json").read_text())["entries"]
    seen = []
    search_targets(corpus, budget=60, clusters=("p100:2", "p100:4"),
                   progress=lambda d, n, k, e: seen.append(e.get("reused")))
    assert seen == [True, True, True]
    imitate(load_targets(corpus), tmp_path / "p", epochs=1, dim=16)
    search_targets(corpus, budget=60, clusters=("p100:2", "p100:4"), policy=tmp_path / "p")
    after = json.loads((corpus / "targets.json").read_text())["entries"]
    for key, e in after.items():
        assert e["rounds"] == 2 and e["step_time"] <= before[key]["step_time"]


def test_assign_clusters_is_stable():
    assert assign_clusters(["c", "a", "b"], ("x", "y")) == {"a": "x", "b": "y", "c": "x"}
    with pytest.raises(GraphoptError):
        assign_clusters(["a"], ())


def test_no_targets_is_one_clear_error(tmp_path):
    build_corpus(tmp_path, ITEMS[:1])
    with pytest.raises(GraphoptError, match="corpus search"):
        load_targets(tmp_path)


def test_matched_loss_ignores_device_numbering():
    torch.manual_seed(0)
    z = torch.randn(30, 4)
    t = np.random.default_rng(0).integers(0, 4, 30)
    w = np.full(30, 1 / 30)
    perm = np.array([2, 0, 3, 1])
    a, acc_a = matched_cross_entropy(z, t, w, 4)
    b, acc_b = matched_cross_entropy(z, perm[t], w, 4)
    assert float(a) == pytest.approx(float(b)) and acc_a == acc_b
    # and it is the smallest loss over the renumberings
    import itertools
    logp = torch.log_softmax(z, 1)
    best = min(-(torch.as_tensor(w) * logp[torch.arange(30), torch.as_tensor(np.array(p)[t])]).sum()
               for p in itertools.permutations(range(4)))
    assert float(a) == pytest.approx(float(best))


def test_imitation_learns_the_targets_and_resumes(corpus, tmp_path):
    targets = load_targets(corpus)
    rows = []
    imitate(targets, tmp_path / "a", epochs=10, lr=1e-2, dim=16, progress=rows.append)
    assert rows[-1]["loss"] < rows[0]["loss"] and rows[-1]["accuracy"] > 0.8
    # a run stopped after 4 epochs and resumed ends with the same weights
    imitate(targets, tmp_path / "b", epochs=4, lr=1e-2, dim=16)
    imitate(targets, tmp_path / "b", epochs=10, lr=1e-2, dim=16)
    pa, info = load_go_policy(tmp_path / "a")
    pb, _ = load_go_policy(tmp_path / "b")
    for (k, va), vb in zip(pa.state_dict().items(), pb.state_dict().values()):
        assert torch.equal(va, vb), k
    assert info["method"] == "go-imitate" and len(info["history"]) == 10
    env = GOEnv(targets[0].problem, frozenset({"placement"}))
    t, w = unit_targets(env, targets[0].plan)
    assert len(t) == env.num_units and w.sum() == pytest.approx(1.0)


def test_cli_search_and_imitate(corpus, tmp_path):
    r = runner.invoke(app, ["corpus", "search", str(corpus), "--budget", "60",
                            "--clusters", "p100:2,p100:4"])
    assert r.exit_code == 0, r.output
    assert "[3/3] kept" in r.output
    r = runner.invoke(app, ["train", "imitate", str(corpus), "--epochs", "2",
                            "--out", str(tmp_path / "im")])
    assert r.exit_code == 0, r.output
    assert "epoch 2/2" in r.output and (tmp_path / "im" / "policy.json").is_file()
    # PPO continues from the imitation policy on the corpus's train split
    r = runner.invoke(app, ["train", "--corpus", str(corpus), "--init", str(tmp_path / "im"),
                            "--updates", "2", "--out", str(tmp_path / "ppo")])
    assert r.exit_code == 0, r.output
    info = json.loads((tmp_path / "ppo" / "policy.json").read_text())["info"]
    assert len(info["graphs"]) == 3 and info["updates"] == 2
    r = runner.invoke(app, ["optimize", "example:layered-60-s5", "-c", "p100:2", "--methods", "go",
                            "-p", f"go.checkpoint={tmp_path / 'im'}"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, words", [
    (["--method", "nope"], "nope"),
    (["--clusters", "nope:2"], "nope"),
    (["--split", "dev"], "--split"),
])
def test_cli_search_bad_options(corpus, args, words):
    r = runner.invoke(app, ["corpus", "search", str(corpus), *args])
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output


def test_cli_imitate_without_targets(tmp_path):
    build_corpus(tmp_path / "c", ITEMS[:1])
    r = runner.invoke(app, ["train", "imitate", str(tmp_path / "c"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "corpus search" in r.output


def test_transfer_benchmark_runs_every_control(corpus, tmp_path):
    from graphopt.benchmarks.go_transfer import run, to_markdown

    imitate(load_targets(corpus), tmp_path / "p", epochs=1, dim=16)
    result = run(corpus, tmp_path / "p", cluster="p100:2", budget=40, per_family=1,
                 out=tmp_path / "r.json")
    (row,) = result["rows"]  # the one held-out item
    assert row["family"] == "wavenet"
    assert set(row["step_time"]) == {"expert", "best", "portfolio", "go", "go-shuffled",
                                     "go-random", "go-shipped", "go-finetune",
                                     "go-finetune-random"}
    st = row["step_time"]
    assert st["portfolio"] <= st["best"] * (1 + 1e-9)
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["rows"] == 1
    assert "go beats all three controls" in to_markdown(result)


def test_shipped_corpus_policy_never_saw_a_held_out_family():
    from graphopt.benchmarks.go_transfer import held_out_seen

    policy, info = load_go_policy("go-corpus")
    assert len(info["graphs"]) > 300 and info["init"]
    assert held_out_seen(info) == []
    prior, info = load_go_policy("go-prior")
    assert reads_prior(prior) and not reads_prior(policy)
    assert len(info["graphs"]) > 300 and info["prior"] == "best" and "--prior" in info["command"]
    assert held_out_seen(info) == []
    assert held_out_seen(load_go_policy()[1]) == ["bert", "gpt2", "resnet"]  # the default saw them


def test_prior_inputs_describe_the_start_plan(corpus):
    t = load_targets(corpus)[0]
    d = t.problem.num_devices
    env = GOEnv(t.problem, frozenset({"placement"}), init=t.plan, prior_inputs=True)
    x = env.inputs()[0]
    assert x.shape[1] == len(UNIT_FEATURES) + len(PRIOR_FEATURES) + d * len(PRIOR_DEVICE_FEATURES)
    pair = env.prior_x[:, len(PRIOR_FEATURES):].reshape(env.num_units, d, -1).numpy()
    assert (env.prior_x[:, 0] == 1).all()
    assert (pair[:, :, 0].sum(1) == 1).all()  # one home each, the one the prior biases to
    assert (pair[:, :, 0].argmax(1) == env.home.numpy()).all()
    assert np.allclose(pair[:, :, 3][pair[:, :, 0] == 1], 0)  # load minus home's, at home
    # without a start plan the columns are there, at zero; without the flag they are not
    bare = GOEnv(t.problem, frozenset({"placement"}), prior_inputs=True)
    assert bare.inputs()[0].shape == x.shape and not bare.prior_x.any()
    assert GOEnv(t.problem, frozenset({"placement"})).inputs()[0].shape[1] == len(UNIT_FEATURES)


def test_prior_aware_go_learns_moves_and_never_loses_to_the_heuristics(corpus, tmp_path):
    targets = load_targets(corpus)
    priors = prior_plans(corpus, targets)
    assert (corpus / "priors").is_dir() and len(list((corpus / "priors").iterdir())) == 3
    again = prior_plans(corpus, targets)  # read back, not searched again
    assert all(a == b for a, b in zip(priors, again))
    rows = []
    imitate(targets, tmp_path / "p", epochs=3, lr=1e-2, dim=16, priors=priors, corpus=corpus,
            progress=rows.append)
    for t, prior in zip(targets, priors):  # the moves' gains, kept beside the priors
        key = t.key
        (path,) = (corpus / "priors").glob(f"{key}.*.moves.npy")
        gains = np.load(path)
        env = GOEnv(t.problem, frozenset({"placement"}), init=prior)
        assert gains.shape == (env.num_units, t.problem.num_devices)
        place = np.asarray(prior.placement)
        whole = np.array([(place[env.unit == k] == h).all() for k, h in enumerate(env.home.numpy())])
        assert whole.any() and (gains[np.arange(env.num_units), env.home.numpy()][whole] == 1).all()
        u, d = np.unravel_index(gains.argmax(), gains.shape)
        moved = np.asarray(prior.placement).copy()
        moved[env.unit == u] = d
        assert simulate(t.problem, prior).step_time / simulate(
            t.problem, Plan(placement=moved)).step_time == pytest.approx(gains.max())
    policy, info = load_go_policy(tmp_path / "p")
    assert reads_prior(policy) and info["prior"] == "best"
    assert rows[-1]["loss"] < rows[0]["loss"]
    with pytest.raises(GraphoptError, match="start plan"):
        imitate(targets, tmp_path / "q", epochs=1, init=tmp_path / "p")
    for t, prior in zip(targets, priors):
        plan, st = optimize(t.problem, "go", frozenset({"placement"}), Budget(evals=200), 0,
                            checkpoint=str(tmp_path / "p"))
        assert st["step_time"] <= st["prior_step_time"] * (1 + 1e-9)
        assert st["prior_step_time"] == pytest.approx(simulate(t.problem, prior).step_time)
        assert simulate(t.problem, plan).step_time == pytest.approx(st["step_time"])
    # fine-tuning keeps the pre-trained pair head: its first plans are the policy's moves
    _, st = optimize(targets[0].problem, "go-finetune", frozenset({"placement"}),
                     Budget(evals=150), 0, checkpoint=str(tmp_path / "p"), progress=False)
    assert st["valid"] and st["step_time"] <= st["start_step_time"] * (1 + 1e-9)
    # PPO continues it on the corpus, each graph around its prior
    r = runner.invoke(app, ["train", "--corpus", str(corpus), "--init", str(tmp_path / "p"),
                            "--updates", "2", "--out", str(tmp_path / "ppo")])
    assert r.exit_code == 0, r.output
    info = json.loads((tmp_path / "ppo" / "policy.json").read_text())["info"]
    assert info["prior"] == "best" and reads_prior(load_go_policy(tmp_path / "ppo")[0])


def test_prior_load_columns_are_the_loads_after_each_move():
    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import layered_graph
    from graphopt.sim import Problem

    p = Problem(layered_graph(5, 3, seed=1), load_cluster("p100:3"))
    place = np.arange(p.num_nodes) % 3
    units = np.arange(p.num_nodes) // 2  # each node's two ops on two devices
    env = GOEnv(p, frozenset({"placement"}), units, Plan(placement=place), prior_inputs=True)
    pair = env.prior_x[:, len(PRIOR_FEATURES):].reshape(env.num_units, 3, -1).numpy()
    t = p.costs.time.mean(1)
    fair = t.sum() / 3
    load = np.bincount(place, t, 3) / fair
    for u in range(env.num_units):
        for d in range(3):
            moved = place.copy()
            moved[units == u] = d  # as move_gains moves a node: all its ops
            after = np.bincount(moved, t, 3) / fair
            assert pair[u, d, 5] == pytest.approx(min(after[d], 4.0), abs=1e-6)
            assert pair[u, d, 6] == pytest.approx(after.max() - load.max(), abs=1e-6)


def test_transfer_benchmark_with_a_prior_aware_candidate(corpus, tmp_path):
    from graphopt.benchmarks.go_transfer import run

    targets = load_targets(corpus)
    imitate(targets, tmp_path / "p", epochs=1, dim=16, priors=prior_plans(corpus, targets),
            corpus=corpus)
    (row,) = run(corpus, tmp_path / "p", cluster="p100:2", budget=40, per_family=1,
                 finetune=False)["rows"]
    st = row["step_time"]
    for name in ("go", "go-random", "go-shuffled"):  # each moves off best's plan, which competes
        assert st[name] <= st["best"] * (1 + 1e-9)


def test_shipped_prior_policy_from_the_command_line():
    r = runner.invoke(app, ["optimize", "example:layered-60-s5", "-c", "p100:4", "--methods",
                            "best,go", "-p", "go.checkpoint=go-prior"])
    assert r.exit_code == 0, r.output


def test_kept_move_gains_that_do_not_match_are_recomputed(corpus):
    from graphopt.optim.learned.targets import prior_moves

    targets = load_targets(corpus)[:1]
    priors = prior_plans(corpus, targets)
    units = [GOEnv(targets[0].problem, frozenset({"placement"})).unit]
    (good,) = prior_moves(corpus, targets, priors, units)
    key = targets[0].key
    (path,) = (corpus / "priors").glob(f"{key}.*.moves.npy")
    for bad in (b"not an npy file", None):
        if bad is None:  # a header that claims a huge array: refused before allocating
            np.save(path, np.zeros((1, 1)))
            raw = path.read_bytes().replace(b"(1, 1)", b"(10000000000, 100000)")
            path.write_bytes(raw)
        else:
            path.write_bytes(bad)
        (again,) = prior_moves(corpus, targets, priors, units)
        assert np.array_equal(again, good)


@pytest.mark.parametrize("source", [
    "hf:llama:num_hidden_layers=2,hidden_size=64,num_attention_heads=4,num_key_value_heads=2,"
    "intermediate_size=128,seq=16,batch=2",   # a held-out family, built by transformers
    "hf:whisper:encoder_layers=1,decoder_layers=1,d_model=32,encoder_attention_heads=2,"
    "decoder_attention_heads=2,encoder_ffn_dim=64,decoder_ffn_dim=64,seq=8,batch=1",
])
def test_shipped_prior_policy_on_a_transformers_model(source):
    pytest.importorskip("transformers")
    from graphopt.frontends import load_source
    from graphopt.hardware import load_cluster
    from graphopt.sim import Problem

    problem = Problem(load_source(source), load_cluster("p100:4"))
    plan, st = optimize(problem, "go", frozenset({"placement"}), Budget(evals=400), 0,
                        checkpoint="go-prior")
    res = simulate(problem, plan)
    assert res.valid and res.step_time == pytest.approx(st["step_time"])
    assert st["step_time"] <= st["prior_step_time"] * (1 + 1e-9)
    expert, _ = optimize(problem, "expert", frozenset({"placement"}), Budget(evals=1), 0)
    assert st["step_time"] <= simulate(problem, expert).step_time * (1 + 1e-9)


def test_prior_aware_go_starts_from_the_heuristics_it_is_given():
    from graphopt.hardware import load_cluster
    from graphopt.ir.generate import layered_graph
    from graphopt.sim import Problem

    p = Problem(layered_graph(6, 4, seed=2), load_cluster("p100:4"))
    expert, _ = optimize(p, "expert", frozenset({"placement"}), Budget(evals=1), 0)
    _, st = optimize(p, "go", frozenset({"placement"}), Budget(evals=100), 0,
                     checkpoint="go-prior", heuristics="expert")
    assert st["prior_step_time"] == pytest.approx(simulate(p, expert).step_time)
    assert st["evals"] <= 1 + 16 and st["step_time"] <= st["prior_step_time"] * (1 + 1e-9)
