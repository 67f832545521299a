"""The zoo: every model family trains at a tiny size, the registry's contents, the cache.

Full-size graphs are never built here (bench/zoo_sizes.py does that); every model runs
through the same code at a tiny size instead.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from graphopt import zoo
from graphopt.errors import GraphoptError
from graphopt.ir import save_graph
from graphopt.zoo import cache as zoo_cache
from graphopt.zoo.models import FAMILIES
from graphopt.zoo.models._common import count_parameters

#: A tiny configuration of every family: same code, small widths and lengths.
TINY: dict[str, dict] = {
    "rnnlm": {"layers": 2, "hidden": 16, "vocab": 50, "seq_len": 4, "batch": 3},
    "gnmt": {"layers": 3, "hidden": 16, "vocab": 50, "src_len": 5, "tgt_len": 4, "batch": 3},
    "transformer_xl": {"layers": 2, "d_model": 16, "heads": 2, "d_head": 8, "d_inner": 32,
                       "vocab": 50, "seg_len": 5, "mem_len": 3, "batch": 2},
    "inception_v3": {"image_size": 75, "batch": 2, "classes": 10},
    "amoebanet": {"normal_cells": 1, "filters": 16, "image_size": 32, "batch": 2, "classes": 10},
    "wavenet": {"stacks": 2, "layers": 4, "residual": 8, "dilation_channels": 8, "skip": 16,
                "classes": 32, "length": 40, "batch": 2},
    "bert": {"layers": 2, "d_model": 16, "heads": 2, "d_inner": 32, "vocab": 50, "seq_len": 12,
             "predictions": 3, "batch": 2},
    "gpt2": {"layers": 2, "d_model": 16, "heads": 2, "d_inner": 32, "vocab": 50, "context": 12,
             "batch": 2},
    "resnet": {"blocks": (1, 1, 1, 1), "image_size": 64, "batch": 2, "classes": 10},
}

NAMES = ["rnnlm-2", "rnnlm-4", "rnnlm-8", "gnmt-2", "gnmt-4", "gnmt-8", "transformer-xl-2",
         "transformer-xl-4", "transformer-xl-8", "inception-v3-b32", "inception-v3-b64",
         "amoebanet", "wavenet-2x18", "wavenet-4x36", "bert-base", "gpt2-small", "resnet-50"]


def tiny_entry(name: str = "rnnlm-2") -> zoo.ZooEntry:
    entry = zoo.get_entry(name)
    return entry.with_config(f"{name}-tiny", **TINY[entry.family])


# -- models ---------------------------------------------------------------------------------
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tiny_model_trains(family):
    model, inputs = FAMILIES[family].make(**TINY[family])
    loss = model(*inputs)
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{family}: {name} gets no gradient"
        assert torch.isfinite(p.grad).all(), f"{family}: {name} has a non-finite gradient"


def test_tiny_configs_cover_every_family():
    assert set(TINY) == set(FAMILIES)


def test_amoebanet_a_genotype_trains():
    model, inputs = FAMILIES["amoebanet"].make(**TINY["amoebanet"], cell="a")
    model(*inputs).backward()
    with pytest.raises(GraphoptError, match="unknown genotype 'z'"):
        FAMILIES["amoebanet"].make(**TINY["amoebanet"], cell="z")
    with pytest.raises(GraphoptError, match="multiple of 4.*got 6"):
        FAMILIES["amoebanet"].make(**{**TINY["amoebanet"], "filters": 6})


def test_amoebanet_narrow_cells_skip_the_bottleneck():
    # filters 8: the stem cells have 2 channels, too few for a channels / 4 bottleneck
    model, inputs = FAMILIES["amoebanet"].make(**{**TINY["amoebanet"], "filters": 8})
    model(*inputs).backward()


def test_gnmt_needs_two_layers():
    with pytest.raises(GraphoptError, match="layers >= 2"):
        FAMILIES["gnmt"].make(**{**TINY["gnmt"], "layers": 1})


def test_make_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    m1, x1 = FAMILIES["gnmt"].make(**TINY["gnmt"], seed=7)
    after = torch.rand(3)
    m2, x2 = FAMILIES["gnmt"].make(**TINY["gnmt"], seed=7)
    m3, _ = FAMILIES["gnmt"].make(**TINY["gnmt"], seed=8)
    assert torch.equal(before, after)
    assert all(torch.equal(a, b) for a, b in zip(x1, x2))
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    assert not torch.equal(m1.encoder[0].weight, m3.encoder[0].weight)


def test_paper_sizes_of_the_standard_models():
    # meta device: shapes and counts without allocating the weights
    with torch.device("meta"):
        # the reference implementations' counts (BERT with its pre-training heads)
        assert count_parameters(FAMILIES["bert"].Bert()) == 110_106_428
        assert count_parameters(FAMILIES["gpt2"].GPT2()) == 124_439_808
        assert count_parameters(FAMILIES["resnet"].ResNet()) == 25_557_032
        assert count_parameters(FAMILIES["inception_v3"].InceptionV3()) == 27_161_264
        # GPipe's AmoebaNet-D (18, 208) has 82M parameters (its Table 1)
        amoeba = FAMILIES["amoebanet"].AmoebaNet(normal_cells=6, filters=208)
        assert 80e6 < count_parameters(amoeba) < 82e6


# -- registry -------------------------------------------------------------------------------
def test_registry_lists_the_seventeen_models():
    assert zoo.list_models() == NAMES


@pytest.mark.parametrize("name, devices", [
    ("rnnlm-2", 2), ("rnnlm-4", 4), ("rnnlm-8", 8), ("gnmt-2", 2), ("gnmt-4", 4), ("gnmt-8", 8),
    ("transformer-xl-2", 2), ("transformer-xl-4", 4), ("transformer-xl-8", 8),
    ("inception-v3-b32", 2), ("inception-v3-b64", 2), ("amoebanet", 4), ("wavenet-2x18", 2),
    ("wavenet-4x36", 4)])
def test_device_counts_follow_go_table_2(name, devices):
    entry = zoo.get_entry(name)
    assert entry.num_devices == devices
    assert entry.reported is not None and entry.reported.go_one < entry.reported.human_expert


def test_reported_step_times():
    r = zoo.get_entry("gnmt-8").reported
    assert (r.go_one, r.human_expert, r.metis, r.hdp) == (0.440, 0.562, None, 0.693)
    assert zoo.get_entry("bert-base").reported is None


def test_held_out_families():
    held_out = zoo.list_models(train_split=False)
    assert held_out == ["amoebanet", "wavenet-2x18", "wavenet-4x36"]
    assert set(zoo.list_models(train_split=True)) == set(NAMES) - set(held_out)
    assert {zoo.get_entry(n).family for n in held_out} == zoo.HELD_OUT_FAMILIES


@pytest.mark.parametrize("name", NAMES)
def test_entry_config_fits_its_family(name):
    entry = zoo.get_entry(name)
    inspect.signature(FAMILIES[entry.family].make).bind(**entry.config)
    assert 1 <= entry.num_devices <= 8 and entry.description


def test_unknown_name_lists_known_names():
    with pytest.raises(GraphoptError, match="unknown zoo model 'gnmt-16'.*gnmt-8.*resnet-50"):
        zoo.get_entry("gnmt-16")
    with pytest.raises(GraphoptError, match="unknown zoo model"):
        zoo.build("nope")


def test_entry_rejects_unknown_family():
    with pytest.raises(GraphoptError, match="unknown family 'lstm'"):
        zoo.ZooEntry("x", "lstm", {}, 1, True)


# -- building and the cache -------------------------------------------------------------------
@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_CACHE", str(tmp_path))
    return tmp_path


def test_tiny_build_is_a_training_step(cache_root):
    entry = tiny_entry("rnnlm-2")
    g = zoo.build(entry, cache=False)
    g.validate()
    model, _ = entry.make()
    ops = g.op.tolist()
    assert ops.count("sgd_update") == len(list(model.parameters()))
    assert {"sigmoid_backward", "tanh_backward", "embedding_backward"} <= set(ops)
    # the unrolled recurrence: one input-and-state product per layer and step (4 x 2), plus
    # the output projection, in the forward pass
    assert ops.count("addmm") >= 4 * 2
    info = g.meta["zoo"]
    assert info["family"] == "rnnlm" and info["num_devices"] == 2 and info["train_split"]
    assert info["parameters"] == count_parameters(model)
    assert g.persistent_bytes.sum() >= 4 * count_parameters(model)
    assert not any(cache_root.rglob("*.npz"))  # cache=False writes nothing


def test_cache_round_trip(cache_root, monkeypatch):
    entry = tiny_entry("wavenet-2x18")
    g = zoo.build(entry)
    path = zoo.cache_path(entry)
    assert path.is_file() and path.parent == cache_root / "zoo" == zoo.cache_dir()

    def no_trace(_):
        raise AssertionError("a cached graph was traced again")

    monkeypatch.setattr(zoo_cache, "trace", no_trace)
    again = zoo.build(entry)
    assert again.num_nodes == g.num_nodes and again.names.tolist() == g.names.tolist()
    np.testing.assert_array_equal(again.flops, g.flops)
    np.testing.assert_array_equal(again.src, g.src)
    assert again.meta["zoo"] == g.meta["zoo"]


def test_cache_key_follows_config_and_sources(cache_root, monkeypatch, tmp_path):
    entry = tiny_entry("rnnlm-2")
    key = zoo_cache.cache_key(entry)
    assert zoo_cache.cache_key(entry) == key
    assert zoo_cache.cache_key(entry.with_config(entry.name, hidden=8)) != key
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    real = zoo_cache._sources
    monkeypatch.setattr(zoo_cache, "_sources", lambda m: real(m) + [source])
    first = zoo_cache.cache_key(entry)
    source.write_text("x = 2\n")
    assert zoo_cache.cache_key(entry) != first


def test_source_change_rebuilds_and_drops_the_stale_file(cache_root, monkeypatch, tmp_path):
    entry = tiny_entry("rnnlm-2")
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    real = zoo_cache._sources
    monkeypatch.setattr(zoo_cache, "_sources", lambda m: real(m) + [source])
    zoo.build(entry)
    old = zoo.cache_path(entry)
    zoo.build(tiny_entry("gnmt-2"))
    other = zoo.cache_path(tiny_entry("gnmt-2"))
    source.write_text("x = 2\n")
    new = zoo.cache_path(entry)
    assert new != old
    zoo.build(entry)
    assert new.is_file() and not old.exists() and other.is_file()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other key"])
def test_corrupted_cache_file_is_rebuilt_with_a_warning(cache_root, damage):
    entry = tiny_entry("rnnlm-2")
    g = zoo.build(entry)
    path = zoo.cache_path(entry)
    if damage == "garbage":
        path.write_bytes(b"not an npz file")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    else:
        save_graph(g.replace(meta={**g.meta, "zoo": {**g.meta["zoo"], "cache_key": "0" * 16}}),
                   path)
    with pytest.warns(RuntimeWarning, match="is unusable.*rebuilding rnnlm-2-tiny"):
        rebuilt = zoo.build(entry)
    assert rebuilt.num_nodes == g.num_nodes
    assert zoo.build(entry).meta["zoo"]["cache_key"] == zoo_cache.cache_key(entry)


def test_unwritable_cache_still_returns_the_graph(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GRAPHOPT_CACHE", str(blocker))  # a file where a folder should be
    with pytest.warns(RuntimeWarning, match="cannot write the zoo cache"):
        g = zoo.build(tiny_entry("rnnlm-2"))
    assert g.num_nodes > 0
