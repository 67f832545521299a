"""The package's layering, stated once: which subpackage may import which.

Arrows point one way (docs/design.md): a package imports only packages of lower layers or
the ones named beside it. Imports inside functions count too: a lazy import is still a
dependency.
"""

import ast
import re
from pathlib import Path

import graphopt

# Each package and the packages it may import. Read bottom-up: every arrow points to
# an earlier line.
ALLOWED: dict[str, set[str]] = {
    "_lazy": set(),  # lazy re-exports for package __init__ files
    "errors": set(),
    "_files": {"errors"},  # the check every reader of outside files makes
    "ir": {"errors", "_files"},
    "hardware": {"errors", "_files"},
    "data": {"errors", "_files"},  # where the shipped TpuGraphs files are
    "frontends": {"errors", "_files", "ir", "data"},
    "cost": {"errors", "_files", "ir", "hardware"},
    "zoo": {"errors", "_files", "ir", "hardware", "frontends"},  # hf: bounds a model by MAX_DEVICES
    "sim": {"errors", "_files", "ir", "hardware", "cost"},
    "runs": {"_lazy", "errors", "_files"},  # checkpoints, seeding, run logs: below rl and costmodel
    "costmodel": {"_lazy", "errors", "_files", "ir", "hardware", "cost", "frontends", "data", "runs",
                  "viz", "nn"},
    "nn": {"errors", "_files", "ir"},
    "viz": {"errors", "_files", "ir", "sim"},
    "evaluate": {"errors", "_files", "ir", "hardware", "sim"},
    "rl": {"_lazy", "errors", "_files", "ir", "hardware", "sim", "evaluate", "nn", "runs", "viz"},
    "optim": {"_lazy", "errors", "_files", "ir", "hardware", "cost", "sim", "evaluate", "nn", "rl", "runs",
              "viz", "frontends", "zoo", "corpus"},  # the learned methods learn from a corpus's targets
    "exec": {"errors", "_files", "ir", "hardware", "cost", "sim", "frontends", "zoo", "viz"},
    "rewrite": {"_lazy", "errors", "_files", "ir", "hardware", "cost", "sim", "frontends", "zoo"},
    "benchmarks": {"errors", "_files", "ir", "hardware", "cost", "sim", "evaluate", "nn", "rl", "runs", "viz",
                   "frontends", "data", "zoo", "optim", "exec", "rewrite", "costmodel", "corpus"},
    # a corpus builds its graphs through load_source (zoo:, hf:, example: sources)
    "corpus": {"errors", "_files", "ir", "frontends"},
    # and "_main": ``python -m graphopt.cli`` (cli/__main__.py) runs the command's entry point
    "cli": {"errors", "_files", "ir", "hardware", "cost", "sim", "evaluate", "nn", "rl", "runs", "viz",
            "frontends", "data", "zoo", "optim", "exec", "rewrite", "costmodel", "benchmarks", "corpus",
            "_main"},
    # the package root re-exports the core API
    "__init__": {"_lazy", "errors", "_files", "ir", "hardware", "sim"},
    # the command's entry point: it loads the command line inside its interrupt handler
    "_main": {"cli", "errors"},
}

ROOT = Path(graphopt.__file__).parent


def _imports(path: Path) -> set[str]:
    """The graphopt subpackages a file imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "graphopt" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_package_is_placed_in_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in ROOT.glob("*.py")}
    assert packages | modules <= set(ALLOWED), sorted((packages | modules) - set(ALLOWED))


def test_imports_point_one_way():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        owner = parts[0] if len(parts) > 1 else path.stem
        for dep in _imports(path) - {owner} - ALLOWED[owner]:
            wrong.append(f"{path.relative_to(ROOT)} imports graphopt.{dep}")
    assert not wrong, "\n".join(wrong)


ARCHITECTURE = ROOT.parents[1] / "docs" / "architecture.md"


def _documented_layers() -> dict[str, set[str]]:
    text = ARCHITECTURE.read_text()
    table = text.split("<!-- layers -->")[1].split("<!-- /layers -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    layers = {}
    for row in rows:
        package, deps = [cell.strip() for cell in row.strip("|").split("|")]
        layers[package.strip("`")] = {d.strip().strip("`") for d in deps.split(",") if d.strip()}
    return layers


def test_architecture_doc_states_these_layers():
    # docs/architecture.md's table is the one this file enforces, row for row; on a
    # change, the message is the table to paste there.
    table = "\n".join(["| package | may import |", "|---|---|"] + [
        f"| `{p}` | {', '.join(f'`{d}`' for d in sorted(deps, key=list(ALLOWED).index))} |"
        for p, deps in ALLOWED.items()])
    assert _documented_layers() == ALLOWED, table


def test_architecture_doc_names_files_that_exist():
    repo = ROOT.parents[1]
    named = re.findall(r"`((?:src|tests)/[\w/.-]+)`", ARCHITECTURE.read_text())
    assert named, "docs/architecture.md names no files"
    # a placeholder such as optim/search/NAME.py names the folder the new file goes in
    missing = [p for p in named if not (repo / p.split("NAME")[0]).exists()]
    assert not missing, missing
