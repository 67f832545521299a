"""The sequence-to-sequence placer of Mirhoseini et al. (2017), as grappler's
hierarchical controller (HDP, 2018) builds it."""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["AttentionLSTMPlacer"]


class AttentionLSTMPlacer(nn.Module):
    r"""LSTM encoder–decoder with content-based attention that places groups one by one.

    The encoder (bidirectional: :math:`H/2` units per direction) reads the group
    inputs :math:`x_1..x_G` into memories :math:`m_j`; the decoder starts from the
    encoder's final state and is fed the previous group's device:

    .. math::
        s_t &= \mathrm{LSTM}(e(d_{t-1}), s_{t-1}), \quad e(d_0) = \text{go embedding} \\
        \alpha_{tj} &= \mathrm{softmax}_j\, v^\top \tanh(W_1 m_j + W_2 s_t), \quad
        c_t = \textstyle\sum_j \alpha_{tj} W_1 m_j \\
        \ell_t &= C \tanh(W_o [s_t; c_t] / T) + \epsilon_t + p_t, \quad
        \epsilon_t \sim \mathcal{N}(0, (\sigma \lVert \ell \rVert_{\mathrm{rms}})^2) \\
        d_t &\sim \mathrm{softmax}(\ell_t)

    with :math:`p_t` an optional prior over the devices of group :math:`t` (0 without).

    Parameters
    ----------
    in_dim : int
        Width of a group's input.
    num_devices : int
    hidden : int
        LSTM units :math:`H` (even when ``bidirectional``).
    bidirectional : bool
        Bidirectional encoder (HDP) or one direction.
    temperature, tanh_constant : float
        :math:`T` and :math:`C` above (logits squashed into :math:`[-C, C]`).
    forget_bias : float
        Initial bias of every LSTM forget gate.

    Shapes
    ------
    - input ``x``: (B, G, in_dim); optional ``prior``: (G, num_devices)
    - output of :meth:`forward`: actions (B·k, G) int64 — ``k`` samples per input, rows
      ``i·k .. i·k + k − 1`` from input ``i`` — and their log-probabilities and entropies
      summed over groups (B·k,).

    Examples
    --------
    >>> placer = AttentionLSTMPlacer(5, num_devices=3, hidden=8)
    >>> actions, logp, ent = placer(torch.rand(2, 4, 5), num_samples=3)
    >>> tuple(actions.shape), tuple(logp.shape), int(actions.max()) < 3
    ((6, 4), (6,), True)
    >>> placer
    AttentionLSTMPlacer(in_dim=5, num_devices=3, hidden=8, bidirectional=True)

    References
    ----------
    A. Mirhoseini, H. Pham, Q. V. Le, B. Steiner, R. Larsen, Y. Zhou, N. Kumar,
    M. Norouzi, S. Bengio and J. Dean, "Device Placement Optimization with Reinforcement
    Learning", ICML 2017.
    A. Mirhoseini, A. Goldie, H. Pham, B. Steiner, Q. V. Le and J. Dean, "A Hierarchical
    Model for Device Placement", ICLR 2018.
    """

    def __init__(self, in_dim: int, num_devices: int, hidden: int = 512,
                 bidirectional: bool = True, temperature: float = 1.0,
                 tanh_constant: float = 1.0, forget_bias: float = 1.0):
        super().__init__()
        if bidirectional and hidden % 2:
            raise ValueError(f"a bidirectional encoder needs an even hidden size, got {hidden}")
        self.in_dim, self.num_devices, self.hidden = in_dim, num_devices, hidden
        self.bidirectional = bidirectional
        self.temperature, self.tanh_constant, self.forget_bias = (temperature, tanh_constant,
                                                                  forget_bias)
        self.encoder = nn.LSTM(in_dim, hidden // 2 if bidirectional else hidden, batch_first=True,
                               bidirectional=bidirectional)
        self.decoder = nn.LSTMCell(hidden, hidden)
        self.device_embedding = nn.Embedding(num_devices + 1, hidden)  # last row: "go"
        self.attn_memory = nn.Linear(hidden, hidden, bias=False)  # W_1
        self.attn_query = nn.Linear(hidden, hidden, bias=False)  # W_2
        self.attn_v = nn.Linear(hidden, 1, bias=False)
        self.out = nn.Linear(2 * hidden, num_devices, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights (grappler's initializer), zero biases but the forget
        gates', which start at ``forget_bias``."""
        for name, p in self.named_parameters():
            if "bias" in name:
                nn.init.zeros_(p)
                if "bias_ih" in name:  # gates i, f, g, o: the second quarter is f
                    n = p.shape[0] // 4
                    nn.init.constant_(p[n:2 * n], self.forget_bias)
            else:
                nn.init.xavier_uniform_(p)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(in_dim={self.in_dim}, num_devices={self.num_devices}, "
                f"hidden={self.hidden}, bidirectional={self.bidirectional})")

    def encode(self, x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Attention memories :math:`W_1 m` (B, G, H) and the decoder's first state."""
        mem, (h, c) = self.encoder(x)
        if self.bidirectional:  # (2, B, H/2) → (B, H), forward then backward
            h, c = torch.cat([h[0], h[1]], 1), torch.cat([c[0], c[1]], 1)
        else:
            h, c = h[0], c[0]
        return self.attn_memory(mem), (h, c)

    def forward(self, x: Tensor, num_samples: int = 1, generator: torch.Generator | None = None,
                noise: float = 0.0, prior: Tensor | None = None,
                greedy: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Sample ``num_samples`` placements per input (``greedy``: each group's likeliest
        device instead); ``noise`` is :math:`\\sigma`, ``prior`` :math:`p`."""
        mem, (h, c) = self.encode(x)
        mem = mem.repeat_interleave(num_samples, 0)
        h, c = h.repeat_interleave(num_samples, 0), c.repeat_interleave(num_samples, 0)
        rows, groups = mem.shape[0], mem.shape[1]
        prev = torch.full((rows,), self.num_devices, dtype=torch.long)
        actions, logp, entropy = [], x.new_zeros(rows), x.new_zeros(rows)
        for t in range(groups):
            h, c = self.decoder(self.device_embedding(prev), (h, c))
            score = self.attn_v(torch.tanh(mem + self.attn_query(h)[:, None])).squeeze(2)
            context = (torch.softmax(score, 1)[:, :, None] * mem).sum(1)
            logits = self.tanh_constant * torch.tanh(self.out(torch.cat([h, context], 1))
                                                     / self.temperature)
            if noise > 0:
                rms = logits.detach().square().mean().sqrt()
                logits = logits + noise * rms * torch.randn(logits.shape, generator=generator)
            if prior is not None:
                logits = logits + prior[t]
            log_probs = torch.log_softmax(logits, 1)
            prev = (log_probs.argmax(1) if greedy else
                    torch.multinomial(log_probs.detach().exp(), 1, generator=generator).squeeze(1))
            actions.append(prev)
            logp = logp + log_probs.gather(1, prev[:, None]).squeeze(1)
            entropy = entropy - (log_probs.exp() * log_probs).sum(1)
        return torch.stack(actions, 1), logp, entropy
