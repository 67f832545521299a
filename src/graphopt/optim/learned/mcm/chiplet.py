"""GO's policy with a chiplet head for multi-chip partitioning (Xie et al., MLSys 2022)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from graphopt.optim.learned.go.policy import TASK_LEVELS, GOPolicy, GOPolicyConfig

__all__ = ["ChipletPolicy", "ChipletPolicyConfig"]


@dataclass
class ChipletPolicyConfig(GOPolicyConfig):
    """Shape of a :class:`ChipletPolicy`; saved next to its weights."""

    max_devices: int = 16
    """Chips the chiplet head serves; fewer are masked."""
    position_columns: tuple[int, int] = (1, 2)
    """Columns of the node features holding where the node starts and ends in the
    cumulative compute of the topological order, both in [0, 1]."""
    prior_width: float = 0.75
    """Initial width (chips) of the positional prior on the chiplet logits."""


class ChipletPolicy(GOPolicy):
    r"""GO's network whose placement head is a chiplet head: the head's logits plus a
    positional prior that places a node near the chip its position in the cumulative
    compute points to.

    A pipeline over ``D`` chips is valid only when chips rise along the dataflow, and the
    constraint solver repairs a proposal into the nearest such partition: a proposal of
    independent near-uniform choices repairs into one chip. The prior starts the policy
    at a proposal the solver leaves almost whole, the balanced contiguous partition,
    and the network learns where to move the boundaries. For a node whose compute spans
    ``[a, b]`` of the total, with ``p = D (a + b) / 2``:

    .. math::
        \text{logit}_c = \text{head}_c(h) - \frac{(c + \tfrac12 - p)^2}{2\sigma^2},
        \quad c = 0..D-1

    with ``σ`` a learned width (``prior_width`` chips at first).

    ``x`` may carry two columns past ``in_dim``: where the node starts and ends along the
    chain of chips in a reference partition (the greedy contiguous one), in [0, 1]; the
    network does not read them, and the prior centres there instead, so that the policy
    proposes relative to that partition and learns which boundary nodes to move.

    Shapes
    ------
    As :class:`GOPolicy`; ``x`` (N, in_dim) or (N, in_dim + 2), ``x[:, position_columns]``
    and the two extra columns in [0, 1].

    Examples
    --------
    >>> cfg = ChipletPolicyConfig(in_dim=5, num_op_types=10, dim=16, segment=4)
    >>> net = ChipletPolicy(cfg)
    >>> x = torch.rand(6, 5)
    >>> x[:, 1], x[:, 2] = torch.linspace(0, 0.8, 6), torch.linspace(0.2, 1, 6)
    >>> out = net(x, torch.arange(6), torch.arange(6), torch.tensor([[0, 1], [1, 2]]),
    ...           num_devices=4, tasks=("placement",))
    >>> tuple(out["placement"].shape), bool(torch.isinf(out["placement"][:, 4:]).all())
    ((6, 16), True)
    """

    def __init__(self, config: ChipletPolicyConfig):
        super().__init__(config)
        self.log_width = nn.Parameter(torch.empty(()))
        self.reset_width()

    def reset_width(self, width: float | None = None) -> None:
        """Set the prior's width to ``width`` chips (None: the config's ``prior_width``)."""
        with torch.no_grad():
            self.log_width.fill_(math.log(width or self.config.prior_width))

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.reset_width()

    def embed(self, x: Tensor, op_ids: Tensor, op_node: Tensor, edge_index: Tensor,
              num_devices: int) -> tuple[Tensor, Tensor, Tensor]:
        """GO's embedding and context, and each node's position in [0, 1]: its middle in
        the reference partition's chain when ``x`` carries it, else in the cumulative
        compute."""
        c = self.config
        h, ctx = super().embed(x, op_ids, op_node, edge_index, num_devices)  # reads in_dim columns
        a, b = (c.in_dim, c.in_dim + 1) if x.shape[1] > c.in_dim else c.position_columns
        return h, ctx, (x[:, a] + x[:, b]) / 2

    def decide(self, h: Tensor, ctx: Tensor, position: Tensor, num_devices: int,
               tasks: tuple[str, ...] = tuple(TASK_LEVELS)) -> dict[str, Tensor]:
        out = super().decide(h, ctx, num_devices, tasks)
        if "placement" in out:
            chips = torch.arange(self.config.max_devices, dtype=h.dtype) + 0.5
            prior = -(chips[None, :] - num_devices * position[:, None]) ** 2 / (
                2 * torch.exp(2 * self.log_width))
            out["placement"] = out["placement"] + prior
        return out
