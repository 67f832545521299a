"""``hf:MODEL_TYPE[:key=value,...]``: a Hugging Face ``transformers`` model as a training-step graph.

The model is built from its default configuration, ``AutoConfig.for_model(MODEL_TYPE,
**overrides)``, with random weights (nothing is downloaded), given one seeded batch of
the inputs its ``main_input_name`` asks for, and traced as one whole training step
(forward, a loss, backward, SGD update) by the PyTorch frontend, as the zoo's models are.

Overrides are configuration fields (``num_hidden_layers=2``) plus the batch's shape:

- ``batch`` (default 2) — examples per step;
- ``seq`` (default 32) — tokens per example for text models, also the decoder's length
  for encoder-decoder models;
- ``image`` (default: the configuration's ``image_size``, else 64) — pixels per side
  for vision models (also set as the configuration's ``image_size`` where it has one);
- ``samples`` (default 4,000) — audio samples per example for waveform models
  (``input_values``).

The loss is the frontend's default: the sum of the means of the model's floating-point
outputs. Needs the optional ``transformers`` package: ``pip install 'graphopt[hf]'``.

>>> graph = build("bert:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,"
...               "intermediate_size=64,seq=8")  # doctest: +SKIP
"""

from __future__ import annotations

import json
from typing import Any

import torch
from torch import Tensor, nn

from graphopt.errors import GraphoptError
from graphopt.ir.graph import Graph
from graphopt.zoo.registry import parse_overrides

__all__ = ["INSTALL_HINT", "SHAPE_KEYS", "build", "make", "model", "parse_spec"]

#: What to run when ``transformers`` is missing.
INSTALL_HINT = "pip install 'graphopt[hf]'"

#: Override keys that shape the example batch rather than the configuration.
SHAPE_KEYS = {"batch": 2, "seq": 32, "image": None, "samples": 4000}

#: Bounds on the batch's shape, against a typo building a huge graph.
_MAX_SHAPE = {"batch": 4096, "seq": 65536, "image": 4096, "samples": 1_000_000}


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"bert:num_hidden_layers=2,seq=128"`` → ``("bert", {"num_hidden_layers": 2, "seq": 128})``.

    >>> parse_spec("gpt2:n_layer=2,batch=4")
    ('gpt2', {'n_layer': 2, 'batch': 4})

    Raises
    ------
    GraphoptError
        No model type, or an override not written ``key=value``, or a key given twice.
    """
    model_type, _, rest = spec.partition(":")
    if not model_type:
        raise GraphoptError(f"graph 'hf:{spec}': expected hf:MODEL_TYPE[:key=value,...], "
                            "e.g. hf:bert:num_hidden_layers=2,seq=128")
    overrides = parse_overrides(f"hf:{spec}", rest)
    return model_type, overrides


def _transformers():
    try:
        import transformers
    except ImportError:
        raise GraphoptError(f"hf: graphs need the 'transformers' package: {INSTALL_HINT}") \
            from None
    transformers.logging.set_verbosity_error()
    return transformers


class _TrainingStep(nn.Module):
    """Calls a ``transformers`` model with named inputs given positionally."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs: Tensor) -> Any:
        out = self.model(**dict(zip(self.names, inputs, strict=True)), return_dict=False)
        return tuple(o for o in out if isinstance(o, Tensor) and o.is_floating_point())


