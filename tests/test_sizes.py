"""Size is measured and capped (tinygrad's habit): no function in src/ over 100 lines,
no module over 800, but for the ones listed here, each at most the size it had when it
was listed. The lists only shrink: split one, and remove it
(or lower its size); a new long function is split before it lands.
"""

import ast
from pathlib import Path

import graphopt

ROOT = Path(graphopt.__file__).parent

MAX_FUNCTION = 100  # lines, from ``def`` to its last line (a method counts as a function)
MAX_MODULE = 800  # lines

#: Modules over MAX_MODULE lines, and their size when listed.
LONG_MODULES = {
    "frontends/torch.py": 1029,
    "sim/engine.py": 1272,
    "sim/pipeline.py": 824,
}

#: Functions over MAX_FUNCTION lines (``module::Class.method``), and their size when listed.
LONG_FUNCTIONS = {
    "cli/export.py::export": 102,
    "cli/optimize.py::optimize": 191,
    "cli/pipeline.py::optimize_pipeline": 134,
    "cli/run.py::run": 122,
    "cli/train.py::train": 106,
    "cost/profile.py::profile_graph": 108,
    "costmodel/trainer.py::train": 133,
    "exec/dispatch.py::measure_map_memory": 115,
    "exec/export.py::fit_device_map": 104,
    "exec/program.py::compile_program": 156,
    "exec/workers.py::_Device.step": 105,
    "frontends/jax.py::from_jax": 158,
    "frontends/onnx.py::from_onnx": 221,
    "frontends/tpugraphs/npz.py::load_tpugraphs_npz": 167,
    "hardware/presets.py::_from_toml": 112,
    "optim/learned/regal/imitate.py::imitate_regal": 102,
    "optim/partition/pipeline.py::exact_split": 111,
    "optim/search/cpsat.py::_build_model": 140,
    "rl/ppo.py::train": 164,
    "sim/engine.py::fuse": 111,
    "sim/engine.py::kernel_edges": 133,
    "sim/engine.py::run": 465,
}


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Every module's length and every function's, by ``path`` and ``path::qualname``."""
    modules, functions = {}, {}
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(ROOT).as_posix()
        modules[rel] = len(text.splitlines())

        def walk(node, prefix, rel=rel):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = f"{prefix}{child.name}"
                    if not isinstance(child, ast.ClassDef):
                        functions[f"{rel}::{name}"] = child.end_lineno - child.lineno + 1
                    walk(child, name + ".")
                else:
                    walk(child, prefix)

        walk(ast.parse(text), "")
    return modules, functions


def _over(sizes: dict[str, int], limit: int, allowed: dict[str, int]) -> list[str]:
    return [f"{name}: {n} lines (limit {allowed.get(name, limit)})"
            for name, n in sorted(sizes.items()) if n > max(limit, allowed.get(name, 0))]


def test_no_module_grows_past_the_limit():
    modules, _ = _sizes()
    over = _over(modules, MAX_MODULE, LONG_MODULES)
    assert not over, "split these modules (or shrink them):\n" + "\n".join(over)


def test_no_function_grows_past_the_limit():
    _, functions = _sizes()
    over = _over(functions, MAX_FUNCTION, LONG_FUNCTIONS)
    assert not over, "split these functions (or shrink them):\n" + "\n".join(over)


def test_the_allowances_only_shrink():
    # an entry that is gone or back under the limit is removed, and a shrunk one lowered,
    # so that the allowance never holds room to grow back into
    modules, functions = _sizes()
    stale = [f"{name}: listed at {n}, now {sizes.get(name, 'gone')}"
             for allowed, sizes, limit in ((LONG_MODULES, modules, MAX_MODULE),
                                           (LONG_FUNCTIONS, functions, MAX_FUNCTION))
             for name, n in allowed.items()
             if sizes.get(name, 0) <= limit or sizes[name] < n]
    assert not stale, "update the allowance:\n" + "\n".join(stale)
