import numpy as np
import pytest
import torch

from graphopt.costmodel.metrics import (kendall_tau, listmle_loss, mse_loss, ordered_pair_accuracy,
                                        pairwise_hinge_loss, ranking_loss, ranking_metrics, tile_score,
                                        top_k_error)

RUNTIME = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 8.0, 6.0, 9.0, 7.0, 12.0, 11.0])


def test_tau_perfect_and_reversed():
    assert kendall_tau(RUNTIME * 3 + 1, RUNTIME) == pytest.approx(1.0)
    assert kendall_tau(-RUNTIME, RUNTIME) == pytest.approx(-1.0)
    assert kendall_tau(np.zeros(12), RUNTIME) == 0.0


def test_top_k_by_hand():
    pred = np.array([0.1, 0.9, 0.2, 0.8, 0.3])  # model's order: 0, 2, 4, 3, 1
    rt = np.array([5.0, 1.0, 4.0, 2.0, 3.0])  # best is config 1 (1.0)
    assert top_k_error(pred, rt, 1) == pytest.approx(4.0)  # (5 - 1) / 1
    assert top_k_error(pred, rt, 3) == pytest.approx(2.0)  # best of {5, 4, 3} = 3
    assert top_k_error(pred, rt, 5) == 0.0
    assert tile_score(pred, rt) == 1.0
    assert tile_score(-RUNTIME, RUNTIME) == pytest.approx(2 - 8.0 / 1.0)  # top 5: 12, 11, 10, 9, 8


def test_pair_accuracy_and_bundle():
    assert ordered_pair_accuracy(RUNTIME, RUNTIME) == 1.0
    assert ordered_pair_accuracy(-RUNTIME, RUNTIME) == 0.0
    m = ranking_metrics(RUNTIME, RUNTIME)
    assert m["kendall_tau"] == pytest.approx(1) and m["top1_error"] == 0 and m["tile_score"] == 1


@pytest.mark.parametrize("name", ["hinge", "listmle", "mse"])
def test_losses_prefer_the_right_order(name):
    y = torch.tensor(RUNTIME)
    good, bad = torch.tensor(np.log(RUNTIME)), -torch.tensor(np.log(RUNTIME))
    assert ranking_loss(name, good, y) < ranking_loss(name, bad, y)


def test_hinge_by_hand():
    s, y = torch.tensor([0.0, 0.05, 1.0]), torch.tensor([1.0, 2.0, 3.0])
    # pairs (0,1): 0.1-0.05 = 0.05; (0,2): 0; (1,2): 0  -> mean 0.05 / 3
    assert float(pairwise_hinge_loss(s, y)) == pytest.approx(0.05 / 3)
    assert float(listmle_loss(torch.zeros(2), torch.tensor([1.0, 2.0]))) == pytest.approx(np.log(2) / 2)
    assert float(mse_loss(torch.zeros(2), torch.tensor([1.0, np.e]))) == pytest.approx(1.0)
