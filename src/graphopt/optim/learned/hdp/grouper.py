"""HDP's grouper: a feed-forward network that assigns every op to a group (Mirhoseini
et al., "A Hierarchical Model for Device Placement", ICLR 2018)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["Grouper"]


class Grouper(nn.Module):
    r"""HDP's feed-forward grouper: a softmax over groups for every op, sampled.

    .. math::
        z_i = W_2\, \mathrm{ReLU}(W_1 [e(\tau_i); x_i] + b_1) + \epsilon_i, \quad
        g_i \sim \mathrm{softmax}(z_i)

    with :math:`\tau_i` the op's type, :math:`e` a learned embedding and
    :math:`\epsilon` Gaussian noise of standard deviation ``noise`` × the logits' RMS.
    With ``locality`` :math:`\lambda > 0`, :math:`-\lambda (r_i G/N - c_g)^2` is added to
    op :math:`i`'s logit of group :math:`g` (:math:`r_i` the op's place in a given order
    of the ops, its index by default; :math:`c_g` a learned centre starting at
    :math:`g + \tfrac12`) and :math:`W_2` starts at zero: the first groupings are
    contiguous blocks of that order, and the network learns departures from them.

    Parameters
    ----------
    num_types : int
        Op types (ids ``0..num_types-1``).
    in_dim : int
        Width of an op's feature vector :math:`x_i`.
    num_groups : int
    hidden : int
        Hidden units (grappler: 64).
    type_dim : int
        Width of the op-type embedding.
    locality : float
        Weight :math:`\lambda` of the block prior (0: none).

    Shapes
    ------
    - input: op types (N,) int64, features (N, in_dim), optionally the ops' order (N,)
      (a permutation of ``0..N-1``)
    - output: groups (N,) int64 in ``0..num_groups-1``, their summed log-probability and
      the summed entropy of the ops' softmaxes (scalars)

    Examples
    --------
    >>> g, logp, ent = Grouper(3, 4, num_groups=5)(torch.tensor([0, 2, 1]), torch.rand(3, 4))
    >>> tuple(g.shape), int(g.max()) < 5, logp.shape
    ((3,), True, torch.Size([]))
    >>> Grouper(3, 4, num_groups=5)
    Grouper(types=3, hidden=64, num_groups=5)

    References
    ----------
    A. Mirhoseini, A. Goldie, H. Pham, B. Steiner, Q. V. Le and J. Dean, "A Hierarchical
    Model for Device Placement", ICLR 2018. TensorFlow,
    ``tensorflow/python/grappler/hierarchical_controller.py``.
    """

    def __init__(self, num_types: int, in_dim: int, num_groups: int, hidden: int = 64,
                 type_dim: int = 16, locality: float = 0.0):
        super().__init__()
        self.num_groups, self.locality = num_groups, locality
        self.type_embedding = nn.Embedding(num_types, type_dim)
        self.hidden = nn.Linear(type_dim + in_dim, hidden)
        self.out = nn.Linear(hidden, num_groups, bias=False)
        if locality > 0:
            self.centre = nn.Parameter(torch.arange(num_groups, dtype=torch.float32) + 0.5)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights (grappler's initializer), zero bias."""
        nn.init.xavier_uniform_(self.type_embedding.weight)
        nn.init.xavier_uniform_(self.hidden.weight)
        nn.init.zeros_(self.hidden.bias)
        nn.init.xavier_uniform_(self.out.weight)
        if self.locality > 0:  # the prior alone decides the first groupings
            nn.init.zeros_(self.out.weight)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(types={self.type_embedding.num_embeddings}, "
                f"hidden={self.hidden.out_features}, num_groups={self.num_groups})")

    def forward(self, op_type: Tensor, x: Tensor, generator: torch.Generator | None = None,
                noise: float = 0.0, order: Tensor | None = None,
                greedy: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Sample a grouping (``greedy``: each op's likeliest group instead)."""
        h = torch.relu(self.hidden(torch.cat([self.type_embedding(op_type), x], 1)))
        logits = self.out(h)
        if noise > 0:
            rms = logits.detach().square().mean().sqrt()
            logits = logits + noise * rms * torch.randn(logits.shape, generator=generator)
        if self.locality > 0:
            n = len(op_type)
            rank = torch.arange(n) if order is None else order
            slot = rank.to(torch.float32) * (self.num_groups / n)
            logits = logits - self.locality * (slot[:, None] - self.centre).square()
        log_probs = torch.log_softmax(logits, 1)
        groups = (log_probs.argmax(1) if greedy else
                  torch.multinomial(log_probs.detach().exp(), 1, generator=generator).squeeze(1))
        entropy = -(log_probs.exp() * log_probs).sum()
        return groups, log_probs.gather(1, groups[:, None]).sum(), entropy
