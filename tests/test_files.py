"""graphopt._files: the limits read from the environment are whole numbers or a clear error."""

import pytest

from graphopt._files import MAX_JSON_BYTES, env_limit, read_json
from graphopt.errors import GraphoptError


@pytest.mark.parametrize("text", ["abc", "1e9", "0", "-5", "", "2**40", str(2**63)])
def test_a_bad_limit_names_its_variable(monkeypatch, text):
    monkeypatch.setenv("GRAPHOPT_MAX_JSON_BYTES", text)
    with pytest.raises(GraphoptError, match=r"^\$GRAPHOPT_MAX_JSON_BYTES="):
        env_limit("GRAPHOPT_MAX_JSON_BYTES", MAX_JSON_BYTES)


def test_a_limit_is_read_and_applied(monkeypatch, tmp_path):
    path = tmp_path / "a.json"
    path.write_text("[1, 2, 3]")
    monkeypatch.setenv("GRAPHOPT_MAX_JSON_BYTES", "1_000")
    assert env_limit("GRAPHOPT_MAX_JSON_BYTES", MAX_JSON_BYTES) == 1000
    assert read_json(path) == [1, 2, 3]
    monkeypatch.setenv("GRAPHOPT_MAX_JSON_BYTES", "4")
    with pytest.raises(GraphoptError, match="more than the 4 graphopt reads"):
        read_json(path)
