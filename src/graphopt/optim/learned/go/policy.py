"""GO's policy network: one forward pass gives every node's placement, scheduling
priority and fusion priority (Zhou et al., "Transferable Graph Optimizers for ML
Compilers", NeurIPS 2020)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.inits import reset
from torch_geometric.utils import scatter

from graphopt.errors import check_size
from graphopt.optim.learned.go.env import PRIOR_DEVICE_FEATURES, PRIOR_FEATURES
from graphopt.nn.attention import SegmentRecurrentAttention
from graphopt.nn.sage import BiSAGE

__all__ = ["TASK_LEVELS", "GOPolicy", "GOPolicyConfig", "PriorGOPolicy", "PriorGOPolicyConfig"]

#: The config field that sets how many choices each task's head has.
TASK_LEVELS = {"placement": "max_devices", "scheduling": "priority_levels",
               "fusion": "fusion_levels"}


@dataclass
class GOPolicyConfig:
    """Shape of a :class:`GOPolicy`; saved next to its weights."""

    in_dim: int
    """Width of a node's feature vector."""
    num_op_types: int
    """Rows of the op-type embedding table (ids beyond it read as unknown, id 0)."""
    dim: int = 64
    """Width of every hidden layer."""
    sage_layers: int = 2
    """GraphSAGE layers (hops)."""
    attn_layers: int = 2
    """Shared segment-recurrent attention layers."""
    heads: int = 4
    """Attention heads."""
    segment: int = 64
    """Nodes per attention segment."""
    max_devices: int = 8
    """Largest device count the placement head serves; fewer are masked."""
    priority_levels: int = 8
    """Scheduling priorities to choose from (higher runs first)."""
    fusion_levels: int = 4
    """Fusion priorities to choose from; level 0 means "do not fuse"."""

    def __post_init__(self) -> None:
        for name, (low, high) in _CONFIG_RANGES.items():  # a config may come from a file
            check_size(name, getattr(self, name), low, high)


#: The range of every integer field of :class:`GOPolicyConfig`: far beyond any policy
#: trained here, and small enough that building the network stays cheap.
_CONFIG_RANGES = {"in_dim": (1, 4096), "num_op_types": (1, 65536), "dim": (1, 4096),
                  "sage_layers": (0, 64), "attn_layers": (0, 64), "heads": (1, 64),
                  "segment": (1, 65536), "max_devices": (1, 1024), "priority_levels": (1, 1024),
                  "fusion_levels": (1, 1024)}


