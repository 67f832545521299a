"""What ``graphopt methods`` lists: every registered method's name and the first sentence
of its class docstring, read from the sources with :mod:`ast`, without importing them.

Importing the methods registers them but loads the simulator, torch and OR-Tools (6-19 s
on a loaded 2-core machine); reading the files takes milliseconds. ``tests/optim/
test_catalog.py`` checks that the catalog names exactly the methods the registry holds,
with their docstrings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

__all__ = ["catalog", "catalog_tasks", "first_sentence"]

_HERE = Path(__file__).resolve().parent
#: Abbreviations whose full stop does not end a sentence.
_ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "vs.", "cf.", "etc.")


def strip_markup(text: str) -> str:
    """reStructuredText roles and literals as plain text.

    >>> strip_markup("the start ``--init best`` gives, see :func:`~graphopt.x.best_contiguous`")
    'the start --init best gives, see best_contiguous'
    """
    text = re.sub(r":[a-z]+:`~?([^`]*?)`", lambda m: m.group(1).rsplit(".", 1)[-1]
                  if m.group(0).split("`")[1].startswith("~") else m.group(1), text)
    return re.sub(r"`{1,2}([^`]*)`{1,2}", r"\1", text)


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring, whole (its lines joined), markup stripped.

    >>> first_sentence('''Random search + repair: uniform random chips per unit, each
    ...     proposal repaired by CP-SAT. Then more.''')
    'Random search + repair: uniform random chips per unit, each proposal repaired by CP-SAT.'
    >>> first_sentence("Seq2seq placer (Mirhoseini et al. 2017), e.g. for GNMT. More")
    'Seq2seq placer (Mirhoseini et al. 2017), e.g. for GNMT.'
    """
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    text = strip_markup(paragraph)
    for m in re.finditer(r"\.(?=\s|$)", text):
        head = text[:m.end()]
        if not head.endswith(_ABBREVIATIONS):
            return head
    return text


#: What ``graphopt methods`` says a method serves, by the names its ``tasks`` attribute
#: reads (:class:`graphopt.optim.base.Optimizer`): the plan's tasks unless it says otherwise.
_PLAN_TASKS = "placement, scheduling, fusion"


def _tasks(node: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> str:
    """The tasks a class declares (``tasks = ...``), or its base class in the file does."""
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == "tasks"
                                                for t in stmt.targets):
            text = ast.unparse(stmt.value)
            said = [_PLAN_TASKS] if "TASKS" in text else []
            return ", ".join(said + (["pipeline"] if "PIPELINE" in text else []))
    for base in node.bases:
        if getattr(base, "id", None) in classes:
            return _tasks(classes[base.id], classes)
    return _PLAN_TASKS


def _registered(path: Path) -> list[tuple[str, str, str]]:
    """(name, docstring, tasks) of each class in ``path`` decorated with ``@register("name")``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    found = []
    for node in classes.values():
        for deco in node.decorator_list:
            if (isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "register"
                    and deco.args and isinstance(deco.args[0], ast.Constant)):
                found.append((deco.args[0].value, ast.get_docstring(node) or "",
                              _tasks(node, classes)))
    return found


def catalog() -> dict[str, str]:
    """Every method registered under :mod:`graphopt.optim`, by name (sorted), with the
    first sentence of its docstring.

    >>> catalog()["sa"]
    'Parallel-chain simulated annealing (FlexFlow-style MCMC) over single moves.'
    """
    return {name: first_sentence(doc) for name, (doc, _) in _all().items()}


def catalog_tasks() -> dict[str, str]:
    """Every registered method, by name, with the tasks it serves (as its source declares).

    >>> catalog_tasks()["exact"], catalog_tasks()["sa"]
    ('pipeline', 'placement, scheduling, fusion')
    """
    return {name: tasks for name, (_, tasks) in _all().items()}


def _all() -> dict[str, tuple[str, str]]:
    out = {}
    for path in sorted(_HERE.rglob("*.py")):
        if path.name == "base.py" or "register(" not in path.read_text(encoding="utf-8"):
            continue
        for name, doc, tasks in _registered(path):
            out[name] = (doc, tasks)
    return dict(sorted(out.items()))
