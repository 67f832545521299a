"""The memory_real benchmark: one tiny row end to end, and its summary."""

import pytest

from graphopt.benchmarks.memory_real import run, summarize, to_markdown


def test_a_one_device_row_measures_and_simulates_every_device():
    tiny = "hf:gpt2:n_layer=1,n_embd=32,n_head=2,vocab_size=100,seq=8,batch=2"
    res = run(models=(tiny,), methods=("single",), repeats=1, budget=1)
    (row,) = res["rows"]
    (plan,) = row["plans"]
    assert plan["devices"] == 1 and len(plan["measured"]) == len(plan["simulated"]) == 1
    assert plan["measured"][0] > 0
    assert abs(plan["error"][0]) < 0.10  # one device: the engine frees as the simulator does
    assert res["summary"]["median_abs_error"] == abs(plan["error"][0])
    assert "| hf:gpt2:n_layer=1,... | " in to_markdown(res)


def test_summary_is_the_median_over_every_device():
    def plan(devices, measured, simulated):
        return {"devices": devices, "measured": measured, "simulated": simulated,
                "simulated_own_transfer_rule": simulated, "simulated_without_views": measured,
                "error": [s / m - 1 for s, m in zip(simulated, measured)]}

    rows = [{"plans": [plan(1, [100.0], [110.0]), plan(2, [100.0, 200.0], [100.0, 150.0])]}]
    s = summarize(rows)
    assert s["median_abs_error"] == pytest.approx(0.1)  # errors 0.1, 0, 0.25
    assert s["median_abs_error_one_device"] == pytest.approx(0.1)
    assert s["median_abs_error_two_devices"] == pytest.approx(0.125)
    assert s["median_abs_error_without_views"] == 0.0 and s["worst_abs_error"] == 0.25
