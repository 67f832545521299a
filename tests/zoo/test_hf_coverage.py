"""The sixty hf: model types: the ones that failed before build as whole training steps,
fields tied to the sizes follow them, and a failing build is one line with no torch
traceback (bench/hf_coverage.py builds all sixty at both sizes)."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphopt.errors import GraphoptError
from graphopt.frontends import load_source
from graphopt.zoo.hf_models import SIZES, TYPES, spec

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def test_sixty_types_of_six_kinds():
    names = [t.model_type for t in TYPES]
    assert len(names) == len(set(names)) == 60
    families = collections.Counter(t.family for t in TYPES)
    assert set(families) == {"decoder", "moe", "encoder", "encoder-decoder", "vision", "speech"}
    assert all(t.why for t in TYPES) and set(SIZES) == {"tiny", "small"}


@pytest.mark.parametrize("source, experts", [
    (spec("qwen2_moe", "tiny"), True),  # grouped_mm took bfloat16 only under fake tensors
    (spec("wav2vec2", "tiny"), False),  # LayerDrop and SpecAugment: data-dependent guards
    (spec("swin", "tiny"), False),  # a 64-pixel image: window larger than the last stage
    (spec("qwen3", "small"), False),  # hidden 256, 4 heads: 32 key-value heads, head_dim 128
], ids=["qwen2_moe", "wav2vec2", "swin-64px", "qwen3-256x4"])
def test_previously_failing_types_build_a_training_step(source, experts):
    graph = load_source(source)
    ops = collections.Counter(str(o) for o in graph.op)
    params = [i for i, o in enumerate(graph.op) if o == "parameter"]
    assert ops["sgd_update"] == len(params) > 0  # every parameter is updated
    assert sum(n for o, n in ops.items() if o.endswith("_backward")) > 0
    elements = sum(int(graph.persistent_bytes[i]) // 4 for i in params)  # float32
    assert elements == graph.meta["hf"]["parameters"]  # the whole module, nothing twice
    expert_params = [graph.names[i] for i in params if "experts" in graph.names[i]]
    assert bool(expert_params) == experts
    if experts:  # the experts' weights are trained, not only routed through
        updated = {n.removesuffix(".sgd_update") for n in graph.names if n.endswith("sgd_update")}
        assert set(expert_params) <= updated


def test_fields_tied_to_the_sizes_follow_them():
    from graphopt.zoo.hf import make

    _, _, info = make("qwen3:hidden_size=256,num_attention_heads=4,num_hidden_layers=1")
    assert info["derived"]["head_dim"] == 64 and info["derived"]["num_key_value_heads"] == 4
    _, _, info = make("qwen3:hidden_size=256,num_attention_heads=4,num_hidden_layers=1,"
                      "head_dim=32")
    assert "head_dim" not in info["derived"]  # an override always wins
    _, _, info = make("swin:depths=1,embed_dim=8,num_heads=1,image=64")
    assert info["derived"]["window_size"] == 2  # 64 px / patch 4 / 2**3
    with pytest.raises(GraphoptError, match=r"depths='1/x': a list field takes numbers"):
        make("swin:depths=1/x")


def test_a_failing_build_is_one_line_without_torch_traceback():
    """Swin at 64 px with its 7-wide window kept fails in tracing; torch logs its own
    traceback (34 lines) before raising unless the build silences it."""
    source = "hf:swin:image=64,window_size=7,depths=1,embed_dim=8,num_heads=1"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "graphopt.cli", "info", source],
                       capture_output=True, text=True, env=env, timeout=300)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == "", r.stderr  # no torch traceback, no logged error
    assert len(lines) == 1 and lines[0].startswith(f"error: graph '{source}': "), lines
    assert "cannot trace a training step of SwinModel" in lines[0]
