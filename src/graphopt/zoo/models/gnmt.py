"""GNMT: the LSTM encoder–decoder with attention of Wu et al. (2016), unrolled.

Structure (Wu et al. 2016, as in TensorFlow's ``nmt`` GNMT models with the
``gnmt_v2`` attention that GO's benchmarks used):

- encoder: a bidirectional first layer (forward and backward LSTMs, outputs
  concatenated), then ``layers - 1`` forward LSTM layers; residual connections from
  the third encoder layer on;
- attention: normalized Bahdanau attention over the top encoder outputs, queried by
  the bottom decoder layer's output at the current step;
- decoder: ``layers`` LSTM layers; the bottom one reads the target embedding and the
  previous context, every other one reads the layer below and the current context;
  residual connections from the third decoder layer on (added to the part of the
  input that comes from the layer below); the decoder starts from the encoder's final
  states;
- dropout on every LSTM's input at every step (fresh masks, as TensorFlow's
  ``DropoutWrapper``);
- a softmax over the target vocabulary at every step and the mean cross-entropy.

Every recurrence is a Python loop over time steps, so each step's ops appear in a
traced graph. Sizes used by the zoo: 1024 units, batch 128, 32,000 shared word
pieces, 50 source and 50 target steps, dropout 0.2 (Wu et al. 2016; TensorFlow
``nmt``'s WMT GNMT settings). Left out: the length masks of padded batches (all
sentences are full length).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphopt.errors import UsageError
from graphopt.zoo.models._common import LSTMCell, seeded, token_batch

__all__ = ["GNMT", "make"]


class NormedBahdanauAttention(nn.Module):
    """Additive attention with a weight-normalized score vector (Salimans & Kingma 2016).

    .. math:: e_s = g \\frac{v}{\\lVert v \\rVert}^\\top \\tanh(W_k m_s + W_q q + b),
              \\quad a = \\mathrm{softmax}(e), \\quad c = \\textstyle\\sum_s a_s m_s

    Shapes
    ------
    keys and memory (B, S, H) and query (B, H) -> context (B, H).
    """

    def __init__(self, hidden: int):
        super().__init__()
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Parameter(torch.empty(hidden))
        self.b = nn.Parameter(torch.zeros(hidden))
        self.g = nn.Parameter(torch.tensor(hidden ** -0.5))
        nn.init.uniform_(self.v, -hidden ** -0.5, hidden ** -0.5)

    def forward(self, keys: Tensor, memory: Tensor, v: Tensor, query: Tensor) -> Tensor:
        energy = torch.tanh(keys + (self.query(query) + self.b)[:, None, :])
        scores = torch.softmax(energy @ v, dim=1)
        return torch.bmm(scores[:, None, :], memory)[:, 0]

    def normed_v(self) -> Tensor:
        """``g v / ||v||``, computed once per step of training."""
        return self.g * self.v / self.v.norm()


class GNMT(nn.Module):
    """GNMT encoder–decoder; ``forward`` returns the training loss.

    Parameters
    ----------
    layers : int
        Encoder layers (the bidirectional one counts once) and decoder layers.
    hidden : int
        Width of embeddings, LSTMs and attention.
    vocab : int
        Shared source and target vocabulary size.
    dropout : float
        Dropout probability on LSTM inputs.

    Shapes
    ------
    source (B, S), target inputs (B, T) and target outputs (B, T), int64 -> scalar loss.
    """

    def __init__(self, layers: int = 4, hidden: int = 1024, vocab: int = 32_000,
                 dropout: float = 0.2):
        super().__init__()
        if layers < 2:
            raise UsageError(f"GNMT needs layers >= 2 (a bidirectional layer and a forward one), "
                             f"got {layers}")
        H = hidden
        self.hidden = H
        self.drop = nn.Dropout(dropout)
        self.src_embedding = nn.Embedding(vocab, H)
        self.tgt_embedding = nn.Embedding(vocab, H)
        self.enc_fw = LSTMCell(H, H)
        self.enc_bw = LSTMCell(H, H)
        self.encoder = nn.ModuleList([LSTMCell(2 * H, H)] +
                                     [LSTMCell(H, H) for _ in range(layers - 2)])
        self.attention = NormedBahdanauAttention(H)
        self.decoder = nn.ModuleList(LSTMCell(2 * H, H) for _ in range(layers))
        self.proj = nn.Linear(H, vocab, bias=False)

    def _run(self, cell: nn.Module, xs: list[Tensor], state: tuple[Tensor, Tensor],
             reverse: bool = False) -> tuple[list[Tensor], tuple[Tensor, Tensor]]:
        h, c = state
        out: list[Tensor] = [xs[0]] * len(xs)
        for t in (reversed(range(len(xs))) if reverse else range(len(xs))):
            h, c = cell(self.drop(xs[t]), h, c)
            out[t] = h
        return out, (h, c)

    def forward(self, source: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        src = self.src_embedding(source).unbind(1)
        zero = src[0].new_zeros(source.shape[0], self.hidden)
        # encoder: bidirectional bottom layer, then forward layers, residual from the 3rd
        fw, _ = self._run(self.enc_fw, list(src), (zero, zero))
        bw, bw_state = self._run(self.enc_bw, list(src), (zero, zero), reverse=True)
        xs = [torch.cat([f, b], dim=1) for f, b in zip(fw, bw)]
        finals = [bw_state]
        for k, cell in enumerate(self.encoder):
            hs, state = self._run(cell, xs, (zero, zero))
            xs = [h + x for h, x in zip(hs, xs)] if k >= 1 else hs
            finals.append(state)
        memory = torch.stack(xs, dim=1)
        keys = self.attention.key(memory)
        v = self.attention.normed_v()
        # decoder: attention from the bottom layer's current output, context to every layer
        states = finals[:len(self.decoder)]
        ctx = zero
        outputs = []
        for y in self.tgt_embedding(tgt_in).unbind(1):
            h, c = self.decoder[0](self.drop(torch.cat([y, ctx], dim=1)), *states[0])
            states[0] = (h, c)
            ctx = self.attention(keys, memory, v, h)
            x = h
            for k in range(1, len(self.decoder)):
                h, c = self.decoder[k](self.drop(torch.cat([x, ctx], dim=1)), *states[k])
                states[k] = (h, c)
                x = h + x if k >= 2 else h
            outputs.append(x)
        logits = self.proj(torch.stack(outputs, dim=1))
        return nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())


def make(layers: int = 4, *, hidden: int = 1024, vocab: int = 32_000, src_len: int = 50,
         tgt_len: int = 50, batch: int = 128, dropout: float = 0.2, seed: int = 0
         ) -> tuple[GNMT, tuple[Tensor, Tensor, Tensor]]:
    """A :class:`GNMT` and one batch of ``(source, target inputs, target outputs)``."""
    with seeded(seed) as gen:
        model = GNMT(layers, hidden, vocab, dropout)
        source = token_batch(gen, vocab, batch, src_len)
        target = token_batch(gen, vocab, batch, tgt_len + 1)
    return model, (source, target[:, :-1].contiguous(), target[:, 1:].contiguous())
