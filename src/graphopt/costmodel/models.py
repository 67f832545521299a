"""Learned cost models over TpuGraphs-style graphs (PyTorch + PyTorch Geometric).

One base, :class:`CostModel`, owns the whole computation; each variant implements one
hook (:meth:`CostModel.init_conv`, the message-passing layer) and sets capability
flags, like PyG's ``BasicGNN``:

========================  =====================  ====================================
variant                   paper                  layers, pooling, head
========================  =====================  ====================================
:class:`TileSAGE`         TpuGraphs tile         op embedding 64, config broadcast to
                          baseline               nodes, 3 GraphSAGE, sum pool, MLP
:class:`LayoutGCN`        TpuGraphs layout       op embedding 32, 2 residual GCN with
                          baseline               the config concatenated at each
                                                 layer, mean + sum over all nodes and
                                                 over configurable nodes, MLP
:class:`ConfigAttention`  "Fast or Slow?" 2023   residual SAGE + LayerNorm, config at
                          winners                each layer, the same pooling, then
                                                 attention across the configurations
                                                 of one graph, MLP
========================  =====================  ====================================

Data layout: all C configurations of one graph are scored at once. Node states are
``(C, n, d)`` tensors (PyG layers propagate along dimension -2), so the graph is
never copied C times in the edge list. Edges are used in both directions.

Pooling is *additive*: :meth:`CostModel.pool` returns per-configuration sums and
counts over a set of nodes; :meth:`CostModel.readout` turns their total into a
score. Graph Segment Training (:mod:`graphopt.costmodel.gst`) relies on this: the
statistics of disjoint node segments add up to those of the whole graph.

Scores are predicted costs: lower means faster.
"""

from __future__ import annotations

import abc

import torch
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.nn.conv import MessagePassing

from graphopt.costmodel.data import PAD

__all__ = ["MODELS", "ConfigAttention", "CostModel", "LayoutGCN", "TileSAGE", "build_model", "graph_tensors"]


