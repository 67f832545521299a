"""What a human expert does: place by the model's structure, read from module paths.

The "human expert" placements of the device-placement literature (Mirhoseini et al.
2017, HDP 2018, GDP 2019, GO 2020) follow a few rules of thumb, which this module
applies to ``graph.module`` (e.g. ``"encoder.layers.3.attn"``):

1. **Encoder-decoder** (GNMT; Wu et al. 2016): encoder layers spread over the devices
   in contiguous blocks, decoder layers likewise; attention on the decoder's first
   device; encoder embedding with the first encoder layer, decoder embedding with the
   first decoder layer; softmax, output projection and loss with the last decoder layer.
2. **Stacked layers** (RNN language models, Transformer-XL, GPT-style stacks,
   MLPs): layer ``l`` of ``L`` on device ``l * D // L``, stacks one after another;
   embeddings and modules before the first layer with the first layer; softmax, head,
   loss and modules after the last layer with the last; modules in between with the
   layer seen last before them, unless they are used across layers (a dropout module
   applied everywhere), whose ops then follow their neighbours.
3. **Otherwise** (Inception, AmoebaNet, WaveNet, anything without numbered layers):
   pipeline stages — the modules, in topological order of their first op, cut into D
   contiguous runs of balanced compute (mean op time over devices).

A layer is the first numbered component of a path (``layers.3``, ``lstm.1``,
``h.11``: :func:`layer_of`); encoder and decoder layers are those with a path
component starting with ``enc`` or ``dec``.

Backward and update ops carry their forward module's path and follow it; an op with
no module path takes the device its inputs mostly come from (by bytes), or else its
consumers'. Finally every colocation group moves to its majority device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from graphopt.ir.features import layer_of
from graphopt.optim.base import Budget, compose, register
from graphopt.optim.heuristics._common import unify_groups
from graphopt.sim import Plan, Problem

__all__ = ["Expert", "expert_placement"]

_HEAD = re.compile(r"softmax|logits|loss|output|generator|lm_head|classifier|head|proj")
_EMBED = re.compile(r"embed")
_ATTN = re.compile(r"attention|attn")


def _within(path: str, prefix: str) -> bool:
    """Whether a component of a module path starts with ``prefix`` (``"enc"``: encoder)."""
    return any(part.startswith(prefix) for part in path.split("."))


def _spread(count: int, num_devices: int) -> np.ndarray:
    """Contiguous blocks: item ``l`` of ``count`` on device ``l * D // count``."""
    return np.arange(count) * num_devices // max(count, 1)


