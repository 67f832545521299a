"""Benchmark definitions run by ``graphopt bench`` and the scripts in ``bench/``; results
go to ``bench/results/`` and into marked sections of ``docs/benchmarks.md``."""

from __future__ import annotations

from pathlib import Path

from graphopt.ir.io import atomic_write

__all__ = ["replace_section"]


def replace_section(docs: str | Path, tag: str, body: str) -> None:
    """Put ``body`` between ``<!-- tag:start -->`` and ``<!-- tag:end -->`` in ``docs``
    (appending the section when the markers are missing), atomically."""
    docs = Path(docs)
    start, end = f"<!-- {tag}:start -->", f"<!-- {tag}:end -->"
    block = f"{start}\n{body.strip()}\n{end}"
    text = docs.read_text() if docs.is_file() else "# Benchmarks\n"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    atomic_write(docs, lambda f: f.write(text.encode()))
