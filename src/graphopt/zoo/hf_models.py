"""Sixty ``transformers`` model types, each buildable as an ``hf:`` training step at two sizes.

:data:`TYPES` lists the most used model types of each kind (decoder language models,
mixture-of-experts, encoders, encoder-decoders, vision, speech) with the reason each is
here; :data:`SIZES` names the two sizes and :func:`spec` writes the ``hf:`` source of a
type at a size. The sizes follow one rule for every type (:func:`overrides`): the
configuration fields that mean width, heads, depth, feed-forward width, experts and
vocabulary are set where the configuration has them; everything else keeps its default,
and fields tied to those (``head_dim``, key-value heads) follow in :mod:`graphopt.zoo.hf`.

>>> spec("llama", "tiny")  # doctest: +SKIP
'hf:llama:hidden_size=64,intermediate_size=256,num_attention_heads=2,...'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SIZES", "TYPES", "HFSize", "HFType", "overrides", "spec"]


@dataclass(frozen=True)
class HFType:
    """One model type: its ``transformers`` name, its kind and why it is in the list."""

    model_type: str
    family: str  # decoder, moe, encoder, encoder-decoder, vision or speech
    why: str


@dataclass(frozen=True)
class HFSize:
    """A size every type is built at: width, attention heads and blocks (per stage for
    staged vision models), and the batch's shape."""

    hidden: int
    heads: int
    layers: int
    seq: int
    image: int
    samples: int
    experts: int = 4
    vocab: int = 1024


#: The two sizes: a tiny one, and one at hidden 256 with 4 heads and twice the blocks.
SIZES: dict[str, HFSize] = {
    "tiny": HFSize(hidden=64, heads=2, layers=2, seq=32, image=64, samples=4000),
    "small": HFSize(hidden=256, heads=4, layers=4, seq=64, image=128, samples=16000),
}

_D, _M, _E, _S, _V, _A = "decoder", "moe", "encoder", "encoder-decoder", "vision", "speech"

#: The sixty types, by kind.
TYPES: tuple[HFType, ...] = tuple(HFType(*row) for row in (
    ("gpt2", _D, "the reference decoder LM; learned positions, fused QKV"),
    ("gpt_neo", _D, "GPT-Neo: alternating global and local attention"),
    ("gptj", _D, "GPT-J 6B: parallel attention and MLP, rotary embeddings"),
    ("gpt_neox", _D, "Pythia and GPT-NeoX: the most used research decoder family"),
    ("gpt_bigcode", _D, "StarCoder and SantaCoder: multi-query attention"),
    ("opt", _D, "Meta's OPT, the open GPT-3 replication"),
    ("bloom", _D, "BLOOM: ALiBi positions instead of rotary"),
    ("falcon", _D, "Falcon: multi-query attention, parallel blocks"),
    ("llama", _D, "Llama 1-3: the architecture most open models copy"),
    ("mistral", _D, "Mistral 7B: grouped-query and sliding-window attention"),
    ("qwen2", _D, "Qwen2 / 2.5: a base of many open fine-tunes, QKV bias"),
    ("qwen3", _D, "Qwen3: QK-norm, head_dim set apart from hidden / heads"),
    ("gemma", _D, "Gemma: head_dim 256 independent of the width, GeGLU"),
    ("gemma2", _D, "Gemma 2: logit soft-capping, local and global layers"),
    ("gemma3_text", _D, "Gemma 3's text model: sliding windows, QK-norm"),
    ("phi", _D, "Phi-1/2: partial rotary, parallel attention and MLP"),
    ("phi3", _D, "Phi-3 / 4: fused QKV and gate-up projections"),
    ("starcoder2", _D, "StarCoder2: the code model with GQA and sliding windows"),
    ("olmo", _D, "OLMo: fully open data and training, non-parametric norms"),
    ("olmo2", _D, "OLMo 2: QK-norm and post-norm blocks"),
    ("cohere", _D, "Command-R: parallel blocks, LayerNorm without bias"),
    ("stablelm", _D, "StableLM 2: partial rotary, per-head QK layer norm"),
    ("mixtral", _M, "Mixtral 8x7B: the reference sparse MoE decoder"),
    ("qwen2_moe", _M, "Qwen1.5/2 MoE: routed experts plus a gated shared expert"),
    ("qwen3_moe", _M, "Qwen3 MoE: many small experts, top-8 routing"),
    ("olmoe", _M, "OLMoE: fully open MoE, 64 experts"),
    ("deepseek_v3", _M, "DeepSeek-V3 / R1: latent attention, grouped routing, dense first layers"),
    ("gpt_oss", _M, "gpt-oss: OpenAI's open MoE, attention sinks, biased experts"),
    ("granitemoe", _M, "IBM Granite MoE: a compact MoE for enterprise use"),
    ("bert", _E, "BERT: the reference encoder, the most fine-tuned one"),
    ("roberta", _E, "RoBERTa: BERT's layout, the base of many fine-tunes"),
    ("distilbert", _E, "DistilBERT: the common small encoder"),
    ("albert", _E, "ALBERT: layers share weights, factorised embeddings"),
    ("deberta-v2", _E, "DeBERTa-v3: disentangled relative attention"),
    ("electra", _E, "ELECTRA: discriminative pre-training, embedding projection"),
    ("xlm-roberta", _E, "XLM-R: the multilingual encoder (large vocabulary)"),
    ("modernbert", _E, "ModernBERT: rotary, GeGLU, alternating local attention"),
    ("mpnet", _E, "MPNet: the base of the popular sentence-transformers models"),
    ("camembert", _E, "CamemBERT: a RoBERTa for French, widely fine-tuned"),
    ("t5", _S, "T5: the reference encoder-decoder, relative position buckets"),
    ("mt5", _S, "mT5: multilingual T5, gated-GELU feed-forward"),
    ("bart", _S, "BART: summarisation and generation, learned positions"),
    ("mbart", _S, "mBART: multilingual BART, pre-norm"),
    ("pegasus", _S, "Pegasus: summarisation, sinusoidal positions"),
    ("marian", _S, "Marian: the Opus-MT translation models"),
    ("m2m_100", _S, "M2M-100 / NLLB: many-to-many translation"),
    ("vit", _V, "ViT: the reference vision transformer"),
    ("deit", _V, "DeiT: ViT with a distillation token"),
    ("beit", _V, "BEiT: relative position bias, layer scale"),
    ("swin", _V, "Swin: shifted-window attention in four stages"),
    ("convnext", _V, "ConvNeXt: the modern convolutional network"),
    ("resnet", _V, "ResNet: the reference convolutional network"),
    ("dinov2", _V, "DINOv2: self-supervised ViT features, 14-pixel patches"),
    ("siglip_vision_model", _V, "SigLIP's image tower: the vision encoder of many VLMs"),
    ("clip_vision_model", _V, "CLIP's image tower: the reference vision-language encoder"),
    ("whisper", _A, "Whisper: the reference speech recognition model (log-mel input)"),
    ("wav2vec2", _A, "wav2vec 2.0: the reference waveform encoder"),
    ("hubert", _A, "HuBERT: wav2vec2's layout, masked unit prediction"),
    ("wavlm", _A, "WavLM: gated relative position bias"),
    ("data2vec-audio", _A, "data2vec audio: convolutional positions, layer-averaged targets"),
))

