"""The zoo's named entries: which model, at which size, on how many devices.

Each entry names a family (a module of :mod:`graphopt.zoo.models`), the keyword
arguments its ``make`` is called with, the device count GO's Table 2 placed it on,
the step times that table reports, and whether it belongs to the pre-training split
(GO and GDP hold whole families out of pre-training to test generalization: here
WaveNet and AmoebaNet).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from torch import Tensor, nn

from graphopt.errors import UsageError
from graphopt.frontends.source import parse_overrides
from graphopt.zoo.models import FAMILIES

__all__ = ["HELD_OUT_FAMILIES", "QUICK", "ReportedStepTimes", "ZooEntry", "get_entry", "list_models",
           "parse_overrides"]

#: Families kept out of the pre-training split.
HELD_OUT_FAMILIES = frozenset({"wavenet", "amoebanet"})


@dataclass(frozen=True)
class ReportedStepTimes:
    """Training step times (seconds) a paper reports for placements of one model.

    ``None`` where the paper reports that the method ran out of memory.
    """

    go_one: float
    human_expert: float
    metis: float | None
    hdp: float
    source: str = "GO (Zhou et al. 2020), Table 2"


@dataclass(frozen=True)
class ZooEntry:
    """One benchmark model of the zoo.

    Attributes
    ----------
    name : str
        Registry name, e.g. ``"gnmt-8"``.
    family : str
        Key of :data:`graphopt.zoo.models.FAMILIES`.
    config : Mapping
        Keyword arguments of the family's ``make`` (sizes, batch, seed).
    num_devices : int
        Devices to place it on (GO's Table 2 where it lists the model).
    train_split : bool
        True if the model belongs to the pre-training split, False if held out.
    reported : ReportedStepTimes or None
        The paper's step times, where it reports them.
    """

    name: str
    family: str
    config: Mapping[str, Any]
    num_devices: int
    train_split: bool
    reported: ReportedStepTimes | None = None
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise UsageError(f"zoo entry {self.name!r}: unknown family {self.family!r}; "
                             f"known: {', '.join(sorted(FAMILIES))}")
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))

    def make(self) -> tuple[nn.Module, tuple[Tensor, ...]]:
        """Build the model and one batch of example inputs (seeded, deterministic)."""
        return FAMILIES[self.family].make(**self.config)

    def with_config(self, name: str, **overrides: Any) -> ZooEntry:
        """A copy under another name with some of ``config`` replaced (e.g. a tiny size)."""
        return ZooEntry(name, self.family, {**self.config, **overrides}, self.num_devices,
                        self.train_split, None, self.description)


def _go(go_one: float, human: float, metis: float | None, hdp: float) -> ReportedStepTimes:
    return ReportedStepTimes(go_one, human, metis, hdp)


def _entry(name: str, family: str, devices: int, reported: ReportedStepTimes | None,
           description: str, **config: Any) -> ZooEntry:
    return ZooEntry(name, family, config, devices, family not in HELD_OUT_FAMILIES, reported,
                    description)


_ENTRIES: tuple[ZooEntry, ...] = (
    _entry("rnnlm-2", "rnnlm", 2, _go(0.173, 0.192, 0.355, 0.191),
           "2-layer LSTM language model, 35 unrolled steps", layers=2),
    _entry("rnnlm-4", "rnnlm", 4, _go(0.210, 0.239, 0.503, 0.251),
           "4-layer LSTM language model, 35 unrolled steps", layers=4),
    _entry("rnnlm-8", "rnnlm", 8, _go(0.320, 0.332, None, 0.764),
           "8-layer LSTM language model, 35 unrolled steps", layers=8),
    _entry("gnmt-2", "gnmt", 2, _go(0.301, 0.384, 0.344, 0.327),
           "GNMT with 2 encoder and 2 decoder layers, 50 steps each", layers=2),
    _entry("gnmt-4", "gnmt", 4, _go(0.350, 0.469, 0.466, 0.432),
           "GNMT with 4 encoder and 4 decoder layers, 50 steps each", layers=4),
    _entry("gnmt-8", "gnmt", 8, _go(0.440, 0.562, None, 0.693),
           "GNMT with 8 encoder and 8 decoder layers, 50 steps each", layers=8),
    _entry("transformer-xl-2", "transformer_xl", 2, _go(0.223, 0.268, 0.37, 0.262),
           "2-layer Transformer-XL, segment 150 + memory 150", layers=2),
    _entry("transformer-xl-4", "transformer_xl", 4, _go(0.230, 0.27, None, 0.259),
           "4-layer Transformer-XL, segment 150 + memory 150", layers=4),
    _entry("transformer-xl-8", "transformer_xl", 8, _go(0.350, 0.46, None, 0.425),
           "8-layer Transformer-XL, segment 150 + memory 150", layers=8),
    _entry("inception-v3-b32", "inception_v3", 2, _go(0.229, 0.312, None, 0.301),
           "Inception-v3, batch 32 of 299x299", batch=32),
    _entry("inception-v3-b64", "inception_v3", 2, _go(0.423, 0.731, None, 0.498),
           "Inception-v3, batch 64 of 299x299", batch=64),
    _entry("amoebanet", "amoebanet", 4, _go(0.394, 0.44, 0.426, 0.418),
           "AmoebaNet-D, 2 normal cells per stage, F=256, batch 64 of 224x224", normal_cells=2),
    _entry("wavenet-2x18", "wavenet", 2, _go(0.317, 0.376, None, 0.354),
           "WaveNet, 2 stacks of 18 layers, batch 4 of 16,384 samples", stacks=2, layers=18),
    _entry("wavenet-4x36", "wavenet", 4, _go(0.659, 0.988, None, 0.721),
           "WaveNet, 4 stacks of 36 layers, batch 4 of 16,384 samples", stacks=4, layers=36),
    _entry("bert-base", "bert", 4, None,
           "BERT-base pre-training step, batch 32 of 128 tokens", layers=12),
    _entry("gpt2-small", "gpt2", 4, None,
           "GPT-2 small, batch 8 of 1,024 tokens", layers=12),
    _entry("resnet-50", "resnet", 2, None,
           "ResNet-50, batch 64 of 224x224", blocks=(3, 4, 6, 3)),
)
_BY_NAME = {e.name: e for e in _ENTRIES}

#: Size overrides per family for ``NAME-quick`` entries: same structure, small tensors
#: and short unrolls, so every model builds and optimizes in seconds and one training
#: step runs on a CPU core in about a second (CI, ``graphopt run``).
QUICK: dict[str, dict[str, Any]] = {
    "rnnlm": {"hidden": 128, "vocab": 500, "seq_len": 3, "batch": 4},
    "gnmt": {"hidden": 64, "vocab": 500, "src_len": 3, "tgt_len": 3, "batch": 4},
    "transformer_xl": {"d_model": 32, "heads": 2, "d_head": 16, "d_inner": 64, "vocab": 500,
                       "seg_len": 8, "mem_len": 8, "batch": 2},
    "inception_v3": {"image_size": 75, "batch": 2, "classes": 10},
    "amoebanet": {"normal_cells": 1, "filters": 8, "image_size": 32, "batch": 2, "classes": 10},
    "wavenet": {"layers": 3, "residual": 8, "dilation_channels": 8, "skip": 16, "classes": 16,
                "length": 64, "batch": 1},
    "bert": {"layers": 2, "d_model": 64, "heads": 2, "d_inner": 128, "vocab": 500, "seq_len": 32,
             "batch": 2},
    "gpt2": {"layers": 2, "d_model": 64, "heads": 2, "d_inner": 128, "vocab": 500, "context": 32,
             "batch": 2},
    "resnet": {"blocks": (1, 1, 1, 1), "image_size": 64, "batch": 2, "classes": 10},
}


def list_models(train_split: bool | None = None) -> list[str]:
    """Names of the zoo's entries in registry order.

    Parameters
    ----------
    train_split : bool, optional
        True: only the pre-training split; False: only the held-out entries.

    >>> list_models()[:3]
    ['rnnlm-2', 'rnnlm-4', 'rnnlm-8']
    >>> list_models(train_split=False)
    ['amoebanet', 'wavenet-2x18', 'wavenet-4x36']
    """
    return [e.name for e in _ENTRIES if train_split is None or e.train_split == train_split]


def get_entry(name: str) -> ZooEntry:
    """The entry called ``name``; ``NAME-quick`` is NAME at the sizes of :data:`QUICK`;
    ``NAME:key=value,...`` is NAME with some of its ``make`` keywords replaced (integers,
    floats, true/false, none or text).

    >>> get_entry("rnnlm-2-quick").config["hidden"]
    128
    >>> get_entry("gnmt-2-quick:layers=3,batch=8").config["layers"]
    3

    Raises
    ------
    GraphoptError
        No entry has that name; the message lists the known names.
    """
    base_name, colon, text = name.partition(":")
    if colon:
        entry = get_entry(base_name)
        overrides = parse_overrides(f"zoo:{name}", text)
        keywords = inspect.signature(FAMILIES[entry.family].make).parameters
        unknown = sorted(set(overrides) - set(keywords))
        if unknown:
            raise UsageError(f"graph 'zoo:{name}': {', '.join(map(repr, unknown))} not a "
                             f"size of the {entry.family} family; it takes "
                             f"{', '.join(keywords)}")
        return entry.with_config(name, **overrides)
    base = name.removesuffix("-quick")
    if base != name and base in _BY_NAME:
        entry = _BY_NAME[base]
        return entry.with_config(name, **QUICK[entry.family])
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(f"unknown zoo model {name!r}; known: {', '.join(_BY_NAME)}") from None


def model(name: str, seed: int = 0):
    """``zoo:name`` as a runnable :class:`~graphopt.frontends.model.Model` (the zoo's
    models are seeded by themselves: ``seed`` is not used)."""
    from graphopt.frontends.model import Model

    entry = get_entry(name)
    module, inputs = entry.make()
    return Model(entry.name, module, tuple(inputs))


def default_cluster(name: str) -> str:
    """dgx1-v100 with ``name``'s device count in GO's Table 2.

    >>> default_cluster("gnmt-2")
    'dgx1-v100:2'
    """
    return f"dgx1-v100:{get_entry(name).num_devices}"