class GOPolicy(nn.Module):
    r"""GraphSAGE → segment-recurrent attention with FiLM → one attention layer and
    linear head per task.

    1. **Node embedding**: a linear map of the features plus the mean op-type embedding of
       the ops a node stands for (a node may be a group of ops), then :class:`BiSAGE`.
    2. **Graph context**: mean and max of the node embeddings and a one-hot of the device
       count, through an MLP; it modulates every attention layer (:class:`FiLM`), so the
       same weights specialize per graph and per cluster size.
    3. **Shared trunk**: ``attn_layers`` :class:`SegmentRecurrentAttention` layers over the
       nodes in topological order.
    4. **Per task** (GO's multi-task network): one more attention layer, residual on the
       shared embedding, and a linear head with a choice per level — devices (beyond the
       cluster's count masked out), scheduling priorities, fusion priorities.

    Shapes
    ------
    - ``x``: (N, in_dim) float, ``op_ids``: (M,) int64, ``op_node``: (M,) int64 in 0..N-1
      (the node each op belongs to), ``edge_index``: (2, E)
    - output: ``{task: logits (N, levels)}`` for the tasks asked for

    Examples
    --------
    >>> cfg = GOPolicyConfig(in_dim=5, num_op_types=10, dim=16, segment=4)
    >>> net = GOPolicy(cfg)
    >>> out = net(torch.rand(7, 5), torch.arange(7), torch.arange(7),
    ...           torch.tensor([[0, 1], [1, 2]]), num_devices=3)
    >>> {t: tuple(v.shape) for t, v in out.items()}
    {'placement': (7, 8), 'scheduling': (7, 8), 'fusion': (7, 4)}
    >>> bool(torch.isinf(out["placement"][:, 3:]).all())
    True
    >>> net
    GOPolicy(in_dim=5, dim=16, sage_layers=2, attn_layers=2, heads=4, segment=4)

    References
    ----------
    Y. Zhou, S. Roy, A. Abdolrashidi, D. Wong, P. Ma, Q. Xu, H. Liu, P. M. Phothilimtha,
    S. Wang, A. Goldie, A. Mirhoseini and J. Laudon, "Transferable Graph Optimizers for
    ML Compilers", NeurIPS 2020.
    """

    def __init__(self, config: GOPolicyConfig):
        super().__init__()
        c, d = config, config.dim
        self.config = c
        self.inp = nn.Linear(c.in_dim, d)
        self.op_embed = nn.Embedding(c.num_op_types, d)
        self.sage = BiSAGE(d, c.sage_layers)
        self.context = nn.Sequential(nn.Linear(2 * d + c.max_devices + 1, d), nn.ReLU(),
                                     nn.Linear(d, d))
        self.trunk = nn.ModuleList(SegmentRecurrentAttention(d, c.heads, c.segment, d)
                                   for _ in range(c.attn_layers))
        self.task_attn = nn.ModuleDict({t: SegmentRecurrentAttention(d, c.heads, c.segment, d)
                                        for t in TASK_LEVELS})
        self.head = nn.ModuleDict({t: nn.Sequential(nn.LayerNorm(d), nn.Linear(d, getattr(c, f)))
                                   for t, f in TASK_LEVELS.items()})

    def reset_parameters(self) -> None:
        """Reset every child as it initializes itself (``__init__`` leaves each child's
        own initialization in place rather than drawing twice)."""
        for child in self.children():
            reset(child)

    def zero_head(self, task: str) -> None:
        """Set ``task``'s output layer to zero: its logits start at zero, so that a plan
        starts at the environment's prior (:meth:`graphopt.optim.learned.go.env.GOEnv.with_prior`,
        centred on a start plan) while the trunk keeps what it learned."""
        out = self.head[task][-1]
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)

    def __repr__(self) -> str:
        c = self.config
        return (f"{type(self).__name__}(in_dim={c.in_dim}, dim={c.dim}, "
                f"sage_layers={c.sage_layers}, attn_layers={c.attn_layers}, heads={c.heads}, "
                f"segment={c.segment})")

    def forward(self, x: Tensor, op_ids: Tensor, op_node: Tensor, edge_index: Tensor,
                num_devices: int, tasks: tuple[str, ...] = tuple(TASK_LEVELS)) -> dict[str, Tensor]:
        # embed's outputs are decide's first arguments, whatever a subclass adds to them
        return self.decide(*self.embed(x, op_ids, op_node, edge_index, num_devices),
                           num_devices, tasks)

    def embed(self, x: Tensor, op_ids: Tensor, op_node: Tensor, edge_index: Tensor,
              num_devices: int) -> tuple[Tensor, Tensor]:
        """Steps 1–3: the shared embedding of every node (N, dim) and the graph context
        (dim,). Fine-tuning that trains only the task layers (PPO's ``tune="heads"``)
        computes it once per graph."""
        c = self.config
        if not 1 <= num_devices <= c.max_devices:
            raise ValueError(f"this policy places on 1..{c.max_devices} devices, "
                             f"not {num_devices}")
        n = x.shape[0]
        ids = torch.where(op_ids < c.num_op_types, op_ids, torch.zeros_like(op_ids))
        h = self.encode(x) + scatter(self.op_embed(ids), op_node, dim=0, dim_size=n, reduce="mean")
        h = self.sage(h, edge_index)
        ctx = self.context(torch.cat([h.mean(0), h.max(0).values,
                                      F.one_hot(torch.tensor(num_devices), c.max_devices + 1)]))
        for layer in self.trunk:
            h = layer(h, ctx)
        return h, ctx

    def encode(self, x: Tensor) -> Tensor:
        """Each node's features mapped to the hidden width (N, dim); columns of ``x``
        beyond ``in_dim`` are a subclass's."""
        return self.inp(x[:, :self.config.in_dim])

    def decide(self, h: Tensor, ctx: Tensor, num_devices: int,
               tasks: tuple[str, ...] = tuple(TASK_LEVELS)) -> dict[str, Tensor]:
        """Step 4: each task's logits from :meth:`embed`'s output."""
        c = self.config
        out = {}
        for t in tasks:
            logits = self.head[t](self.task_attn[t](h, ctx))
            if t == "placement":
                logits = logits.masked_fill(torch.arange(c.max_devices) >= num_devices,
                                            float("-inf"))
            out[t] = logits
        return out

    def config_dict(self) -> dict:
        """The config as plain data, for a checkpoint's JSON."""
        return asdict(self.config)


