"""Ranking losses and metrics for learned cost models.

Convention used throughout :mod:`graphopt.costmodel`: a model's score is a predicted
*cost* — lower means faster — so a compiler tries configurations in ascending score
order, and a good model has a positive Kendall's tau with the measured runtimes.

Losses (PyTorch, one graph's sampled configurations at a time):

- :func:`pairwise_hinge_loss`: ``mean over pairs i faster than j of max(0, margin - (s_j - s_i))``
  (GST and the competition winners, margin 0.1);
- :func:`listmle_loss`: the negative Plackett-Luce log-likelihood of the measured order
  (Xia et al., ICML 2008; the TpuGraphs baselines);
- :func:`mse_loss`: squared error to the per-graph standardized log runtime.

Metrics (numpy, one graph): :func:`kendall_tau` (scipy's tau-b), :func:`top_k_error`
``(best runtime among the model's top K - best runtime) / best runtime``,
:func:`tile_score` ``2 - best of the model's top 5 / best`` (the TpuGraphs tile score,
1 is perfect), :func:`ordered_pair_accuracy`.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import kendalltau

__all__ = [
    "LOSSES",
    "METRICS",
    "kendall_tau",
    "listmle_loss",
    "mse_loss",
    "ordered_pair_accuracy",
    "pairwise_hinge_loss",
    "ranking_loss",
    "ranking_metrics",
    "tile_score",
    "top_k_error",
]


def pairwise_hinge_loss(scores: torch.Tensor, runtime: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """Mean hinge over every ordered pair with different runtimes.

    For each pair with ``runtime[i] < runtime[j]`` the loss is
    ``max(0, margin - (scores[j] - scores[i]))``. O(C^2) for C configurations.

    >>> s = torch.tensor([0.0, 1.0]); y = torch.tensor([1.0, 2.0])
    >>> float(pairwise_hinge_loss(s, y)), float(pairwise_hinge_loss(-s, y))
    (0.0, 1.100000023841858)
    """
    faster = runtime[:, None] < runtime[None, :]  # [i, j]: i is faster than j
    if not faster.any():
        return scores.sum() * 0.0
    diff = scores[None, :] - scores[:, None]  # s_j - s_i
    return torch.relu(margin - diff)[faster].mean()


def listmle_loss(scores: torch.Tensor, runtime: torch.Tensor) -> torch.Tensor:
    """ListMLE: ``sum_k logsumexp(-s[pi_k:]) + s[pi_k]`` with ``pi`` the measured order,
    fastest first, divided by the number of configurations.

    >>> y = torch.tensor([1.0, 2.0, 3.0])
    >>> bool(listmle_loss(torch.tensor([0.0, 5.0, 9.0]), y) < listmle_loss(torch.tensor([9.0, 5.0, 0.0]), y))
    True
    """
    order = torch.argsort(runtime)
    good = -scores[order]  # higher is better, best first
    tail = torch.logcumsumexp(good.flip(0), dim=0).flip(0)  # logsumexp of good[k:]
    return (tail - good).mean()


def mse_loss(scores: torch.Tensor, runtime: torch.Tensor) -> torch.Tensor:
    """Squared error between scores and the standardized log runtimes of this set.

    >>> y = torch.tensor([1.0, 10.0]); z = torch.log(y); z = (z - z.mean()) / z.std(unbiased=False)
    >>> float(mse_loss(z, y))
    0.0
    """
    z = torch.log(runtime.clamp_min(1e-12))
    z = (z - z.mean()) / z.std(unbiased=False).clamp_min(1e-12)
    return torch.mean((scores - z) ** 2)


#: The losses by name, as ``TrainConfig.loss`` spells them.
LOSSES = {"hinge": pairwise_hinge_loss, "listmle": listmle_loss, "mse": mse_loss}


def ranking_loss(name: str, scores: torch.Tensor, runtime: torch.Tensor, mse_weight: float = 0.0,
                 margin: float = 0.1) -> torch.Tensor:
    """The loss ``name`` (``hinge``, ``listmle`` or ``mse``) plus ``mse_weight`` times MSE
    (the tile baseline adds a small MSE term to ListMLE)."""
    if name not in LOSSES:
        raise ValueError(f"loss {name!r} unknown; expected one of {sorted(LOSSES)}")
    loss = pairwise_hinge_loss(scores, runtime, margin) if name == "hinge" else LOSSES[name](scores, runtime)
    if mse_weight and name != "mse":
        loss = loss + mse_weight * mse_loss(scores, runtime)
    return loss


def kendall_tau(pred: np.ndarray, runtime: np.ndarray) -> float:
    """Kendall's tau-b between predicted costs and measured runtimes (scipy); 0.0 when
    either is constant or there are fewer than two configurations.

    >>> y = np.array([10, 20, 30])
    >>> kendall_tau(np.array([1, 2, 3]), y), kendall_tau(np.array([3, 2, 1]), y)
    (1.0, -1.0)
    """
    pred, runtime = np.asarray(pred, float), np.asarray(runtime, float)
    if len(pred) < 2 or np.ptp(pred) == 0 or np.ptp(runtime) == 0:
        return 0.0
    return float(kendalltau(pred, runtime).statistic)


def top_k_error(pred: np.ndarray, runtime: np.ndarray, k: int) -> float:
    """``(min runtime among the K lowest predictions - min runtime) / min runtime``.

    Ties in ``pred`` are broken by position (a stable sort), so a constant predictor
    picks the first K configurations.

    >>> pred, y = np.array([0.3, 0.1, 0.2]), np.array([1.0, 4.0, 2.0])
    >>> top_k_error(pred, y, 1), top_k_error(pred, y, 3)
    (3.0, 0.0)
    """
    runtime = np.asarray(runtime, float)
    top = np.argsort(np.asarray(pred, float), kind="stable")[:k]
    best = runtime.min()
    return float((runtime[top].min() - best) / best)


def tile_score(pred: np.ndarray, runtime: np.ndarray) -> float:
    """The TpuGraphs tile score of one graph: ``2 - min(runtime of top 5) / min(runtime)``;
    1 when the best configuration is among the model's top 5.

    >>> tile_score(np.arange(6), np.array([5.0, 4, 3, 2, 2, 1]))
    0.0
    """
    return 1.0 - top_k_error(pred, runtime, 5)


def ordered_pair_accuracy(pred: np.ndarray, runtime: np.ndarray) -> float:
    """Fraction of pairs with different runtimes whose predictions are in the same strict
    order (ties in the prediction count as wrong); 0.5 with no such pair. O(C^2).

    >>> ordered_pair_accuracy(np.array([1, 3, 2]), np.array([1, 2, 3]))
    0.6666666666666666
    """
    pred, runtime = np.asarray(pred, float), np.asarray(runtime, float)
    dy = np.sign(runtime[:, None] - runtime[None, :])
    dp = np.sign(pred[:, None] - pred[None, :])
    pairs = dy > 0
    return float((dp[pairs] > 0).mean()) if pairs.any() else 0.5


#: The keys of :func:`ranking_metrics`, in the order reports show them.
METRICS = ("kendall_tau", "top1_error", "top5_error", "top10_error", "tile_score", "pair_accuracy")


def ranking_metrics(pred: np.ndarray, runtime: np.ndarray) -> dict[str, float]:
    """Every metric of one graph: ``kendall_tau``, ``top1_error``, ``top5_error``,
    ``top10_error``, ``tile_score``, ``pair_accuracy``."""
    out = {"kendall_tau": kendall_tau(pred, runtime)}
    for k in (1, 5, 10):
        out[f"top{k}_error"] = top_k_error(pred, runtime, k)
    out["tile_score"] = tile_score(pred, runtime)
    out["pair_accuracy"] = ordered_pair_accuracy(pred, runtime)
    return out
