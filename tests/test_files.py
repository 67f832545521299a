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


def test_read_index_names_what_a_file_is_not_and_its_version(tmp_path):
    from graphopt._files import read_index, write_json
    from graphopt.errors import GraphoptError

    path = tmp_path / "index.json"
    write_json(path, {"format": "f", "version": 1, "items": {"b": 1, "a": 2}})
    assert read_index(path, "f", 1, "items", "an index")["items"] == {"a": 2, "b": 1}
    assert path.read_text().index('"a"') < path.read_text().index('"b"')  # keys sorted
    with pytest.raises(GraphoptError, match="index.json: not an index$"):
        read_index(path, "g", 1, "items", "an index")
    with pytest.raises(GraphoptError, match="not an index$"):
        read_index(path, "f", 1, "entries", "an index")
    with pytest.raises(GraphoptError,
                       match="field 'version': format version 1; this graphopt reads version 2"):
        read_index(path, "f", 2, "items", "an index")
    write_json(path, {"format": "f", "version": True, "items": {}})  # a bool is no version
    with pytest.raises(GraphoptError, match="field 'version': format version True"):
        read_index(path, "f", 1, "items", "an index")