@dataclass
class PriorGOPolicyConfig(GOPolicyConfig):
    """Shape of a :class:`PriorGOPolicy`: GO's, plus the widths of the start plan's
    columns and of the pair head."""

    prior_dim: int = len(PRIOR_FEATURES)
    """Columns about a node's place in the start plan (``PRIOR_FEATURES``)."""
    pair_in: int = len(PRIOR_DEVICE_FEATURES)
    """Columns about each (node, device) pair (``PRIOR_DEVICE_FEATURES``)."""
    pair_dim: int = 32
    """Hidden width of the pair head."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("prior_dim", "pair_in", "pair_dim"):
            check_size(name, getattr(self, name), 1, 4096)


class PriorGOPolicy(GOPolicy):
    r"""GO's policy that reads a start plan (the prior) and says which nodes to move
    where: a placement head over (node, device) pairs, the same whatever the devices'
    numbers.

    The start plan enters twice: each node's :data:`PRIOR_FEATURES` are added to its
    input embedding (so message passing sees where its neighbours sit), and each
    device's :data:`PRIOR_DEVICE_FEATURES` for that node (is it home, the share of the
    node's bytes exchanged with it, its load, its memory) meet the node's final
    embedding in the pair head:

    .. math::
        z_{u,d} = w^\top \operatorname{ReLU}(A h_u + B r_{u,d} + b) + c

    so that renumbering the devices permutes the logits alike. The environment adds its
    prior (``GOEnv.with_prior``: a bias to each node's device in the start plan), and the
    head learns the moves off it. Scheduling and fusion heads are GO's.

    Shapes
    ------
    - ``x``: (N, in_dim + prior_dim + D · pair_in) float (``GOEnv(prior_inputs=True)``)
    - output: as :class:`GOPolicy`'s; placement logits beyond D are ``-inf``

    Examples
    --------
    >>> cfg = PriorGOPolicyConfig(in_dim=5, num_op_types=10, dim=16, segment=4)
    >>> net = PriorGOPolicy(cfg)
    >>> x = torch.rand(7, 5 + 4 + 3 * 7)
    >>> out = net(x, torch.arange(7), torch.arange(7), torch.tensor([[0, 1], [1, 2]]),
    ...           num_devices=3, tasks=("placement",))
    >>> tuple(out["placement"].shape), bool(torch.isinf(out["placement"][:, 3:]).all())
    ((7, 8), True)
    >>> swap = torch.tensor([1, 0, 2])  # devices 0 and 1 renumbered: their logits swap
    >>> y = torch.cat([x[:, :9], x[:, 9:].view(7, 3, 7)[:, swap].reshape(7, -1)], 1)
    >>> out2 = net(y, torch.arange(7), torch.arange(7), torch.tensor([[0, 1], [1, 2]]),
    ...            num_devices=3, tasks=("placement",))
    >>> torch.allclose(out2["placement"][:, :3], out["placement"][:, swap], atol=1e-6)
    True
    """

    def __init__(self, config: PriorGOPolicyConfig):
        super().__init__(config)
        c = config
        del self.head["placement"]  # the pair head decides placement
        self.prior_inp = nn.Linear(c.prior_dim, c.dim)
        self.pair_node = nn.Linear(c.dim, c.pair_dim)
        self.pair_dev = nn.Linear(c.pair_in, c.pair_dim, bias=False)
        self.pair_out = nn.Linear(c.pair_dim, 1)

    def encode(self, x: Tensor) -> Tensor:
        c = self.config
        return super().encode(x) + self.prior_inp(x[:, c.in_dim:c.in_dim + c.prior_dim])

    def embed(self, x: Tensor, op_ids: Tensor, op_node: Tensor, edge_index: Tensor,
              num_devices: int) -> tuple[Tensor, Tensor, Tensor]:
        """GO's embedding and context, and the (node, device) columns (N, D, pair_in)."""
        c = self.config
        width = c.in_dim + c.prior_dim + num_devices * c.pair_in
        if x.shape[1] != width:
            raise ValueError(f"a prior-aware policy reads {width} columns on {num_devices} "
                             f"devices, not {x.shape[1]} (GOEnv(prior_inputs=True))")
        h, ctx = super().embed(x, op_ids, op_node, edge_index, num_devices)
        return h, ctx, x[:, c.in_dim + c.prior_dim:].reshape(x.shape[0], num_devices, c.pair_in)

    def decide(self, h: Tensor, ctx: Tensor, pair: Tensor, num_devices: int,
               tasks: tuple[str, ...] = tuple(TASK_LEVELS)) -> dict[str, Tensor]:
        out = super().decide(h, ctx, num_devices, tuple(t for t in tasks if t != "placement"))
        if "placement" in tasks:
            u = self.task_attn["placement"](h, ctx)
            z = self.pair_out(torch.relu(self.pair_node(u)[:, None, :] + self.pair_dev(pair)))
            pad = torch.full((h.shape[0], self.config.max_devices - num_devices), float("-inf"))
            out = {"placement": torch.cat([z[..., 0], pad], 1), **out}
        return out
