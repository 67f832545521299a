"""The pipeline benchmark's summary and table from a result of known figures."""

from __future__ import annotations

import pytest

from graphopt.benchmarks.pipeline import summary, to_markdown


def _plan(method, measured, simulated, busy, sim_busy):
    return {"method": method, "bounds": [0, 2, 4], "schedule": "1f1b", "microbatches": 2,
            "measured_step": measured, "measured_min_step": measured,
            "measured_throughput": 8 / measured, "simulated_step": simulated,
            "simulated_throughput": 8 / simulated, "roofline_step": simulated / 2,
            "measured_busy": busy, "simulated_busy": sim_busy,
            "measured_memory": [100, 200], "simulated_memory": [110, 180]}


def test_summary_errors_and_idle_share():
    plans = [_plan("even", 2.0, 1.0, [0.5, 1.0], [0.5, 1.5]),
             _plan("params", 2.0, 1.0, [0.5, 1.0], [0.5, 1.5]),
             _plan("exact", 1.0, 1.0, [0.5, 0.5], [0.5, 0.5])]
    even = plans[0]["measured_throughput"]
    for p in plans:
        p["vs_even"] = p["measured_throughput"] / even
        p["step_error"] = p["simulated_step"] / p["measured_step"] - 1
        p["roofline_error"] = p["roofline_step"] / p["measured_step"] - 1
        p["busy_error"] = [s / m - 1 for s, m in zip(p["simulated_busy"], p["measured_busy"])]
        p["memory_error"] = [s / m - 1 for s, m in zip(p["simulated_memory"], p["measured_memory"])]
    res = {"rows": [{"model": "pipe:mlp", "stages": 2, "plans": plans, "load_before": 1.0,
                     "calibration": {"matmul_flops": 1e11, "copy_bandwidth": 1e10}}],
           "overhead": {"2": 1e-3}}
    s = summary(res)
    assert s["exact_vs_even_geomean"] == pytest.approx(2.0)
    assert s["median_abs_step_error"] == pytest.approx(0.5)  # |-0.5|, |-0.5|, 0
    assert s["median_abs_roofline_error"] == pytest.approx(0.75)
    assert s["median_abs_busy_error"] == pytest.approx(0.0)  # 0, .5, 0, .5, 0, 0
    assert s["median_busiest_stage_idle"] == pytest.approx(0.5)  # 1 - 1.0/2.0, twice; 0.5
    assert s["median_abs_memory_error"] == pytest.approx(0.1)
    res["summary"] = s
    table = to_markdown(res)
    assert "| mlp | 2 | exact | 2/2 | 1f1b, 2 |" in table and "500 (500)" in table
