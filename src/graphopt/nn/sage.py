"""GraphSAGE over a directed graph, reading edges in both directions."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.inits import reset

__all__ = ["BiSAGE"]


class BiSAGE(nn.Module):
    r"""Stacked GraphSAGE layers that aggregate producers and consumers separately.

    Each layer is

    .. math::
        h_i' = \mathrm{LN}\big(h_i + \mathrm{ReLU}(W [\mathrm{SAGE}_{\to}(h)_i;
        \mathrm{SAGE}_{\leftarrow}(h)_i] + b)\big), \quad
        \mathrm{SAGE}(h)_i = W_1 h_i + W_2 \operatorname{mean}_{j \in \mathcal{N}(i)} h_j

    one mean-aggregating SAGE convolution along the edges (:math:`\mathcal{N}` the ops
    it consumes), one against them (the ops that consume it), so the embedding of an op
    tells its inputs from its outputs — a dataflow graph is not symmetric.

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
    >>> enc
    BiSAGE(8, layers=2)

    References
    ----------
    W. L. Hamilton, R. Ying and J. Leskovec, "Inductive Representation Learning on Large
    Graphs", NeurIPS 2017.
    """

    def __init__(self, dim: int, layers: int = 2):
        super().__init__()
        self.dim, self.layers = dim, layers
        self.fwd = nn.ModuleList(SAGEConv(dim, dim) for _ in range(layers))
        self.bwd = nn.ModuleList(SAGEConv(dim, dim) for _ in range(layers))
        self.mix = nn.ModuleList(nn.Linear(2 * dim, dim) for _ in range(layers))
        self.norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))

    def reset_parameters(self) -> None:
        """Reset every convolution, linear map and norm (each child initializes itself
        in ``__init__`` already)."""
        for child in self.children():
            reset(child)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dim}, layers={self.layers})"

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        rev = edge_index.flip(0)
        for fwd, bwd, mix, norm in zip(self.fwd, self.bwd, self.mix, self.norm):
            x = norm(x + torch.relu(mix(torch.cat([fwd(x, edge_index), bwd(x, rev)], dim=1))))
        return x
