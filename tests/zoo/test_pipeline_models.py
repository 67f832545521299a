"""The ``pipe:t5`` and ``pipe:vit`` models: one tensor between layers, the loss of the
Sequential the loss of the layers one by one, stock ``transformers``' outputs, every
layer found in the traced step, and a 2-stage plan run for real."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from graphopt.cli import app
from graphopt.errors import GraphoptError
from graphopt.exec.pipeline import pipeline_available, trace_microbatch
from graphopt.sim.pipeline import op_layers
from graphopt.zoo.pipeline import build_pipeline_model

tf = pytest.importorskip("transformers")

T5 = "pipe:t5:layers=2,hidden=32,heads=2,seq=12,batch=4,vocab=50"
VIT = "pipe:vit:layers=2,hidden=32,heads=2,image=8,patch=4,batch=4,classes=5"


@pytest.mark.parametrize("spec, output", [(T5, (4, 12, 50)), (VIT, (4, 5))])
def test_layers_chain_one_tensor_and_the_trace_finds_every_layer(spec, output):
    model = build_pipeline_model(spec)
    assert len(model.layers) == 4  # embedding, 2 blocks, head
    x, = model.inputs
    with torch.no_grad():
        for layer in model.layers:
            x = layer(x)
            assert isinstance(x, torch.Tensor)
        assert tuple(x.shape) == output
        assert float(model.loss(model.module(*model.inputs), model.target)) == \
            float(model.loss(x, model.target))
    layer = op_layers(trace_microbatch(model, 2).graph, model.blocks)
    assert sorted(set(layer.tolist())) == list(range(len(model.layers)))


def test_t5_is_the_stock_encoder_at_initialization_its_bias_tables_untied():
    model = build_pipeline_model(T5)
    torch.manual_seed(0)  # the builder's seed: the same weights, drawn in the same order
    cfg = tf.T5Config(num_layers=2, d_model=32, d_kv=16, d_ff=128, num_heads=2, vocab_size=50,
                      dropout_rate=0.0)
    stock = tf.T5EncoderModel(cfg).eval()
    with torch.no_grad():
        hidden = torch.nn.Sequential(*model.layers[:-1])(*model.inputs)
        torch.testing.assert_close(model.layers[-1].norm(hidden),
                                   stock(input_ids=model.inputs[0]).last_hidden_state)
    tables = [b.block.layer[0].SelfAttention.relative_attention_bias.weight
              for b in model.layers[1:-1]]
    assert len({id(t) for t in tables}) == len(tables)  # one per block, trained apart
    assert all(torch.equal(t, tables[0]) for t in tables)


def test_vit_is_stock_vit_for_image_classification():
    model = build_pipeline_model(VIT)
    torch.manual_seed(0)
    cfg = tf.ViTConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                       intermediate_size=128, image_size=8, patch_size=4, num_labels=5,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    stock = tf.ViTForImageClassification(cfg).eval()
    with torch.no_grad():
        torch.testing.assert_close(model.module(*model.inputs),
                                   stock(pixel_values=model.inputs[0]).logits)
    assert tuple(model.inputs[0].shape) == (4, 3, 8, 8) and int(model.target.max()) < 5


@pytest.mark.parametrize("spec, words", [
    ("pipe:t5:hidden=30,heads=4", "heads=4 must divide hidden=30"),
    ("pipe:vit:heads=3", "heads=3 must divide hidden=256"),
    ("pipe:vit:image=8,patch=16", "patch=16 must be at most image=8"),
    ("pipe:t5:image=8", "t5 has no override 'image'"),
    ("pipe:vit:seq=8", "vit has no override 'seq'"),
])
def test_bad_sizes_are_one_error_naming_the_source(spec, words):
    with pytest.raises(GraphoptError, match=words) as e:
        build_pipeline_model(spec)
    assert spec in str(e.value)


@pytest.mark.skipif(not pipeline_available(), reason="no torch.distributed.pipelining with gloo")
def test_vit_two_stage_plan_runs_with_the_unsplit_loss(tmp_path):
    # the plan written here, not by optimize: its tracing is the test above's
    plan = tmp_path / "pipeline.json"
    plan.write_text(json.dumps({"format": "graphopt-pipeline", "model": VIT, "bounds": [0, 2, 4],
                                "schedule": "1f1b", "microbatches": 2}))
    r = CliRunner().invoke(app, ["run", VIT, "--pipeline", str(plan), "--devices", "cpu:2",
                                 "--steps", "1"])
    # run --pipeline exits 2 when the first step's loss differs from the unsplit model's
    assert r.exit_code == 0, r.output
    assert "measured" in r.output and "unsplit" in r.output
