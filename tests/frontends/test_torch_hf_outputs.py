"""A torch.export archive of a Hugging Face model, whose outputs are transformers'
ModelOutput classes, loads in a fresh process (issue 36)."""

import subprocess
import sys

import pytest
import torch

from graphopt.frontends.torch import _register_output_types


def test_hf_model_output_archive_loads_in_a_fresh_process(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=50)
    model = transformers.BertModel(cfg).eval()
    ep = torch.export.export(model, (torch.randint(0, 50, (2, 8)),))
    torch.export.save(ep, tmp_path / "bert.pt2")
    code = ("from graphopt.frontends import load_source; "
            f"g = load_source({str(tmp_path / 'bert.pt2')!r}); print(g.num_nodes)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 10


def test_only_known_libraries_are_imported_for_output_types():
    named = NotImplementedError("Deserializing os.path.Thing in pytree is not registered.")
    assert not _register_output_types(named)
    assert not _register_output_types(ValueError("something else"))
    missing = NotImplementedError(
        "Deserializing transformers.no_such_module.Out in pytree is not registered.")
    assert not _register_output_types(missing)