# Configuration fields by meaning, under the names the configurations use.
_WIDTH = ("hidden_size", "d_model", "n_embd", "dim")
_HEADS = ("num_attention_heads", "num_heads", "n_head", "n_heads", "encoder_attention_heads",
          "decoder_attention_heads")
_LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers",
           "decoder_layers", "num_decoder_layers")
_FFN = ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner",
        "hidden_dim")
_EXPERT_FFN = ("moe_intermediate_size", "shared_expert_intermediate_size")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")
_ROUTED = ("num_experts_per_tok",)
_ONE = ("n_group", "topk_group", "first_k_dense_replace")  # DeepSeek's routing groups


def overrides(model_type: str, size: str | HFSize) -> dict[str, Any]:
    """The ``hf:`` overrides of ``model_type`` at ``size`` (a name of :data:`SIZES`).

    Staged vision models (a ``depths`` list) get ``layers`` blocks per stage at most,
    and stage widths scaled so that the last is ``hidden``; waveform models' feature
    convolutions are ``hidden`` wide. A field whose default is missing or None is left
    alone, as is a vocabulary already smaller than the size's.
    """
    import transformers

    s = SIZES[size] if isinstance(size, str) else size
    default = transformers.AutoConfig.for_model(model_type).to_dict()
    out: dict[str, Any] = {}

    def put(names: tuple[str, ...], value: Any) -> None:
        for name in names:
            if isinstance(default.get(name), int) and not isinstance(default[name], bool):
                out[name] = value

    staged = isinstance(default.get("depths"), list)
    if staged:
        n = len(default["depths"])
        out["depths"] = "/".join(str(min(d, s.layers)) for d in default["depths"])
        if isinstance(default.get("hidden_sizes"), list):
            top = default["hidden_sizes"][-1]
            out["hidden_sizes"] = "/".join(str(max(1, w * s.hidden // top))
                                           for w in default["hidden_sizes"])
        if isinstance(default.get("embed_dim"), int):
            out["embed_dim"] = s.hidden >> (n - 1)
        if isinstance(default.get("num_heads"), list):
            out["num_heads"] = "/".join(str(max(1, s.heads >> (n - 1 - i))) for i in range(n))
    else:
        put(_WIDTH, s.hidden)
        put(_HEADS, s.heads)
        put(_LAYERS, s.layers)
        put(_FFN, 4 * s.hidden)
    put(_EXPERT_FFN, s.hidden)
    put(_EXPERTS, s.experts)
    put(_ROUTED, 2)
    put(_ONE, 1)
    if isinstance(default.get("conv_dim"), list):
        out["conv_dim"] = s.hidden
    if isinstance(default.get("vocab_size"), int) and default["vocab_size"] > s.vocab:
        out["vocab_size"] = s.vocab
    if isinstance(default.get("max_source_positions"), int):
        out["max_source_positions"] = s.seq
    out.update(batch=2, seq=s.seq)
    if "image_size" in default or staged or "num_channels" in default:
        out["image"] = s.image
    if "conv_dim" in default:
        out["samples"] = s.samples
    return out


def spec(model_type: str, size: str | HFSize) -> str:
    """The ``hf:`` source of ``model_type`` at ``size``."""
    return f"hf:{model_type}:" + ",".join(f"{k}={v}" for k, v in overrides(model_type, size).items())
