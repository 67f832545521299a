"""Benchmark definitions run by ``graphopt bench`` and the scripts in ``bench/``; results
go to ``bench/results/`` and into marked sections of ``docs/benchmarks.md``."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from graphopt.errors import GraphoptError
from graphopt._files import atomic_write

__all__ = ["geomean", "replace_section", "save_json"]


def geomean(xs: list[float]) -> float | None:
    """Geometric mean (None for no values).

    >>> geomean([1.0, 4.0])
    2.0
    """
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def save_json(result: dict, path: str | Path) -> None:
    """Write a benchmark's results to ``path`` as indented JSON, atomically."""
    text = json.dumps(result, indent=1)
    atomic_write(path, lambda f: f.write(text.encode()))


def check_section(tag: str) -> str:
    """``tag`` if it can name a section's markers: lowercase words joined by single
    hyphens (``--`` would end the HTML comment), else a :class:`GraphoptError`."""
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", tag):
        raise GraphoptError(f"section {tag!r}: expected lowercase letters and digits joined by "
                            "single hyphens, e.g. regal-elite-bias")
    return tag


def replace_section(docs: str | Path, tag: str, body: str) -> None:
    """Put ``body`` between ``<!-- tag:start -->`` and ``<!-- tag:end -->`` in ``docs``
    (appending the section when the markers are missing), atomically."""
    check_section(tag)
    docs = Path(docs)
    start, end = f"<!-- {tag}:start -->", f"<!-- {tag}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    text = docs.read_text() if docs.is_file() else "# Benchmarks\n"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    atomic_write(docs, lambda f: f.write(text.encode()))
