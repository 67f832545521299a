"""A versioned corpus of training-step graphs to learn from and to benchmark on.

A corpus is a folder: ``manifest.json`` (format version, and per item its graph source
string, family, split, node and edge counts, build seconds, or why it was skipped) and
one ``graphs/<id>.npz`` per built item, saved by :func:`graphopt.ir.save_graph`.
:func:`default_items` lists what ``graphopt corpus build`` builds: the zoo's families at
several sizes, seeded synthetic layered graphs, and ``hf:`` models of the training
model types; the families of :data:`HELD_OUT_FAMILIES` are only ever in the held-out
split.

>>> from graphopt.corpus import default_items
>>> len(default_items(quick=True)) > 3
True
"""

from graphopt.corpus.build import (
    FORMAT,
    VERSION,
    build_corpus,
    load_manifest,
    summarize,
)
from graphopt.corpus.items import (
    HELD_OUT_FAMILIES,
    HF_HELD_OUT,
    HF_TRAIN,
    CorpusItem,
    default_items,
    split_of,
)

__all__ = [
    "FORMAT",
    "HELD_OUT_FAMILIES",
    "HF_HELD_OUT",
    "HF_TRAIN",
    "VERSION",
    "CorpusItem",
    "build_corpus",
    "default_items",
    "load_manifest",
    "split_of",
    "summarize",
]