def expert_placement(problem: Problem) -> tuple[np.ndarray, str]:
    """The expert placement and the name of the rule that made it (``"encoder-decoder"``,
    ``"layer-wise"`` or ``"pipeline"``). O(N log N) for sorting module names, O(N + E)
    for the rest.

    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import mlp_training_graph
    >>> prob = Problem(mlp_training_graph(layers=8), load_cluster("dgx1-v100:4"))
    >>> place, rule = expert_placement(prob)
    >>> rule, int(place[prob.graph.index["layers.5.addmm"]])
    ('layer-wise', 2)
    """
    g = problem.graph
    nd = problem.num_devices
    names, first_op, node_module = np.unique(g.module, return_index=True, return_inverse=True)
    node_module = node_module.ravel()
    last_op = np.zeros(len(names), dtype=np.int64)
    np.maximum.at(last_op, node_module, np.arange(g.num_nodes))
    named = [int(m) for m in np.argsort(first_op, kind="stable") if names[m]]
    layer = {m: layer_of(str(names[m])) for m in named}
    start: dict[tuple[str, int], int] = {}  # each layer's first op
    for m in named:
        key = layer[m]
        if key is not None:
            start[key] = min(start.get(key, first_op[m]), first_op[m])
    stacks = list(dict.fromkeys(k[0] for k in sorted(start, key=lambda k: start[k])))
    keys = sorted(start, key=lambda k: (stacks.index(k[0]), k[1]))  # stack by stack, in index order
    enc = [k for k in keys if _within(k[0], "enc")]
    dec = [k for k in keys if _within(k[0], "dec")]
    if enc and dec:
        rule = "encoder-decoder"
        dev_of = {k: int(d) for part in (enc, dec) for k, d in zip(part, _spread(len(part), nd))}
    elif len(keys) >= 2:
        rule = "layer-wise"
        dev_of = {k: int(d) for k, d in zip(keys, _spread(len(keys), nd))}
    else:
        work = problem.costs.time.mean(axis=1)
        if not named:  # no module paths at all: every op is its own module
            return unify_groups(g, _pipeline(work, nd), nd), "pipeline"
        mod_dev = np.full(len(names), -1, dtype=np.int64)
        mod_dev[named] = _pipeline(np.bincount(node_module, weights=work)[named], nd)
        return unify_groups(g, _fill_unplaced(problem, mod_dev[node_module]), nd), "pipeline"

    starts = np.sort(list(start.values()))

    def other_module(path: str, first: int, last: int) -> int:
        """Device of a module outside the numbered layers (-1: its ops' neighbours decide)."""
        pool = keys
        if rule == "encoder-decoder":
            if _ATTN.search(path):
                return dev_of[dec[0]]
            in_dec = _within(path, "dec") or _HEAD.search(path) or first >= start[dec[0]]
            pool = enc if _within(path, "enc") else dec if in_dec else enc
        if _HEAD.search(path):
            return dev_of[pool[-1]]
        if _EMBED.search(path):
            return dev_of[pool[0]]
        if np.searchsorted(starts, last) - np.searchsorted(starts, first) >= 2:
            return -1  # used across layers (a shared dropout, say): follow the neighbours
        before = [k for k in pool if start[k] <= first]
        if not before:
            return dev_of[pool[0]]
        return dev_of[max(before, key=lambda k: start[k])]  # with the layer seen last before it

    mod_dev = np.full(len(names), -1, dtype=np.int64)
    for m in named:
        k = layer[m]
        mod_dev[m] = (dev_of[k] if k is not None
                      else other_module(str(names[m]), first_op[m], last_op[m]))
    return unify_groups(g, _fill_unplaced(problem, mod_dev[node_module]), nd), rule


def _pipeline(work: np.ndarray, num_devices: int) -> np.ndarray:
    """Contiguous stages of balanced work: item i goes to the device whose share of the
    total holds the midpoint of its own work."""
    total = work.sum()
    if total <= 0:
        return _spread(len(work), num_devices)
    mid = np.cumsum(work) - work / 2
    return np.minimum((mid / total * num_devices).astype(np.int64), num_devices - 1)


def _fill_unplaced(problem: Problem, place: np.ndarray) -> np.ndarray:
    """Ops without a device take the device most of their input bytes come from (a
    forward pass), then the one most of their output bytes go to (a backward pass);
    device 0 for what is still left. O(N + E)."""
    place = place.copy()
    g = problem.graph
    passes = ((g.pred, range(g.num_nodes)), (g.succ, range(g.num_nodes - 1, -1, -1)))
    for (ptr, nodes, eids), walk in passes:
        for v in walk:
            if place[v] >= 0:
                continue
            lo, hi = ptr[v], ptr[v + 1]
            known = place[nodes[lo:hi]] >= 0
            if known.any():
                votes = np.bincount(place[nodes[lo:hi]][known],
                                    weights=g.edge_bytes[eids[lo:hi]][known] + 1e-9)
                place[v] = int(votes.argmax())
    place[place < 0] = 0
    return place


@register("expert")
@dataclass
class Expert:
    """Human-expert placement from module paths: layer-wise, encoder/decoder, or pipeline.

    See :func:`expert_placement` for the rules; ``stats["rule"]`` names the one that
    fired. Ignores costs beyond balancing pipeline stages, and ignores memory.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> from graphopt.ir.generate import layered_graph
    >>> prob = Problem(layered_graph(8, 4), load_cluster("dgx1-v100:2"))
    >>> plan, stats = Expert().optimize(prob, frozenset({"placement"}), Budget(), 0)
    >>> stats["rule"], plan.placement[:4].tolist(), plan.placement[-4:].tolist()
    ('pipeline', [0, 0, 0, 0], [1, 1, 1, 1])
    """

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        place, rule = expert_placement(problem)
        return compose(task | {"placement"}, init, Plan(placement=place)), \
            {"evals": 0, "rule": rule}
