"""Benchmark definitions run by ``graphopt bench`` and the scripts in ``bench/``, and what
both share: argument checks, the line said before a run and after each row, results files
and the marked sections of a Markdown file.

Results go to ``--out`` (default under ``runs/bench/``, ignored by git); a docs file
changes only when ``--docs FILE`` names it. The results behind docs/benchmarks.md's
tables are kept in ``bench/results/``."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from graphopt.errors import GraphoptError, UsageError
from graphopt._files import atomic_write, check_output

__all__ = ["RESULTS", "earlier_seconds", "geomean", "parse_bench_args", "plan_line", "publish",
           "replace_section", "row_line", "save_json", "say"]

#: Where a benchmark writes its results unless ``--out`` says otherwise.
RESULTS = Path("runs/bench")

#: The results behind the tables of docs/benchmarks.md (tracked).
DOCUMENTED = Path("bench/results")


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
        raise UsageError(f"section {tag!r}: expected lowercase letters and digits joined by "
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


def publish(result: dict, table: str, out: str | Path, docs: str | Path | None, tag: str,
            title: str, command: str) -> None:
    """The end of a benchmark script: ``result`` saved to ``out``, ``table`` printed, and
    with ``docs`` its section ``tag`` rewritten under ``title`` with the ``command`` that
    reproduces it (``--docs`` appended)."""
    save_json(result, out)
    print(table)
    if docs:
        replace_section(docs, tag, f"## {title}\n\n`{command} --docs {docs}`\n\n{table}")


def parse_bench_args(parser: argparse.ArgumentParser,
                     outputs: tuple[str, ...] = ("out", "docs")) -> argparse.Namespace:
    """``parser.parse_args()`` for a script in ``bench/``, then every output option of
    ``outputs`` that was given (its dest) checked by :func:`check_output` before any work
    starts: a path that cannot be written exits 2 with one line naming the option."""
    args = parser.parse_args()
    for dest in outputs:
        value = getattr(args, dest, None)
        if value and not isinstance(value, bool):  # a flag (go_outside's --docs) names no path
            try:
                check_output(Path(value), "--" + dest.replace("_", "-"))
            except GraphoptError as err:
                parser.exit(2, f"{parser.prog}: error: {err}\n")
    return args


def _seconds(x) -> float:
    """Every ``"seconds"`` figure in a results tree, summed."""
    if isinstance(x, dict):
        return sum((float(v) if k == "seconds" and isinstance(v, int | float) else _seconds(v))
                   for k, v in x.items())
    if isinstance(x, list):
        return sum(_seconds(v) for v in x)
    return 0.0


def earlier_seconds(out: str | Path, **settings) -> tuple[float, Path] | None:
    """How long the same benchmark took here before, and from which file: the wall
    seconds of every method recorded in ``out``, or else in the file of the same name in
    ``bench/results/``, whose ``settings`` hold ``settings``; None when neither does."""
    for path in (Path(out), DOCUMENTED / Path(out).name):
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        have = old.get("settings", old) if isinstance(old, dict) else {}
        if all(have.get(k) == v for k, v in settings.items()) and _seconds(old) > 0:
            return _seconds(old), path
    return None


def plan_line(what: str, out: str | Path | None, docs: str | Path | None,
              earlier: tuple[float, Path] | None = None) -> str:
    """The line said before a benchmark starts: what runs, how long it took here before
    (when known), where its results go and whether a docs file changes.

    >>> plan_line("bench go: 3 rows", "go.json", None).split("; ")[1:]
    ['time here not known yet', 'results to go.json', 'no docs file changes (--docs FILE writes one)']
    """
    took = (f"about {earlier[0] / 60:.0f} min here last time ({earlier[1]})" if earlier
            else "time here not known yet")
    where = [f"results to {out}"] if out else []
    where.append(f"tables into {docs}" if docs else "no docs file changes (--docs FILE writes one)")
    return "; ".join([what, took, *where])


def row_line(done: int, total: int, label: str, seconds: float) -> str:
    """The line said after each row, on a terminal or a pipe alike.

    >>> row_line(3, 14, "rnnlm-2", 12.34)
    '[3/14] rnnlm-2: 12.3 s'
    """
    return f"[{done}/{total}] {label}: {seconds:.1f} s"


def say(line: str) -> None:
    """Print ``line`` now (flushed, so that a pipe sees it at once)."""
    print(line, file=sys.stdout, flush=True)
