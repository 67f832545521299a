"""REINFORCE helpers: the baseline and the convergence figures at their edges."""

import numpy as np

from graphopt.rl import EMABaseline, time_to_within


def test_baseline_and_convergence_edge_cases():
    b = EMABaseline(0.9)
    b.update(np.array([5.0]), np.array([False]))
    assert b.value is None and b.advantage(np.array([1.0, 3.0])).tolist() == [-0.5, 0.5]
    assert time_to_within([(4, 0.1, None)]) == (None, None)