class CostModel(nn.Module, abc.ABC):
    r"""Base cost model: embed, pass messages, pool, read out a score per configuration.

    The node input is ``[embed(op_v), x_v, c_v]`` where ``c_v`` is the tile config
    (the same for every node) or node v's layout config (:data:`PAD` where v is not
    configurable). Then, for layers :math:`l = 1..L`,

    .. math::
        h^0_v = \sigma(W_0 [e_{op_v} \| x_v \| c_v]), \quad
        u^l_v = \sigma(\mathrm{conv}_l([h^{l-1} \| c]_v, E)), \quad
        h^l_v = \mathrm{norm}(h^{l-1}_v + u^l_v)\ \text{(residual)}\ \text{or}\ u^l_v

    with ``[h | c]`` only when ``config_every_layer``. Pooling (``pooling``):
    ``"sum"``: :math:`z = \sum_v h^L_v`; ``"mean_sum"``: :math:`z = [\mathrm{mean}_V h,
    \sum_V h, \mathrm{mean}_K h, \sum_K h]` over all nodes V and configurable nodes K.
    Head: :math:`s = w^\top \mathrm{MLP}(z)`, with ``cross_config`` a self-attention
    block over the C configurations of the graph between MLP and output.

    Parameters
    ----------
    num_node_feat : int
        Width of ``x``.
    config_dim : int
        Width of a configuration's features (24 tile, 18 layout per node).
    hidden : int
        Width of node states and of the head.
    op_embed : int
        Width of the opcode embedding.
    num_layers : int
        Message-passing layers.
    num_opcodes : int, default 256
        Size of the opcode embedding table (TpuGraphs ids are < 256).
    heads : int, default 4
        Attention heads of the cross-configuration block.
    dropout : float, default 0.0
        Dropout on node states after each layer.

    Shapes
    ------
    - **input:** op ``(n,)`` int64, x ``(n, F)``, edge_index ``(2, E)`` producer to
      consumer, cfg ``(C, k)`` tile or ``(C, nc, k)`` layout, config_nodes ``(nc,)``
    - **output:** scores ``(C,)``
    """

    residual: bool = False
    config_every_layer: bool = False
    norm: bool = False
    pooling: str = "sum"
    cross_config: bool = False
    #: Variant defaults for hidden, op_embed, num_layers.
    defaults: dict[str, int] = {"hidden": 64, "op_embed": 64, "num_layers": 3}

    def __init__(self, num_node_feat: int, config_dim: int, hidden: int | None = None,
                 op_embed: int | None = None, num_layers: int | None = None, num_opcodes: int = 256,
                 heads: int = 4, dropout: float = 0.0):
        super().__init__()
        self.num_node_feat, self.config_dim = num_node_feat, config_dim
        self.hidden = hidden or self.defaults["hidden"]
        self.op_embed = op_embed or self.defaults["op_embed"]
        self.num_layers = num_layers or self.defaults["num_layers"]
        if self.cross_config and self.hidden % heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({heads})")
        self.num_opcodes, self.heads, self.dropout = num_opcodes, heads, dropout
        d = self.hidden
        self.embed = nn.Embedding(num_opcodes, self.op_embed)
        self.inp = nn.Linear(self.op_embed + num_node_feat + config_dim, d)
        extra = config_dim if self.config_every_layer else 0
        self.convs = nn.ModuleList([self.init_conv(d + extra, d) for _ in range(self.num_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(self.num_layers)] if self.norm else [])
        pooled = d if self.pooling == "sum" else 4 * d
        self.mlp = nn.Sequential(nn.Linear(pooled, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True) if self.cross_config else None
        self.attn_norm = nn.LayerNorm(d) if self.cross_config else None
        self.out = nn.Linear(d, 1)
        self.reset_parameters()

    @abc.abstractmethod
    def init_conv(self, in_channels: int, out_channels: int) -> MessagePassing:
        """The message-passing layer of this variant (the one hook)."""

    def reset_parameters(self) -> None:
        """Re-initialize every child module."""
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(node_feat={self.num_node_feat}, config={self.config_dim}, "
                f"hidden={self.hidden}, op_embed={self.op_embed}, layers={self.num_layers})")

    @property
    def stat_dim(self) -> int:
        """Width of the additive pooling statistics: two sums of width hidden, two counts."""
        return 2 * self.hidden + 2

    def node_config(self, cfg: torch.Tensor, config_nodes: torch.Tensor, n: int) -> torch.Tensor:
        """Per-node config features ``(C, n, k)``: a tile config broadcast to every node,
        or layout configs at their nodes and :data:`PAD` elsewhere."""
        if cfg.dim() == 2:
            return cfg[:, None, :].expand(-1, n, -1)
        out = cfg.new_full((cfg.shape[0], n, cfg.shape[2]), PAD)
        out[:, config_nodes] = cfg
        return out

    def encode(self, op: torch.Tensor, x: torch.Tensor, edge_index: torch.Tensor,
               node_cfg: torch.Tensor) -> torch.Tensor:
        """Node states ``(C, n, hidden)`` from op ``(n,)``, x ``(n, F)``, edge_index
        ``(2, E)`` and per-node config features ``(C, n, k)``."""
        c, n = node_cfg.shape[0], len(op)
        both = torch.cat([edge_index, edge_index.flip(0)], dim=1)
        node = torch.cat([self.embed(op), x], dim=-1)
        h = torch.relu(self.inp(torch.cat([node[None].expand(c, n, -1), node_cfg], dim=-1)))
        for i, conv in enumerate(self.convs):
            u = torch.relu(conv(torch.cat([h, node_cfg], dim=-1) if self.config_every_layer else h, both))
            h = h + u if self.residual else u
            if self.norm:
                h = self.norms[i](h)
            h = nn.functional.dropout(h, self.dropout, self.training)
        return h

    def pool(self, h: torch.Tensor, own: torch.Tensor, is_config: torch.Tensor) -> torch.Tensor:
        """Additive statistics ``(C, 2 * hidden + 2)`` of the nodes where ``own`` (bool
        ``(n,)``): sum of states, sum over configurable nodes, the two counts."""
        cfg = own & is_config
        c = h.shape[0]
        counts = h.new_tensor([float(own.sum()), float(cfg.sum())])[None].expand(c, 2)
        return torch.cat([h[:, own].sum(1), h[:, cfg].sum(1), counts], dim=-1)

    def readout(self, stats: torch.Tensor) -> torch.Tensor:
        """Scores ``(C,)`` from the total pooling statistics ``(C, stat_dim)``."""
        d = self.hidden
        s_all, s_cfg, n, nc = stats[:, :d], stats[:, d:2 * d], stats[:, -2:-1], stats[:, -1:]
        if self.pooling == "sum":
            z = s_all
        else:
            z = torch.cat([s_all / n.clamp_min(1), s_all, s_cfg / nc.clamp_min(1), s_cfg], dim=-1)
        z = self.mlp(z)
        if self.attn is not None:
            a, _ = self.attn(z[None], z[None], z[None], need_weights=False)
            z = self.attn_norm(z + a[0])
        return self.out(z)[:, 0]

    def forward(self, op: torch.Tensor, x: torch.Tensor, edge_index: torch.Tensor, cfg: torch.Tensor,
                config_nodes: torch.Tensor) -> torch.Tensor:
        """Scores ``(C,)`` of the C configurations ``cfg`` on the whole graph."""
        n = len(op)
        node_cfg = self.node_config(cfg, config_nodes, n)
        h = self.encode(op, x, edge_index, node_cfg)
        is_config = torch.zeros(n, dtype=torch.bool, device=op.device)
        is_config[config_nodes] = True
        own = torch.ones(n, dtype=torch.bool, device=op.device)
        return self.readout(self.pool(h, own, is_config))


class TileSAGE(CostModel):
    r"""The TpuGraphs tile baseline: GraphSAGE layers, sum pooling.

    Phothilimthana et al., "TpuGraphs: A Performance Prediction Dataset on Large Tensor
    Computational Graphs", NeurIPS 2023. Layer: GraphSAGE (Hamilton et al., NeurIPS
    2017) with mean aggregation, :math:`u_v = W_1 h_v + W_2\,\mathrm{mean}_{w \in N(v)} h_w`.
    Defaults: op embedding 64, hidden 64, 3 layers. Shapes: see :class:`CostModel`.
    """

    defaults = {"hidden": 64, "op_embed": 64, "num_layers": 3}

    def init_conv(self, in_channels: int, out_channels: int) -> MessagePassing:
        return SAGEConv(in_channels, out_channels)


class LayoutGCN(CostModel):
    r"""The TpuGraphs layout baseline: residual GCN layers with the node's layout config
    concatenated at each layer; mean + sum pooling over all nodes and over configurable
    nodes.

    Phothilimthana et al., NeurIPS 2023. Layer: GCN (Kipf & Welling, ICLR 2017),
    :math:`u_v = W \sum_{w \in N(v) \cup \{v\}} h_w / \sqrt{\hat d_v \hat d_w}`.
    Defaults: op embedding 32, hidden 64, 2 layers. Shapes: see :class:`CostModel`.
    """

    residual = True
    config_every_layer = True
    pooling = "mean_sum"
    defaults = {"hidden": 64, "op_embed": 32, "num_layers": 2}

    def init_conv(self, in_channels: int, out_channels: int) -> MessagePassing:
        return GCNConv(in_channels, out_channels)


class ConfigAttention(CostModel):
    r"""A competition-style model: residual SAGE layers with LayerNorm, the config at each
    layer, mean + sum pooling, then the configurations of one graph attend to each
    other before the score.

    After the MLP of the head, :math:`z \leftarrow \mathrm{LN}(z + \mathrm{MHA}(z, z, z))`
    over the C configurations (no positional encoding: the set is unordered), as in
    the 1st-place solution of "Google - Fast or Slow? Predict AI Model Runtime"
    (Kaggle, 2023). Scores are therefore relative to the configurations scored
    together. Defaults: op embedding 32, hidden 64, 3 layers, 4 heads.
    Shapes: see :class:`CostModel`.
    """

    residual = True
    config_every_layer = True
    norm = True
    pooling = "mean_sum"
    cross_config = True
    defaults = {"hidden": 64, "op_embed": 32, "num_layers": 3}

    def init_conv(self, in_channels: int, out_channels: int) -> MessagePassing:
        return SAGEConv(in_channels, out_channels)


#: Variants by name, as ``TrainConfig.model`` spells them.
MODELS: dict[str, type[CostModel]] = {"tile_sage": TileSAGE, "layout_gcn": LayoutGCN,
                                      "config_attention": ConfigAttention}


def build_model(name: str, num_node_feat: int, config_dim: int, **kwargs) -> CostModel:
    """A model by name (see :data:`MODELS`).

    >>> m = build_model("tile_sage", 8, 24)
    >>> m(torch.zeros(3, dtype=torch.long), torch.zeros(3, 8), torch.tensor([[0, 1], [2, 2]]),
    ...   torch.zeros(5, 24), torch.zeros(0, dtype=torch.long)).shape
    torch.Size([5])
    """
    if name not in MODELS:
        raise ValueError(f"model {name!r} unknown; expected one of {sorted(MODELS)}")
    return MODELS[name](num_node_feat, config_dim, **kwargs)


def graph_tensors(g, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a :class:`~graphopt.costmodel.data.CostGraph` a model takes:
    ``op``, ``x``, ``edge_index``, ``cfg`` (every configuration), ``config_nodes``,
    ``runtime`` (float64)."""
    return {"op": torch.as_tensor(g.op, device=device),
            "x": torch.as_tensor(g.node_feat, device=device),
            "edge_index": torch.as_tensor(g.edge_index, device=device),
            "cfg": torch.as_tensor(g.config_feat, device=device),
            "config_nodes": torch.as_tensor(g.config_nodes, device=device),
            "runtime": torch.as_tensor(g.runtime, device=device)}
