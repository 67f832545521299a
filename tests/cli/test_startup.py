"""The command line starts at once: importing it loads none of the heavy libraries,
which only the commands that use them import."""

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "torch_geometric", "matplotlib", "ortools", "numba")


def _loaded(statement: str) -> list[str]:
    code = (f"{statement}; import json, sys; "
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def test_import_cli_loads_no_heavy_module():
    assert _loaded("import graphopt.cli") == []


def test_import_graphopt_loads_no_heavy_module_until_the_simulator_is_used():
    assert _loaded("import graphopt") == []
    assert "numba" in _loaded("import graphopt as go; go.Problem")


def test_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_130(monkeypatch, capsys):
    import types

    from graphopt._main import main

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "graphopt.cli", types.SimpleNamespace(app=interrupted))
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 130
    assert capsys.readouterr().err == "graphopt: interrupted\n"


def test_a_warning_is_one_line(monkeypatch, capsys):
    """Python's format prints the warning's source line after it, and the message's
    further lines; the command prints one line naming the kind and the place."""
    import types
    import warnings

    from graphopt._main import main

    def warns():
        warnings.warn("profile of kind 'cpu' matches no device\n  (second line)", UserWarning,
                      stacklevel=1)

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    monkeypatch.setitem(sys.modules, "graphopt.cli", types.SimpleNamespace(app=warns))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        main()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "warning: profile of kind 'cpu' matches no device (UserWarning, test_startup.py:")


def test_a_torch_export_file_loads_without_torchs_own_deprecation_warnings(tmp_path):
    """torch.export warns of its own use of a deprecated torch API (LeafSpec) on load."""
    import torch

    path = tmp_path / "lin.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), path)
    out = subprocess.run([sys.executable, "-c", "from graphopt._main import main; main()", "info", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "graph lin" in out.stdout
    assert "warning" not in out.stderr, out.stderr
