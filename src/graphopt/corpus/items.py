"""What a corpus holds: its items (a graph source, a family, a split) and the default list."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from itertools import product

__all__ = ["HELD_OUT_FAMILIES", "HF_HELD_OUT", "HF_TRAIN", "CorpusItem", "default_items",
           "split_of"]

#: ``transformers`` model types trained on, where they build (issue 35's list).
HF_TRAIN = (
    "albert", "bloom", "codegen", "convbert", "ctrl", "distilbert", "electra", "esm", "falcon",
    "fnet", "funnel", "gpt_neo", "gptj", "ibert", "layoutlm", "longformer", "luke", "mobilebert",
    "mpnet", "mpt", "opt", "rembert", "roberta", "roformer", "squeezebert", "xlm", "xlnet",
    "yoso", "convnext", "regnet", "swin", "deit", "beit", "levit", "poolformer", "mobilevit",
    "segformer", "wav2vec2", "hubert",
)

#: ``transformers`` model types transfer is evaluated on (held out).
HF_HELD_OUT = ("bert", "gpt2", "t5", "vit", "llama", "bart", "whisper", "resnet", "mistral",
               "qwen2")

#: Families never in the training split: the held-out model types and the zoo's
#: held-out families (WaveNet, AmoebaNet).
HELD_OUT_FAMILIES = frozenset(HF_HELD_OUT) | {"wavenet", "amoebanet"}

_VISION = {"convnext", "regnet", "swin", "deit", "beit", "levit", "poolformer", "mobilevit",
           "segformer", "vit", "resnet"}
_AUDIO = {"wav2vec2", "hubert"}
_LAYERS = "=layers"  # in _TEXT_SIZES: the item's layer count

#: Text types whose configuration needs other fields at the corpus's width (None: leave
#: the field at its default).
_TEXT_SIZES: dict[str, dict[str, object]] = {
    "esm": {"vocab_size": 33, "pad_token_id": 1, "mask_token_id": 32},  # no default vocabulary
    "fnet": {"num_attention_heads": None},  # Fourier mixing, no heads
    "funnel": {"num_hidden_layers": None},  # depth is block_sizes
    "squeezebert": {"embedding_size": 256},  # must equal hidden_size
    # grouped-query attention: as many key/value heads as query heads at this width
    "llama": {"num_key_value_heads": 4},
    "mistral": {"num_key_value_heads": 4},
    "qwen2": {"num_key_value_heads": 4},
    # encoder-decoders: num_hidden_layers sets the encoder; the decoder alike
    "t5": {"num_decoder_layers": _LAYERS},
    "bart": {"decoder_layers": _LAYERS, "decoder_attention_heads": 4},
    "whisper": {"decoder_layers": _LAYERS, "decoder_attention_heads": 4},
}
#: Vision types whose configuration has a ``num_hidden_layers`` (the others stage depths).
_VISION_LAYERED = {"deit", "beit", "vit"}


def split_of(family: str) -> str:
    """``"held-out"`` for :data:`HELD_OUT_FAMILIES`, else ``"train"``.

    >>> split_of("bert"), split_of("roberta"), split_of("wavenet"), split_of("gnmt")
    ('held-out', 'train', 'held-out', 'train')
    """
    return "held-out" if family in HELD_OUT_FAMILIES else "train"


@dataclass(frozen=True)
class CorpusItem:
    """One graph of a corpus: where it comes from (a source string, see
    :func:`graphopt.frontends.load_source`), its family and its split."""

    source: str
    family: str

    @property
    def split(self) -> str:
        return split_of(self.family)

    @property
    def id(self) -> str:
        """A file-name-safe id: the family and a hash of the source."""
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:12]
        return f"{self.family}-{digest}"


def _join(base: str, **overrides: object) -> str:
    return base + ":" + ",".join(f"{k}={v}" for k, v in overrides.items())


#: Zoo bases (the ``-quick`` sizes) and the sizes varied over them.
_ZOO_GRID: dict[str, tuple[str, dict[str, tuple]]] = {
    "rnnlm": ("rnnlm-2-quick", {"layers": (1, 2, 4), "seq_len": (3, 8), "batch": (4, 16)}),
    "gnmt": ("gnmt-2-quick", {"layers": (1, 2, 4), "src_len": (3, 6), "batch": (4, 16)}),
    "transformer_xl": ("transformer-xl-2-quick",
                       {"layers": (1, 2, 4), "seg_len": (8, 16), "batch": (2, 8)}),
    "inception_v3": ("inception-v3-b32-quick", {"batch": (2, 4, 8), "image_size": (75, 99)}),
    "amoebanet": ("amoebanet-quick", {"normal_cells": (1, 2), "filters": (8, 16), "batch": (2,)}),
    "wavenet": ("wavenet-2x18-quick", {"stacks": (1, 2), "layers": (3, 6), "length": (64,)}),
    "bert": ("bert-base-quick", {"layers": (1, 2, 4), "seq_len": (32, 64)}),
    "gpt2": ("gpt2-small-quick", {"layers": (1, 2, 4), "context": (32, 64)}),
    "resnet": ("resnet-50-quick", {"image_size": (32, 64), "batch": (2, 4)}),
}


def _zoo_items() -> list[CorpusItem]:
    items = []
    for family, (base, grid) in _ZOO_GRID.items():
        for values in product(*grid.values()):
            items.append(CorpusItem("zoo:" + _join(base, **dict(zip(grid, values))), family))
    return items


def _synthetic_items(sizes=(100, 300, 1000, 3000), seeds=range(10)) -> list[CorpusItem]:
    return [CorpusItem(f"example:layered-{n}-s{s}", "layered") for n in sizes for s in seeds]


def _hf_items(model_type: str, layers=(1, 2), seqs=(32, 64), batches=(2, 4)) -> list[CorpusItem]:
    """Small sizes of one model type: 1-2 layers of width 256 (text), or small images."""
    items = []
    if model_type in _VISION:
        depth = [{"num_hidden_layers": n} for n in layers] if model_type in _VISION_LAYERED \
            else [{}]
        for extra, image, batch in product(depth, (64, 96), batches):
            items.append(_join(f"hf:{model_type}", **extra, image=image, batch=batch))
    elif model_type in _AUDIO:
        for n, samples, batch in product(layers, (4000, 8000), batches):
            # no SpecAugment masking: it draws its masks from the data (untraceable)
            items.append(_join(f"hf:{model_type}", num_hidden_layers=n, mask_time_prob=0,
                               samples=samples, batch=batch))
    else:
        for n, seq, batch in product(layers, seqs, batches):
            sizes = {"num_hidden_layers": n, "hidden_size": 256, "num_attention_heads": 4,
                     **_TEXT_SIZES.get(model_type, {})}
            sizes = {k: n if v == _LAYERS else v for k, v in sizes.items() if v is not None}
            items.append(_join(f"hf:{model_type}", **sizes, seq=seq, batch=batch))
    return [CorpusItem(s.rstrip(":"), model_type) for s in dict.fromkeys(items)]


def default_items(quick: bool = False, families: list[str] | None = None) -> list[CorpusItem]:
    """The items ``graphopt corpus build`` builds, zoo first, then synthetic, then ``hf:``.

    Parameters
    ----------
    quick : bool
        A handful of small items that build in seconds (tests): two zoo families, two
        synthetic graphs, and one tiny ``hf:`` model of each split.
    families : list of str, optional
        Keep only these families.
    """
    if quick:
        items = [
            CorpusItem("zoo:rnnlm-2-quick:layers=1,seq_len=2", "rnnlm"),
            CorpusItem("zoo:wavenet-2x18-quick:stacks=1,layers=2,length=32", "wavenet"),
            CorpusItem("example:layered-60-s0", "layered"),
            CorpusItem("example:layered-60-s1", "layered"),
            CorpusItem("hf:distilbert:n_layers=1,dim=32,n_heads=2,hidden_dim=64,seq=8,batch=1",
                       "distilbert"),
            CorpusItem("hf:bert:num_hidden_layers=1,hidden_size=32,num_attention_heads=2,"
                       "intermediate_size=64,seq=8,batch=1", "bert"),
        ]
    else:
        items = _zoo_items() + _synthetic_items()
        for model_type in HF_TRAIN + HF_HELD_OUT:
            items += _hf_items(model_type)
    if families:
        items = [i for i in items if i.family in set(families)]
    return items
