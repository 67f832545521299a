"""``pipe:NAME[:key=value,...]``: models as a sequence of layers, the form a pipeline splits.

A pipeline stage of ``torch.distributed.pipelining`` is a run of consecutive layers whose
only input is the previous stage's output tensor. Each model here is such a sequence:
``layers[0]`` takes the example input, every later layer takes its predecessor's
output, and the loss takes the last layer's output and the target. The stage boundaries
graphopt chooses are indices into ``layers``; traced as ``nn.Sequential(*layers)`` each
op's module path begins with its layer's index, which is how the pipeline task tells
the layers apart in the graph.

Models (weights random and seeded, nothing downloaded):

- ``mlp`` — ``layers`` equal blocks ``Linear(hidden, hidden) + ReLU`` and a classifier;
- ``mlp-uneven`` — blocks whose widths grow (``hidden × (1 + i·growth)``), as in a
  network that widens with depth: equal layer counts are unequal work;
- ``transformer-encoder`` — ``torch.nn.TransformerEncoderLayer`` blocks between a token
  embedding and a classifier over the vocabulary;
- ``gpt2`` — ``transformers``' ``GPT2Block`` between GPT-2's token and position
  embeddings and its final norm and language-model head;
- ``bert`` — ``transformers``' ``BertEmbeddings``, ``BertLayer`` blocks and a masked-LM
  style head;
- ``t5`` — T5's encoder: its token embedding, ``T5Block`` blocks, its final (RMS) norm and a
  masked-LM style head. Stock T5 computes the relative position bias in its first block
  and hands it to the others; here every block holds a copy of that bias table and
  computes the bias itself, so each block takes and returns hidden states alone. The
  forward is stock T5's at initialization; in training the copies are untied (each
  block learns its own table, as gpt2's head is untied from its embedding), and each
  block pays for the bias's small ``seq × seq`` lookup;
- ``vit`` — ``transformers``' ``ViTEmbeddings`` (patch convolution, CLS token and
  positions) on random images, ``ViTLayer`` blocks, the final norm and a classifier on
  the CLS token, over random labels: stock ``ViTForImageClassification``.

Overrides: ``layers``, ``hidden``, ``batch``, ``seq``, ``vocab``, ``heads``, ``growth``,
``image``, ``patch``, ``classes`` (as each model takes them; :func:`build_pipeline_model`
names the known ones).

>>> m = build_pipeline_model("mlp:layers=3,hidden=8,batch=4")
>>> m.blocks, tuple(m.inputs[0].shape)
(('0', '1', '2', '3'), (4, 8))
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from graphopt.errors import MissingDependencyError, UsageError
from graphopt.frontends.model import Model
from graphopt.ir.graph import Graph
from graphopt.zoo.registry import parse_overrides

__all__ = ["PIPELINE_MODELS", "build", "build_pipeline_model", "estimate", "model"]

#: The prefix of a pipeline model's source.
PREFIX = "pipe:"


def _cross_entropy(out: Tensor, target: Tensor) -> Tensor:
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def _mlp(layers: int = 8, hidden: int = 256, batch: int = 64, growth: float = 0.0,
         classes: int = 10) -> tuple[list[nn.Module], Tensor, Tensor]:
    widths = [max(1, round(hidden * (1 + i * growth))) for i in range(layers + 1)]
    blocks: list[nn.Module] = [nn.Sequential(nn.Linear(widths[i], widths[i + 1]), nn.ReLU())
                               for i in range(layers)]
    blocks.append(nn.Linear(widths[-1], classes))
    return blocks, torch.randn(batch, widths[0]), torch.randint(0, classes, (batch,))


class _Embed(nn.Module):
    """Token embedding and learned positions: token ids → hidden states."""

    def __init__(self, vocab: int, hidden: int, seq: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Parameter(torch.randn(seq, hidden) * 0.02)

    def forward(self, ids: Tensor) -> Tensor:
        return self.tokens(ids) + self.positions[: ids.shape[1]]


class _Head(nn.Module):
    """A final norm and a projection: hidden states → scores per class or token."""

    def __init__(self, hidden: int, out: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.norm = norm if norm is not None else nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, out)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.norm(x))


def _tokens(batch: int, seq: int, vocab: int) -> tuple[Tensor, Tensor]:
    return torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq))


def _encoder(layers: int = 4, hidden: int = 128, heads: int = 4, seq: int = 64,
             batch: int = 8, vocab: int = 4000) -> tuple[list[nn.Module], Tensor, Tensor]:
    blocks: list[nn.Module] = [_Embed(vocab, hidden, seq)]
    blocks += [nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.0,
                                          batch_first=True) for _ in range(layers)]
    blocks.append(_Head(hidden, vocab))
    return (blocks, *_tokens(batch, seq, vocab))


def _transformers():
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError("pipe:gpt2, pipe:bert, pipe:t5 and pipe:vit need the "
                                     "'transformers' package: pip install 'graphopt[hf]'") from None
    return transformers


class _GPT2Embed(nn.Module):
    def __init__(self, wte: nn.Module, wpe: nn.Module) -> None:
        super().__init__()
        self.wte, self.wpe = wte, wpe

    def forward(self, ids: Tensor) -> Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.wte(ids) + self.wpe(pos)


class _Block(nn.Module):
    """A ``transformers`` block called on hidden states alone (no mask, no cache)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: Tensor) -> Tensor:
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


