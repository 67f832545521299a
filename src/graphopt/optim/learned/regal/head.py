"""REGAL's policy: a graph network that gives every node the distributions BRKGA samples."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn.inits import reset

from graphopt.errors import check_size
from graphopt.nn.sage import BiSAGE

__all__ = ["REGALHead", "REGAL_MAX_LOG"]

#: Log-parameters are clamped to ±this, so every Beta(α, β) has 0.0067 <= α, β <= 148:
#: positive and finite whatever the weights.
REGAL_MAX_LOG = 5.0


class REGALHead(nn.Module):
    r"""Per-node Beta distributions for BRKGA's genes and a per-node crossover bias.

    A linear embedding of the node features, :class:`~graphopt.nn.BiSAGE` message passing,
    then one linear map per node to ``2 * max_devices + 3`` outputs:

    .. math::
        h = \mathrm{BiSAGE}(W_0 x + b_0), \qquad
        o_i = W_1 h_i + b_1 = [\log\alpha^{dev}_{i,1..D_{max}},\ \log\beta^{dev}_{i,1..D_{max}},\
        \log\alpha^{prio}_i,\ \log\beta^{prio}_i,\ c_i]

    node i's device-affinity genes are drawn from
    :math:`\mathrm{Beta}(\alpha^{dev}_{i,d}, \beta^{dev}_{i,d})` (the first D of
    ``max_devices`` slots are used), its scheduling-priority gene from
    :math:`\mathrm{Beta}(\alpha^{prio}_i, \beta^{prio}_i)`, and a child takes node i's genes
    from its elite parent with probability :math:`\sigma(\mathrm{logit}\,\rho + c_i)`,
    :math:`\rho` BRKGA's inheritance, where the method uses the policy's elite bias (else
    :math:`\rho`). The output map starts at zero, so an
    untrained head gives uniform Beta(1, 1) everywhere and :math:`\rho` as crossover bias:
    plain BRKGA. Log-parameters are clamped to :data:`REGAL_MAX_LOG` by :meth:`split`.

    Parameters
    ----------
    in_dim : int
        Node feature width.
    dim : int
        Hidden width.
    layers : int
        BiSAGE layers (hops of neighbourhood seen).
    max_devices : int
        Device slots of the output; a cluster may have up to this many devices.

    Shapes
    ------
    - ``x``: (N, in_dim), ``edge_index``: (2, E) int64 source → destination
    - output: (N, 2 * max_devices + 3)

    Examples
    --------
    >>> head = REGALHead(6, dim=16, max_devices=4)
    >>> out = head(torch.rand(5, 6), torch.tensor([[0, 1, 2], [1, 2, 3]]))
    >>> out.shape, bool((out == 0).all())      # untrained: uniform BRKGA
    (torch.Size([5, 11]), True)
    >>> head
    REGALHead(6, 16, layers=2, max_devices=4)

    References
    ----------
    A. Paliwal, F. Gimeno, V. Nair, Y. Li, M. Lubin, P. Kohli and O. Vinyals, "Reinforced
    Genetic Algorithm Learning for Optimizing Computation Graphs", ICLR 2020.
    """

    def __init__(self, in_dim: int, dim: int = 32, layers: int = 2, max_devices: int = 8):
        super().__init__()
        for name, v, low, high in (("in_dim", in_dim, 1, 4096), ("dim", dim, 1, 4096),  # sizes
                                   ("layers", layers, 0, 64), ("max_devices", max_devices, 1, 1024)):
            check_size(name, v, low, high)  # may come from a file
        self.in_dim, self.dim, self.layers, self.max_devices = in_dim, dim, layers, max_devices
        self.embed = nn.Linear(in_dim, dim)
        self.encoder = BiSAGE(dim, layers)
        self.out = nn.Linear(dim, self.width)
        self.reset_parameters()

    @property
    def width(self) -> int:
        """Outputs per node: ``2 * max_devices + 3``."""
        return 2 * self.max_devices + 3

    def reset_parameters(self) -> None:
        """Reset the embedding and encoder; zero the output map (uniform BRKGA)."""
        reset(self.embed)
        self.encoder.reset_parameters()
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_dim}, {self.dim}, layers={self.layers}, "
                f"max_devices={self.max_devices})")

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.out(self.encoder(torch.relu(self.embed(x)), edge_index))

    def split(self, out: Tensor, devices: int) -> dict[str, Tensor]:
        """Outputs (N, width), or a sample of them, as named parameters for a cluster of
        ``devices`` devices: ``dev_alpha``, ``dev_beta`` (N, devices), ``prio_alpha``,
        ``prio_beta`` (N,) and the crossover logit offset ``cross`` (N,).

        >>> head = REGALHead(3, dim=8, max_devices=2)
        >>> p = head.split(torch.full((4, head.width), 9.0), devices=2)
        >>> float(p["dev_alpha"].max()) == float(torch.exp(torch.tensor(REGAL_MAX_LOG)))
        True
        """
        if not 1 <= devices <= self.max_devices:
            raise ValueError(f"REGALHead: {devices} devices; this head has {self.max_devices} "
                             "device slots")
        m = self.max_devices
        logs = out[:, :2 * m + 2].clamp(-REGAL_MAX_LOG, REGAL_MAX_LOG).exp()
        return {"dev_alpha": logs[:, :devices], "dev_beta": logs[:, m:m + devices],
                "prio_alpha": logs[:, 2 * m], "prio_beta": logs[:, 2 * m + 1],
                "cross": out[:, 2 * m + 2]}

    def used(self, devices: int, cross: bool = True) -> Tensor:
        """Boolean mask (width,) of the outputs a cluster of ``devices`` devices reads: the
        first ``devices`` device slots of α and β, the priority's α and β and, with
        ``cross``, the crossover offset."""
        mask = torch.zeros(self.width, dtype=torch.bool)
        mask[:devices] = True
        mask[self.max_devices:self.max_devices + devices] = True
        mask[2 * self.max_devices:2 * self.max_devices + 2 + cross] = True
        return mask
