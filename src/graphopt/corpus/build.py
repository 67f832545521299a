"""Building a corpus folder, resumably, and reading its manifest back."""

from __future__ import annotations

import errno
import platform
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import graphopt
from graphopt._files import check_record, write_error, inside, read_index, safe_name, write_json
from graphopt.corpus.items import CorpusItem
from graphopt.errors import BadFileError, WriteError

__all__ = ["FORMAT", "VERSION", "build_corpus", "check_manifest", "load_manifest", "summarize"]

FORMAT = "graphopt-corpus"
#: Bumped when the manifest's or the graphs' layout changes.
VERSION = 1


#: Write errors that say the machine has no room (a full disk, a quota, ``ulimit -f``) or
#: cannot write at all (read-only), not that an item is bad.
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def _empty_manifest() -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "graphopt": graphopt.__version__,
            "python": platform.python_version(), "items": {}, "builds": []}


def load_manifest(folder: str | Path, missing_ok: bool = False) -> dict[str, Any]:
    """The manifest of the corpus in ``folder``.

    Raises
    ------
    GraphoptError
        No manifest (unless ``missing_ok``: an empty one), or one of another format or
        version.
    """
    path = Path(folder) / "manifest.json"
    if not path.exists():
        if missing_ok:
            return _empty_manifest()
        raise BadFileError(f"{folder}: not a corpus (no manifest.json); build one with "
                           "'graphopt corpus build --out DIR'")
    return check_manifest(read_index(path, FORMAT, VERSION, "items", "a graphopt corpus manifest"),
                          path)


def check_manifest(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """``doc``, the manifest read from ``path``, when every item is as :func:`build_corpus`
    writes it: an id that names a file in ``graphs/`` (never ``../../x``, a path or a
    NUL), ``source``, ``family``, ``split`` (train or held-out) and ``status`` (built or
    skipped) of their types, a built item's ``file`` ``graphs/<id>.npz`` and counts, a
    skipped item's ``reason``; ``builds`` a list of runs. Else :class:`GraphoptError`, one
    line naming the file and the field (a hand-edited manifest used to end in a
    ``KeyError`` or ``TypeError`` traceback, or a path out of the corpus)."""
    for key, record in doc["items"].items():
        where = f"{path}: items[{safe_name(key, f'{path}: items')!r}]"
        check_record(record, where, {"source": "str", "family": "str",
                                     "split": {"train", "held-out"},
                                     "status": {"built", "skipped"}, "seconds?": "seconds"})
        if record["status"] == "built":
            check_record(record, where, {"file": "str", "nodes": "count", "edges": "count",
                                         "bytes?": "count"})
            if record["file"] != f"graphs/{key}.npz":
                inside(path.parent, record["file"], f"{where}: field 'file'")
                raise BadFileError(f"{where}: field 'file': expected 'graphs/{key}.npz', got "
                                   f"{record['file']!r}")
        else:
            check_record(record, where, {"reason": "str"})
    check_record(doc, str(path), {"builds?": "list"})
    for i, build in enumerate(doc.get("builds", [])):
        check_record(build, f"{path}: builds[{i}]", {"seconds": "seconds", "built": "count",
                                                     "skipped": "count", "reused": "count"})
    return doc


def _save_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    write_json(folder / "manifest.json", manifest)


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def build_corpus(folder: str | Path, items: Iterable[CorpusItem], *,
                 retry_skipped: bool = False,
                 progress: Callable[[int, int, CorpusItem, dict[str, Any]], None] | None = None,
                 ) -> dict[str, Any]:
    """Build every item not already in ``folder``'s manifest; return the manifest.

    Each built graph is written to ``graphs/<id>.npz`` and the manifest rewritten after
    each item (both atomically), so an interrupted build resumes where it stopped. An
    item that fails to build is recorded as skipped with a one-line reason (and tried
    again only with ``retry_skipped``); it does not stop the build.

    ``progress(done, total, item, record)`` is called after each item.
    """
    from graphopt.frontends import load_source
    from graphopt.ir import save_graph

    folder = Path(folder)
    manifest = load_manifest(folder, missing_ok=True)
    records = manifest["items"]
    items = list(items)
    started = time.time()
    built = skipped = reused = 0
    for done, item in enumerate(items, 1):
        record = records.get(item.id)
        graph_file = folder / "graphs" / f"{item.id}.npz"
        if record is not None and record.get("source") == item.source and (
                (record["status"] == "built" and graph_file.is_file())
                or (record["status"] == "skipped" and not retry_skipped)):
            reused += 1
            if progress:
                progress(done, len(items), item, {**record, "reused": True})
            continue
        start = time.perf_counter()
        record = {"source": item.source, "family": item.family, "split": item.split}
        try:
            graph = load_source(item.source)
            save_graph(graph, graph_file)
        except KeyboardInterrupt:
            raise
        except OSError as err:
            if isinstance(err, WriteError) or err.errno in _NO_ROOM:
                # the machine's fault, not the item's: stop, and record nothing (a skipped
                # item is not tried again); the next build resumes here
                raise (err if isinstance(err, WriteError) else write_error(graph_file, err)) from None
            record.update(status="skipped", reason=_one_line(err))
            skipped += 1
        except Exception as err:  # noqa: BLE001 - any model may fail; record why, go on
            record.update(status="skipped", reason=_one_line(err))
            skipped += 1
        else:
            record.update(status="built", file=f"graphs/{item.id}.npz",
                          nodes=int(graph.num_nodes), edges=int(graph.num_edges),
                          bytes=graph_file.stat().st_size)
            built += 1
        record["seconds"] = round(time.perf_counter() - start, 3)
        records[item.id] = record
        _save_manifest(folder, manifest)
        if progress:
            progress(done, len(items), item, record)
    manifest["builds"].append({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                        time.gmtime(started)),
                               "seconds": round(time.time() - started, 1), "built": built,
                               "skipped": skipped, "reused": reused,
                               "argv": " ".join(sys.argv[1:])})
    _save_manifest(folder, manifest)
    return manifest


def summarize(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (family, split): built and skipped counts, node range, bytes, seconds."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in manifest["items"].values():
        row = rows.setdefault((record["family"], record["split"]), {
            "family": record["family"], "split": record["split"], "built": 0, "skipped": 0,
            "min_nodes": None, "max_nodes": None, "bytes": 0, "seconds": 0.0})
        row["seconds"] += record.get("seconds", 0.0)
        if record["status"] != "built":
            row["skipped"] += 1
            continue
        row["built"] += 1
        row["bytes"] += record.get("bytes", 0)
        n = record["nodes"]
        row["min_nodes"] = n if row["min_nodes"] is None else min(row["min_nodes"], n)
        row["max_nodes"] = n if row["max_nodes"] is None else max(row["max_nodes"], n)
    return sorted(rows.values(), key=lambda r: (r["split"] != "train", r["family"]))