class _NormHead(nn.Module):
    """A model's own final norm and head: hidden states → scores."""

    def __init__(self, norm: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.norm, self.head = norm, head

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.norm(x))


def _gpt2(layers: int = 6, hidden: int = 128, heads: int = 4, seq: int = 64, batch: int = 8,
          vocab: int = 50257) -> tuple[list[nn.Module], Tensor, Tensor]:
    tf = _transformers()
    cfg = tf.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=seq,
                        vocab_size=vocab, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0)
    model = tf.GPT2LMHeadModel(cfg)
    t = model.transformer
    blocks: list[nn.Module] = [_GPT2Embed(t.wte, t.wpe)]
    blocks += [_Block(b) for b in t.h]
    # the head's weight is tied to the embedding's; untied here, as a stage boundary
    # between them would need the weight on two processes
    head = nn.Linear(hidden, vocab, bias=False)
    head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
    blocks.append(_NormHead(t.ln_f, head))
    return (blocks, *_tokens(batch, seq, vocab))


def _bert(layers: int = 4, hidden: int = 128, heads: int = 4, seq: int = 64, batch: int = 8,
          vocab: int = 30522) -> tuple[list[nn.Module], Tensor, Tensor]:
    tf = _transformers()
    cfg = tf.BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                        intermediate_size=4 * hidden, vocab_size=vocab, max_position_embeddings=seq,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = tf.BertModel(cfg, add_pooling_layer=False)
    blocks: list[nn.Module] = [model.embeddings]
    blocks += [_Block(b) for b in model.encoder.layer]
    blocks.append(_Head(hidden, vocab))
    return (blocks, *_tokens(batch, seq, vocab))


def _t5(layers: int = 4, hidden: int = 256, heads: int = 4, seq: int = 64, batch: int = 8,
        vocab: int = 32128) -> tuple[list[nn.Module], Tensor, Tensor]:
    tf = _transformers()
    cfg = tf.T5Config(num_layers=layers, d_model=hidden, d_kv=hidden // heads,
                      d_ff=4 * hidden, num_heads=heads, vocab_size=vocab, dropout_rate=0.0)
    encoder = tf.T5EncoderModel(cfg).encoder
    first = encoder.block[0].layer[0].SelfAttention
    for block in encoder.block[1:]:
        # the first block's bias table, copied: a block called without a bias computes
        # it from its own table, so no block needs another's output beside the hidden states
        attn = block.layer[0].SelfAttention
        attn.has_relative_attention_bias = True
        attn.relative_attention_bias = copy.deepcopy(first.relative_attention_bias)
    blocks: list[nn.Module] = [encoder.embed_tokens]
    blocks += [_Block(b) for b in encoder.block]
    blocks.append(_Head(hidden, vocab, norm=encoder.final_layer_norm))
    return (blocks, *_tokens(batch, seq, vocab))


class _ClsHead(_NormHead):
    """The final norm and a classifier on the first (CLS) token."""

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.norm(x[:, 0]))


def _vit(layers: int = 6, hidden: int = 256, heads: int = 4, image: int = 32, patch: int = 4,
         batch: int = 16, classes: int = 10) -> tuple[list[nn.Module], Tensor, Tensor]:
    tf = _transformers()
    cfg = tf.ViTConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                       intermediate_size=4 * hidden, image_size=image, patch_size=patch,
                       num_labels=classes, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)
    model = tf.ViTForImageClassification(cfg)
    blocks: list[nn.Module] = [model.vit.embeddings]
    blocks += [_Block(b) for b in model.vit.layers]
    blocks.append(_ClsHead(model.vit.layernorm, model.classifier))
    return blocks, torch.randn(batch, 3, image, image), torch.randint(0, classes, (batch,))


#: Name → builder of (layers, inputs, target).
PIPELINE_MODELS: dict[str, Callable[..., tuple[list[nn.Module], Tensor, Tensor]]] = {
    "mlp": _mlp,
    "mlp-uneven": lambda growth=0.5, **kw: _mlp(growth=growth, **kw),
    "transformer-encoder": _encoder,
    "gpt2": _gpt2,
    "bert": _bert,
    "t5": _t5,
    "vit": _vit,
}

_KEYS = {"mlp": {"layers", "hidden", "batch", "classes"},
         "mlp-uneven": {"layers", "hidden", "batch", "classes", "growth"},
         "transformer-encoder": {"layers", "hidden", "heads", "seq", "batch", "vocab"},
         "gpt2": {"layers", "hidden", "heads", "seq", "batch", "vocab"},
         "bert": {"layers", "hidden", "heads", "seq", "batch", "vocab"},
         "t5": {"layers", "hidden", "heads", "seq", "batch", "vocab"},
         "vit": {"layers", "hidden", "heads", "image", "patch", "batch", "classes"}}


