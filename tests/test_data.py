"""Where the real TpuGraphs records are looked for: the variable, a source checkout, else a
clear error."""

from __future__ import annotations

import pytest

from graphopt import data
from graphopt.errors import GraphoptError


def test_variable_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHOPT_TPUGRAPHS_DIR", str(tmp_path / "records"))
    assert data.tpugraphs_dir() == tmp_path / "records"


def test_source_checkout_folder_when_unset(monkeypatch, tmp_path):
    monkeypatch.delenv("GRAPHOPT_TPUGRAPHS_DIR", raising=False)
    monkeypatch.setattr(data, "_CHECKOUT_DIR", tmp_path)
    assert data.tpugraphs_dir() == tmp_path


def test_installed_package_without_variable_says_what_to_set(monkeypatch, tmp_path):
    monkeypatch.delenv("GRAPHOPT_TPUGRAPHS_DIR", raising=False)
    monkeypatch.setattr(data, "_CHECKOUT_DIR", tmp_path / "absent")
    with pytest.raises(GraphoptError, match=r"GRAPHOPT_TPUGRAPHS_DIR is not set.*set "
                                            r"GRAPHOPT_TPUGRAPHS_DIR to the folder"):
        data.tpugraphs_dir()
