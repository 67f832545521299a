"""Plans: validation, equality, the exact JSON form and atomic saving."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphopt.errors import GraphoptError, PlanError
from graphopt.sim import Plan

finite = st.floats(allow_nan=False, allow_infinity=False)
arrays = st.one_of(st.none(), st.lists(finite, max_size=20))


@given(placement=st.one_of(st.none(), st.lists(st.integers(0, 2**40), max_size=20)),
       priority=arrays, fusion=arrays,
       meta=st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), finite, st.text()),
                            max_size=3))
def test_json_round_trip_is_exact(placement, priority, fusion, meta):
    p = Plan(placement=placement, priority=priority, fusion=fusion, meta=meta)
    q = Plan.from_dict(json.loads(json.dumps(p.to_dict())))
    assert q == p
    for k in ("placement", "priority", "fusion"):
        a, b = getattr(p, k), getattr(q, k)
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), "bit for bit"
    with tempfile.TemporaryDirectory() as d:
        assert Plan.load(p.save(Path(d) / "plan.json")) == p


def test_awkward_floats_survive_json(tmp_path):
    vals = [0.1, 1e-300, 5e-324, -0.0, 1.7976931348623157e308, 1 / 3, -2.5e-17]
    p = Plan(priority=vals, fusion=vals[::-1])
    q = Plan.load(p.save(tmp_path / "p.json"))
    assert q.priority.tobytes() == np.array(vals).tobytes()
    assert q.fusion.tobytes() == np.array(vals[::-1]).tobytes()


def test_defaults_and_arrays_are_read_only():
    p = Plan()
    assert p.placement is None and p.priority is None and p.fusion is None and p.meta == {}
    q = Plan(placement=[0, 1, 1], priority=[1.0, 2.0, 3.0])
    assert q.placement.dtype == np.int64 and q.priority.dtype == np.float64
    with pytest.raises(ValueError):
        q.placement[0] = 3


def test_equality():
    a = Plan(placement=[0, 1], meta={"method": "x"})
    assert a == Plan(placement=np.array([0, 1]), meta={"method": "x"})
    assert a != Plan(placement=[0, 1])
    assert a != Plan(placement=[1, 0], meta={"method": "x"})
    assert Plan() != Plan(placement=[0, 0]), "left out is not the same as given"
    assert a.replace(meta={"method": "x"}) == a
    assert a.replace(priority=[1.0, 2.0]).priority.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("field", ["priority", "fusion"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_priorities_are_rejected(field, bad):
    with pytest.raises(PlanError, match=rf"{field}\[1\]"):
        Plan(**{field: [0.0, bad, 1.0]})


@pytest.mark.parametrize("field", ["placement", "priority", "fusion"])
def test_non_numeric_or_2d_arrays_are_rejected(field):
    with pytest.raises(PlanError, match=field):
        Plan(**{field: ["a", "b"]})
    with pytest.raises(PlanError, match=f"{field}.*1-D"):
        Plan(**{field: [[0, 1], [1, 0]]})


@pytest.mark.parametrize("field", ["placement", "priority", "fusion"])
def test_check_rejects_the_wrong_length(field):
    p = Plan(**{field: [0] * 4})
    p.check(4, 2)
    with pytest.raises(PlanError, match=f"{field} has 4 entries.*5 nodes"):
        p.check(5, 2)


@pytest.mark.parametrize("bad", [-1, 2, 99])
def test_check_rejects_devices_out_of_range(bad):
    p = Plan(placement=[0, 1, bad])
    with pytest.raises(PlanError, match=f"node 2 on device {bad}.*0..1"):
        p.check(3, 2)


def test_plan_errors_are_graphopt_errors():
    assert issubclass(PlanError, GraphoptError)


# -- files -----------------------------------------------------------------------------------
def test_load_missing_file(tmp_path):
    with pytest.raises(PlanError, match="nope.json"):
        Plan.load(tmp_path / "nope.json")


def test_load_invalid_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(PlanError, match="bad.json.*JSON"):
        Plan.load(p)


@pytest.mark.parametrize("doc, match", [
    ([], "not a graphopt plan"),
    ({"format": "graphopt.graph"}, "not a graphopt plan"),
    ({"format": "graphopt.plan", "version": 7}, "version 7"),
    ({"format": "graphopt.plan", "priority": [0.0, "x"]}, "priority"),
    ({"format": "graphopt.plan", "fusion": [[1.0]]}, "fusion"),
])
def test_load_wrong_content(tmp_path, doc, match):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=match) as err:
        Plan.load(p)
    assert "plan.json" in str(err.value)


def test_nan_in_a_plan_file_is_rejected(tmp_path):
    p = tmp_path / "nan.json"
    p.write_text('{"format": "graphopt.plan", "priority": [1.0, NaN]}')
    with pytest.raises(PlanError, match="nan.json.*priority"):
        Plan.load(p)


def test_save_failing_midway_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "plan.json"
    old = Plan(placement=[0, 1])
    old.save(target)
    before = target.read_bytes()

    import os

    def broken_replace(src, dst):
        raise OSError("rename failed")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="rename failed"):
        Plan(placement=[1, 1]).save(target)
    assert target.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["plan.json"], "temporary file removed"


@pytest.mark.parametrize("doc", [{"format": "graphopt.plan", "version": "x"},
                                 {"format": "graphopt.plan", "meta": [1, 2]}],
                         ids=["version-str", "meta-list"])
def test_malformed_plan_header(tmp_path, doc):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="plan.json"):
        Plan.load(p)


def test_fractional_device_indices_are_rejected():
    with pytest.raises(PlanError, match="placement"):
        Plan(placement=[0.0, 1.9])


def test_load_a_folder(tmp_path):
    with pytest.raises(PlanError, match=str(tmp_path.name)):
        Plan.load(tmp_path)