def estimate(name: str, sizes: dict[str, Any]) -> tuple[int, int]:
    """``(parameters, bytes)`` of pipeline model ``name`` at ``sizes`` and of one training
    step of it, from the sizes alone (nothing is built): float32 weights, gradients and
    the optimizer's copy, the batch, and the activations kept for the backward pass
    (about 16 x hidden values a token a layer, the attention scores, heads x seq^2, and
    the logits, seq x vocab). A bound on what a typo can ask for, not a count.

    >>> estimate("mlp", {"layers": 2, "hidden": 4, "batch": 3, "classes": 2, "growth": 0.0})
    (40, 936)
    """
    if name == "mlp-uneven":  # its builder passes every size but growth on to _mlp's defaults
        sizes = {**{k: p.default for k, p in inspect.signature(_mlp).parameters.items()},
                 "growth": 0.5, **{k: v for k, v in sizes.items() if k in _KEYS[name]}}
    layers, hidden, batch = sizes["layers"], sizes["hidden"], sizes["batch"]
    if name.startswith("mlp"):
        widths = [max(1, round(hidden * (1 + i * sizes.get("growth", 0.0)))) for i in range(layers + 1)]
        params = sum(a * b for a, b in zip(widths, widths[1:])) + widths[-1] * sizes["classes"]
        activations = batch * (3 * sum(widths) + sizes["classes"])
    else:
        heads = sizes["heads"]
        if name == "vit":
            tokens = (sizes["image"] // sizes["patch"]) ** 2 + 1
            params = 3 * sizes["patch"] ** 2 * hidden + tokens * hidden + hidden * sizes["classes"]
            extra = batch * 3 * sizes["image"] ** 2
        else:
            tokens = sizes["seq"]
            params = 2 * sizes["vocab"] * hidden + tokens * hidden
            extra = 2 * batch * tokens * sizes["vocab"]  # the logits and their gradient
        params += layers * 12 * hidden * hidden
        activations = layers * batch * (16 * tokens * hidden + heads * tokens * tokens) + extra
    return params, 4 * (3 * params + activations)


def build_pipeline_model(spec: str, seed: int = 0) -> Model:
    """The model ``spec`` names (``NAME[:key=value,...]``, with or without ``pipe:``),
    its weights and batch drawn from ``seed``.

    Raises
    ------
    GraphoptError
        An unknown name or override, a size below 1, ``heads`` not dividing ``hidden``,
        ``patch`` above ``image``, a model whose :func:`estimate` exceeds :func:`limits`,
        or (gpt2, bert, t5, vit) ``transformers`` missing; the message names the source.
    """
    source = spec if spec.startswith(PREFIX) else PREFIX + spec
    name, _, text = source[len(PREFIX):].partition(":")
    if name not in PIPELINE_MODELS:
        raise UsageError(f"graph {source!r}: unknown pipeline model {name!r}; known: "
                         f"{', '.join(PIPELINE_MODELS)}")
    overrides: dict[str, Any] = parse_overrides(source, text)
    for key, value in overrides.items():
        if key not in _KEYS[name]:
            raise UsageError(f"graph {source!r}: {name} has no override {key!r}; known: "
                             f"{', '.join(sorted(_KEYS[name]))}")
        if key == "growth":
            ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 16
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1 << 20
        if not ok:
            raise UsageError(f"graph {source!r}: override {key}={value!r} must be "
                             f"{'a number in [0, 16]' if key == 'growth' else 'an integer >= 1'}")
    sizes = {k: p.default for k, p in inspect.signature(PIPELINE_MODELS[name]).parameters.items()}
    sizes.update(overrides)
    if "heads" in sizes and sizes["hidden"] % sizes["heads"]:
        raise UsageError(f"graph {source!r}: heads={sizes['heads']} must divide "
                         f"hidden={sizes['hidden']}")
    if "patch" in sizes and sizes["patch"] > sizes["image"]:
        raise UsageError(f"graph {source!r}: patch={sizes['patch']} must be at most "
                         f"image={sizes['image']}")
    from graphopt.zoo.hf import refuse_over

    # these models are built and run for real
    refuse_over(f"graph {source!r}", *estimate(name, sizes), runs=True)
    torch.manual_seed(seed)
    layers, inputs, target = PIPELINE_MODELS[name](**overrides)
    module = nn.Sequential(*layers).train()
    return Model(source, module, (inputs,), target, _cross_entropy,
                 tuple(str(i) for i in range(len(layers))))


def model(spec: str, seed: int = 0) -> Model:
    """``pipe:spec`` (:func:`build_pipeline_model`)."""
    return build_pipeline_model(PREFIX + spec, seed)


def build(spec: str) -> Graph:
    """The training-step graph of ``pipe:spec`` over its whole batch."""
    return model(spec).trace().graph
