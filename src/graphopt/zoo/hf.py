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

A field whose default is a list (a staged model's ``depths``) takes ``a/b/c``, one item
per stage, or one number for every stage (``depths=1``).

Fields the user leaves alone follow the ones set where the default configuration ties
them (:func:`_followers`: ``head_dim``, key-value heads, a partial rotary dimension, a
decoder's sizes, token ids inside a smaller vocabulary, a window inside a smaller image),
and the step is made static (:func:`_static_step`: no LayerDrop or SpecAugment, experts
as ``batched_mm``); ``meta["hf"]["derived"]`` lists what was set so. An override always
wins.

The loss is the frontend's default: the sum of the means of the model's floating-point
outputs. Needs the optional ``transformers`` package: ``pip install 'graphopt[hf]'``.

>>> graph = build("bert:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,"
...               "intermediate_size=64,seq=8")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from graphopt.errors import FrontendError, MissingDependencyError, UsageError
from graphopt.ir.graph import Graph
from graphopt.zoo.registry import parse_overrides

__all__ = ["INSTALL_HINT", "SHAPE_KEYS", "build", "estimate", "limits", "make", "model", "parse_spec",
           "refuse_over"]

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
        raise UsageError(f"graph 'hf:{spec}': expected hf:MODEL_TYPE[:key=value,...], "
                         "e.g. hf:bert:num_hidden_layers=2,seq=128")
    overrides = parse_overrides(f"hf:{spec}", rest)
    return model_type, overrides


def _transformers():
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError(f"hf: graphs need the 'transformers' package: {INSTALL_HINT}") \
            from None
    transformers.logging.set_verbosity_error()
    return transformers


#: Pairs of fields whose second follows the first when the user sets only the first and
#: the default configuration has them equal (a decoder sized like its encoder).
_TIED = (("encoder_layers", "decoder_layers"), ("encoder_attention_heads", "decoder_attention_heads"),
         ("encoder_ffn_dim", "decoder_ffn_dim"), ("num_layers", "num_decoder_layers"))

#: Choices a configuration takes when it is made, though they are not fields of it.
_IMPLEMENTATIONS = ("attn_implementation", "experts_implementation")

#: Probabilities of per-step random structure (LayerDrop, SpecAugment), zero in a trace.
_RANDOM_PER_STEP = ("layerdrop", "encoder_layerdrop", "decoder_layerdrop", "mask_time_prob",
                    "mask_feature_prob")


def _one_line(err: BaseException) -> str:
    lines = [x for x in str(err).strip().splitlines() if x.strip()]
    return lines[0].strip() if lines else type(err).__name__


def _field_value(spec: str, key: str, value: Any, default: Any) -> Any:
    """``value`` for a field whose default is ``default``: a list field takes ``a/b/c``
    (one item per stage) or one number for every stage."""
    if not isinstance(default, (list, tuple)) or not default or isinstance(default[0], (list, str)):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value] * len(default)
    try:
        return [int(x) if x.strip().lstrip("-").isdigit() else float(x)
                for x in str(value).split("/")]
    except ValueError:
        raise UsageError(f"graph 'hf:{spec}': {key}={value!r}: a list field takes numbers "
                         f"written a/b/c (its default is {'/'.join(map(str, default))}) "
                         "or one number for every item") from None


def _followers(default: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """Fields left unset that must follow set ones, as the default configuration ties them.

    ``head_dim`` stays hidden / heads where it was; key-value heads keep their grouping
    and divide the heads; a partial rotary dimension keeps its share of the head; a
    decoder keeps its encoder's sizes where they were equal; a per-layer pattern of
    attention kinds repeats to the new depth; token ids stay inside a smaller vocabulary
    (an embedding's padding row must exist); and a windowed vision model's window is no
    larger than its last stage's feature map (Swin makes its position table for the
    configured window, then shrinks the window to a smaller map at run time).
    """
    stored = default.to_dict()

    def name(key: str) -> str:
        return default.attribute_map.get(key, key)

    def now(key: str) -> Any:
        return fields.get(name(key), getattr(default, key, None))

    def free(key: str) -> bool:  # a stored field the user left alone
        return name(key) not in fields and name(key) in stored

    out: dict[str, Any] = {}
    for first, second in _TIED:
        if first in fields and free(second) and stored.get(first) == stored[second]:
            out[second] = fields[first]
    vocab = fields.get(name("vocab_size"))
    if isinstance(vocab, int) and vocab > 0:
        for key, value in stored.items():
            if key.endswith("_token_id") and key not in fields and isinstance(value, int) \
                    and value >= vocab:
                out[key] = vocab - 1
    layers, pattern = now("num_hidden_layers"), stored.get("attention_types")
    if isinstance(layers, int) and free("attention_types") and isinstance(pattern, list) \
            and len(pattern) == 1 and layers % len(pattern[0][0]) == 0:
        out["attention_types"] = [[pattern[0][0], layers // len(pattern[0][0])]]
    image, patch, window, depths = (now("image_size"), now("patch_size"), stored.get("window_size"),
                                    now("depths"))
    if free("window_size") and all(isinstance(x, int) for x in (image, patch, window)) \
            and isinstance(depths, list) and depths:
        last = image // patch >> (len(depths) - 1)  # the last stage's feature map
        if 0 < last < window:
            out["window_size"] = last
    h0, a0 = getattr(default, "hidden_size", None), getattr(default, "num_attention_heads", None)
    h, a = now("hidden_size"), now("num_attention_heads")
    if not all(isinstance(x, int) and x > 0 for x in (h0, a0, h, a)) or (h, a) == (h0, a0) \
            or h % a:
        return out
    if free("head_dim") and stored[name("head_dim")] == h0 // a0:
        out[name("head_dim")] = h // a
    rotary = stored.get("rotary_dim")
    if free("rotary_dim") and isinstance(rotary, int) and (h0 // a0) % rotary == 0:
        out["rotary_dim"] = max(1, (h // a) * rotary // (h0 // a0))
    kv0 = stored.get(name("num_key_value_heads"))
    if free("num_key_value_heads") and name("num_key_value_heads") != name(
            "num_attention_heads") and isinstance(kv0, int) and 0 < kv0 <= a0 and a0 % kv0 == 0:
        kv = max(1, a * kv0 // a0)
        while a % kv:
            kv -= 1
        out[name("num_key_value_heads")] = kv
    return out


def _static_step(default: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """Settings under which one training step is one static graph, where the user set none.

    LayerDrop draws whether to skip each layer from a random number at every step, which
    a trace on fake tensors cannot branch on; the traced step keeps every layer. Experts
    of mixture-of-experts layers run as ``batched_mm`` (each routed token's expert weights
    gathered and multiplied in ATen ops, in float32): the default ``grouped_mm`` kernel
    takes bfloat16 only under fake tensors, and the ``eager`` loop asks which experts got
    tokens (data-dependent). SpecAugment (speech encoders) masks a random set of frames
    by boolean indexing, a size known only at run time; the traced step masks none (the
    masking is one cheap fill).
    """
    stored = default.to_dict()
    out: dict[str, Any] = {k: 0.0 for k in _RANDOM_PER_STEP if k in stored and k not in fields}
    if "experts_implementation" not in fields:
        out["experts_implementation"] = "batched_mm"
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Logging off while a model is built and traced: on a failure torch logs its own
    traceback (fake tensors, symbolic shapes) before it raises, and graphopt's error is
    one line. torch makes its loggers lazily, so no list of names covers them: logging is
    off process-wide, for the build only."""
    was = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(was)


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
        raise UsageError(f"hf:{config.model_type}: the model needs the input {main!r}, "
                         "which this source does not make (it makes input_ids, "
                         "pixel_values, input_values and input_features)")
    if getattr(config, "is_encoder_decoder", False):
        ids["decoder_input_ids"] = torch.randint(0, vocab, (batch, seq), generator=gen)
    return ids


#: Configuration fields no override sets: what the model is (the source's MODEL_TYPE
#: says it), and the fields that point transformers at other code or files.
_NOT_SETTINGS = frozenset({"model_type", "auto_map", "architectures", "transformers_version",
                           "name_or_path", "trust_remote_code", "custom_pipelines"})

#: Fields that count layers (a configuration's own name, or its alias in ``attribute_map``).
_LAYER_FIELDS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers",
                 "decoder_layers", "num_decoder_layers")


def _physical_memory() -> int:
    """This machine's memory in bytes (16 GiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def limits(runs: bool = False) -> tuple[int, int]:
    """``(max_params, max_bytes)``: the most parameters an ``hf:`` model may have (its
    weights are made for real, 4 bytes each, when it is built: by default an eighth of
    this machine's memory in parameters) and the most bytes one training step of it may
    take by the estimate (weights, gradients and activations: by default the memory of
    :data:`~graphopt.hardware.presets.MAX_DEVICES` machines like this one, the largest
    cluster graphopt models; for a model that ``runs`` here, as a ``pipe:`` model does,
    half of this machine's). ``$GRAPHOPT_MAX_PARAMS`` and ``$GRAPHOPT_MAX_BYTES`` set them.

    Raises
    ------
    GraphoptError
        A variable that is not a whole number from 1 to 2**62, naming it.
    """
    from graphopt._files import env_limit
    from graphopt.hardware.presets import MAX_DEVICES

    ram = _physical_memory()
    return (env_limit("GRAPHOPT_MAX_PARAMS", ram // 8, "parameters"),
            env_limit("GRAPHOPT_MAX_BYTES", ram // 2 if runs else ram * MAX_DEVICES))


def _check_settings(spec: str, default: Any, overrides: dict[str, Any]) -> None:
    """Refuse an override that is not data (text, a number, true/false, null or a list of
    those), names what the model is (``model_type``) or where its code comes from, or
    names a method or property of the configuration class rather than a stored field
    (``to_dict=1`` replaced a method; ``use_return_dict`` is computed); and a layer count
    below 1."""
    cls = type(default)
    stored = default.to_dict()
    for key, value in overrides.items():
        where = f"graph 'hf:{spec}': {key}={value!r}"
        items = value if isinstance(value, list) else [value]
        if not all(v is None or isinstance(v, (bool, int, float, str)) for v in items):
            raise UsageError(f"{where}: an override is text, a number, true/false or a list "
                             "of those")
        if key in _NOT_SETTINGS:
            raise UsageError(f"{where}: not a setting (the model type is the source's "
                             f"'hf:MODEL_TYPE'; {', '.join(sorted(_NOT_SETTINGS - {key}))} are "
                             "not settings either)")
        if key in _IMPLEMENTATIONS or key in default.attribute_map:
            pass
        elif key not in stored:
            attr = inspect.getattr_static(cls, key, None)
            what = ("a property" if isinstance(attr, property) else
                    "a method" if callable(attr) or isinstance(attr, (classmethod, staticmethod))
                    else "not a stored field")
            raise UsageError(f"{where}: {key!r} is {what} of {cls.__name__}, not a setting")
        name = default.attribute_map.get(key, key)
        if (name in _LAYER_FIELDS or key in _LAYER_FIELDS) and isinstance(value, int) \
                and not isinstance(value, bool) and value < 1:
            raise UsageError(f"{where}: a layer count is at least 1")


def _int(config: Any, *names: str) -> int:
    """The largest positive whole number among ``config``'s fields ``names`` (lists: their
    largest item), or 0."""
    best = 0
    for n in names:
        v = getattr(config, n, None)
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, int) and not isinstance(x, bool) and x > best:
                best = x
    return best


def estimate(config: Any, shape: dict[str, Any], main: str) -> tuple[int, int]:
    """``(parameters, bytes)`` of a ``transformers`` model of ``config`` and of one
    training step of it on a batch of ``shape``, from the configuration alone (nothing is
    built): embeddings (vocabulary and positions times the width), and per layer the
    attention (4 x width^2) and the feed-forward network (2 x width x intermediate size,
    times the experts); bytes are float32 weights, gradients and the activations kept for
    the backward pass (about 16 x width values a token a layer, plus the attention scores,
    heads x length^2). An estimate to bound what a typo can ask for, not a count: within a
    small factor of the real model for the families graphopt builds.

    >>> from types import SimpleNamespace as C
    >>> estimate(C(hidden_size=768, num_hidden_layers=12, vocab_size=30522,
    ...            intermediate_size=3072, max_position_embeddings=512, num_attention_heads=12),
    ...          {"batch": 2, "seq": 32, "image": None, "samples": 4000}, "input_ids")[0]
    108768768
    """
    h = _int(config, "hidden_size", "d_model", "n_embd", "dim", "embed_dim", "hidden_sizes",
             "embedding_size")
    h = max(h, 1)
    enc = _int(config, "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers")
    dec = _int(config, "decoder_layers", "num_decoder_layers")
    staged = sum(x for x in (getattr(config, "depths", None) or []) if isinstance(x, int)) + \
        sum(x for x in (getattr(config, "block_sizes", None) or []) if isinstance(x, int))
    layers = max(enc + dec + staged, 1)
    inner = _int(config, "intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim",
                 "d_ff", "n_inner", "hidden_dim") or 4 * h
    experts = max(_int(config, "num_local_experts", "num_experts", "n_routed_experts"), 1)
    vocab = _int(config, "vocab_size")
    positions = _int(config, "max_position_embeddings", "n_positions", "max_source_positions")
    heads = _int(config, "num_attention_heads", "n_head", "num_heads", "encoder_attention_heads") \
        or max(h // 64, 1)
    params = (vocab + positions) * h + layers * (4 * h * h + 2 * h * inner * experts)
    batch = shape["batch"]
    if main == "pixel_values":
        image = shape["image"] or _int(config, "image_size") or 64
        length = (image // max(_int(config, "patch_size"), 1)) ** 2 if _int(config, "patch_size") \
            else image * image // 16
    elif main == "input_values":
        length = shape["samples"] // 320
    elif main == "input_features":
        length = 2 * (_int(config, "max_source_positions") or 1500)
    else:
        length = shape["seq"]
    length = max(length, 1)
    activations = layers * batch * (length * (16 * h + 2 * inner * min(experts, 2))
                                    + heads * length * length)
    return params, 4 * (2 * params + activations)


def _check_size(spec: str, config: Any, shape: dict[str, Any], main: str) -> tuple[int, int]:
    """Refuse, before the model is built, one whose :func:`estimate` exceeds
    :func:`limits`, naming the spec, the estimate and the variable that raises it."""
    params, nbytes = estimate(config, shape, main)
    refuse_over(f"graph 'hf:{spec}'", params, nbytes)
    return params, nbytes


def refuse_over(source: str, params: int, nbytes: int, runs: bool = False) -> None:
    """Refuse a model estimated at ``params`` parameters and ``nbytes`` bytes a training
    step when it exceeds :func:`limits` (``runs``: of a model run here), naming ``source``,
    the estimate and the variable that raises the bound.

    Raises
    ------
    UsageError
        Over either bound.
    """
    max_params, max_bytes = limits(runs)
    if params > max_params:
        raise UsageError(f"{source}: about {params:,} parameters, more than the "
                         f"{max_params:,} graphopt builds here (its weights are made for "
                         "real; raise the bound with $GRAPHOPT_MAX_PARAMS)")
    if nbytes > max_bytes:
        raise UsageError(f"{source}: a training step of about {nbytes:,} bytes "
                         f"(weights, gradients, activations), more than the {max_bytes:,} "
                         "graphopt takes here (raise the bound with $GRAPHOPT_MAX_BYTES)")


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
            raise UsageError(f"graph 'hf:{spec}': {key}={value!r} must be an integer "
                             f"1..{_MAX_SHAPE[key]:,}")
    limits()  # a bad $GRAPHOPT_MAX_PARAMS or $GRAPHOPT_MAX_BYTES fails before any work
    tf = _transformers()
    try:
        default = tf.AutoConfig.for_model(model_type)
    except ValueError:
        raise UsageError(f"graph 'hf:{spec}': unknown transformers model type "
                         f"{model_type!r} (transformers {tf.__version__}); e.g. bert, "
                         "gpt2, t5, vit") from None
    fields = {}
    for key, value in overrides.items():
        if not hasattr(default, key) and key not in _IMPLEMENTATIONS and key not in _NOT_SETTINGS:
            raise UsageError(f"graph 'hf:{spec}': {key!r} is not a field of "
                             f"{type(default).__name__} (nor one of "
                             f"{', '.join([*SHAPE_KEYS, *_IMPLEMENTATIONS])})")
        fields[default.attribute_map.get(key, key)] = _field_value(spec, key, value,
                                                                   getattr(default, key, None))
    _check_settings(spec, default, {k: fields[default.attribute_map.get(k, k)] for k in overrides})
    if shape["image"] is not None and isinstance(getattr(default, "image_size", None), int):
        fields.setdefault("image_size", shape["image"])  # vision models check their input
    derived = {k: v for k, v in {**_static_step(default, fields),
                                 **_followers(default, fields)}.items() if k not in fields}
    fields = {**derived, **fields}
    try:
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' advice to its own users
            # made from the fields rather than set after: a configuration derives some
            # fields from others when it is made (Swin's hidden_size from embed_dim)
            config = tf.AutoConfig.for_model(model_type, **fields)
    except Exception as err:  # noqa: BLE001 - a configuration's validators raise anything
        raise UsageError(f"graph 'hf:{spec}': transformers refuses these settings: "
                         f"{_one_line(err)}") from None
    main = getattr(tf.AutoModel._model_mapping.get(type(config), None), "main_input_name", None) \
        if hasattr(tf.AutoModel, "_model_mapping") else None
    _check_size(spec, config, shape, main or "input_ids")  # before any weight is made
    torch.manual_seed(0)
    try:
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = tf.AutoModel.from_config(config)
    except Exception as err:  # noqa: BLE001 - transformers raises anything on a bad config
        raise UsageError(f"graph 'hf:{spec}': transformers cannot build {model_type} "
                         f"with these settings: {_one_line(err)}") from None
    gen = torch.Generator().manual_seed(0)
    inputs = _inputs(config, getattr(model, "main_input_name", "input_ids"), shape, gen)
    info = {"model_type": model_type, "class": type(model).__name__,
            "overrides": json.loads(json.dumps(overrides, default=str)),
            "derived": json.loads(json.dumps(derived, default=str)),
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
    try:
        with _quiet():
            graph = from_torch(module, inputs, training=True, optimizer="sgd",
                               name=f"hf:{spec}")
    except FrontendError as err:
        reason = str(err).replace(type(module).__name__, info["class"])
        raise FrontendError(f"graph 'hf:{spec}': {reason}") from None
    return graph.replace(meta={**graph.meta, "hf": info})



def model(spec: str, seed: int = 0):
    """``hf:spec`` as a runnable :class:`~graphopt.frontends.model.Model` (weights drawn
    from seed 0 whatever ``seed``, as :func:`build` draws them, so that the model and
    the graph agree)."""
    from graphopt.frontends.model import Model

    module, inputs, _ = make(spec)
    return Model(f"hf:{spec}", module, inputs)
