"""Issue 13: every reader of an outside file (graph .npz and JSON, plan, profile, policy
JSON) answers random bytes and random JSON with a GraphoptError or a value, never
another exception. Bounded examples, so the run stays within a few seconds."""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphopt.cost import Profile
from graphopt.errors import GraphoptError
from graphopt.ir import load_graph
from graphopt.sim import Plan

READERS = {"graph.json": load_graph, "graph.npz": load_graph, "plan.json": Plan.load,
           "profile.json": Profile.load}
FORMATS = {"graph.json": "graphopt.graph", "graph.npz": "graphopt.graph",
           "plan.json": "graphopt.plan", "profile.json": "graphopt.profile"}
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
# documents that pass the format check, so the fuzz reaches the fields behind it
headed = st.dictionaries(st.sampled_from(["nodes", "edges", "placement", "priority", "fusion",
                                          "entries", "device_kind", "meta", "name", "version"]),
                         json_values, max_size=5)


def read(name: str, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        try:
            READERS[name](path)
        except GraphoptError:
            pass


@pytest.mark.parametrize("name", READERS)
@FUZZ
@given(data=st.binary(max_size=512))
def test_random_bytes(name, data):
    read(name, data)


@pytest.mark.parametrize("name", [n for n in READERS if n.endswith(".json")])
@FUZZ
@given(doc=json_values | headed)
def test_random_json(name, doc):
    if isinstance(doc, dict) and doc and "version" not in doc:
        doc = {"format": FORMATS[name], "version": 1, **doc}
    read(name, json.dumps(doc).encode())
