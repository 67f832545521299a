"""GraphSAGE over a directed graph, reading edges in both directions."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

__all__ = ["BiSAGE"]


class BiSAGE(nn.Module):
    r"""Stacked GraphSAGE layers that aggregate producers and consumers separately.

    Each layer is :math:`h' = \mathrm{LN}(h + \mathrm{ReLU}(W [\mathrm{SAGE}_{\to}(h);
    \mathrm{SAGE}_{\leftarrow}(h)]))`: one mean-aggregating SAGE convolution along the
    edges (what an op consumes), one against them (who consumes it), so the embedding of
    an op tells its inputs from its outputs — a dataflow graph is not symmetric.

    Parameters
    ----------
    dim : int
        Width of input and output.
    layers : int
        Number of layers (hops of neighbourhood seen).

    Shapes
    ------
    - ``x``: (N, dim), ``edge_index``: (2, E) int64 source → destination
    - output: (N, dim)

    Examples
    --------
    >>> enc = BiSAGE(8, layers=2)
    >>> enc(torch.rand(5, 8), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
    torch.Size([5, 8])
    """

    def __init__(self, dim: int, layers: int = 2):
        super().__init__()
        self.fwd = nn.ModuleList(SAGEConv(dim, dim) for _ in range(layers))
        self.bwd = nn.ModuleList(SAGEConv(dim, dim) for _ in range(layers))
        self.mix = nn.ModuleList(nn.Linear(2 * dim, dim) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        rev = edge_index.flip(0)
        for fwd, bwd, mix, norm in zip(self.fwd, self.bwd, self.mix, self.norm):
            x = norm(x + torch.relu(mix(torch.cat([fwd(x, edge_index), bwd(x, rev)], dim=1))))
        return x