def _inputs(config: Any, main: str, shape: dict[str, Any], gen: torch.Generator
            ) -> dict[str, Tensor]:
    """One seeded batch of what the model's ``main_input_name`` and its kind ask for."""
    batch, seq = shape["batch"], shape["seq"]
    vocab = getattr(config, "vocab_size", None) or 100
    if main == "input_ids":
        ids = {"input_ids": torch.randint(0, vocab, (batch, seq), generator=gen)}
    elif main == "pixel_values":
        size = shape["image"] or getattr(config, "image_size", None) or 64
        size = size[0] if isinstance(size, (list, tuple)) else size
        if isinstance(size, dict):
            size = size.get("height", 64)
        channels = getattr(config, "num_channels", 3)
        ids = {"pixel_values": torch.randn(batch, channels, size, size, generator=gen)}
    elif main == "input_values":
        ids = {"input_values": torch.randn(batch, shape["samples"], generator=gen)}
    elif main == "input_features":
        bins = getattr(config, "num_mel_bins", 80)
        frames = 2 * getattr(config, "max_source_positions", 1500)
        ids = {"input_features": torch.randn(batch, bins, frames, generator=gen)}
    else:
        raise GraphoptError(f"hf:{config.model_type}: the model needs the input {main!r}, "
                            "which this source does not make (it makes input_ids, "
                            "pixel_values, input_values and input_features)")
    if getattr(config, "is_encoder_decoder", False):
        ids["decoder_input_ids"] = torch.randint(0, vocab, (batch, seq), generator=gen)
    return ids


def make(spec: str) -> tuple[nn.Module, tuple[Tensor, ...], dict[str, Any]]:
    """``(module, example_inputs, info)`` for ``spec`` (``MODEL_TYPE[:key=value,...]``).

    Raises
    ------
    GraphoptError
        ``transformers`` is missing, the model type is unknown, an override is not a
        field of its configuration or is out of range, or the model needs an input
        this source does not make.
    """
    model_type, overrides = parse_spec(spec)
    shape = {k: overrides.pop(k, default) for k, default in SHAPE_KEYS.items()}
    for key, value in shape.items():
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or not 1 <= value <= _MAX_SHAPE[key]):
            raise GraphoptError(f"graph 'hf:{spec}': {key}={value!r} must be an integer "
                                f"1..{_MAX_SHAPE[key]:,}")
    tf = _transformers()
    try:
        config = tf.AutoConfig.for_model(model_type)
    except ValueError:
        raise GraphoptError(f"graph 'hf:{spec}': unknown transformers model type "
                            f"{model_type!r} (transformers {tf.__version__}); e.g. bert, "
                            "gpt2, t5, vit") from None
    for key, value in overrides.items():
        if not hasattr(config, key):
            raise GraphoptError(f"graph 'hf:{spec}': {key!r} is not a field of "
                                f"{type(config).__name__} (nor one of "
                                f"{', '.join(SHAPE_KEYS)})")
        setattr(config, key, value)
    if shape["image"] is not None and isinstance(getattr(config, "image_size", None), int):
        config.image_size = shape["image"]  # vision models check their input against it
    torch.manual_seed(0)
    try:
        model = tf.AutoModel.from_config(config)
    except Exception as err:  # noqa: BLE001 - transformers raises anything on a bad config
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GraphoptError(f"graph 'hf:{spec}': transformers cannot build {model_type} "
                            f"with these settings: {first}") from None
    gen = torch.Generator().manual_seed(0)
    inputs = _inputs(config, getattr(model, "main_input_name", "input_ids"), shape, gen)
    info = {"model_type": model_type, "class": type(model).__name__,
            "overrides": json.loads(json.dumps(overrides, default=str)),
            "shape": {k: v for k, v in shape.items() if v is not None},
            "transformers": tf.__version__,
            "parameters": sum(p.numel() for p in model.parameters())}
    return _TrainingStep(model, tuple(inputs)), tuple(inputs.values()), info


def build(spec: str) -> Graph:
    """The training-step graph ``hf:spec`` names; ``meta["hf"]`` records how it was built.

    Raises
    ------
    GraphoptError
        See :func:`make`; also a model the frontend cannot trace (FrontendError).
    """
    from graphopt.frontends.torch import from_torch

    module, inputs, info = make(spec)
    graph = from_torch(module, inputs, training=True, optimizer="sgd", name=f"hf:{spec}")
    return graph.replace(meta={**graph.meta, "hf": info})



def model(spec: str, seed: int = 0):
    """``hf:spec`` as a runnable :class:`~graphopt.frontends.model.Model` (weights drawn
    from seed 0 whatever ``seed``, as :func:`build` draws them, so that the model and
    the graph agree)."""
    from graphopt.frontends.model import Model

    module, inputs, _ = make(spec)
    return Model(f"hf:{spec}", module, inputs)
