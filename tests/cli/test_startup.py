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
