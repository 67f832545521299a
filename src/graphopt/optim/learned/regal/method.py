"""REGAL (Paliwal et al., ICLR 2020): BRKGA driven by a graph network trained once.

**Chromosome** (:class:`RegalSpace`), as in the paper: per placement unit (a colocation
group, kept whole, or a lone op) one *affinity* key per device, the unit going to the
device of the highest key; per node one *scheduling priority* key, the simulator running
the ready kernel of highest priority first (REGAL's list scheduling). REGAL's third part,
tensor-transfer priorities, is not kept: the simulator sends each link's transfers first
come first served, so there is nothing for them to order. Fusion is not in REGAL's
chromosome either.

A unit's affinities cross over together, so that BRKGA on this chromosome with uniform
distributions is, in distribution, BRKGA on its own.

**Policy** (:class:`~graphopt.optim.learned.regal.head.REGALHead`): per node the Beta(α, β)
that each of its genes' mutants are drawn from and an elite bias (an offset to the
probability a child takes its genes from the elite parent). The learned elite bias is an
option (``elite_bias``), off by default as REGAL's ablation found it harmful; without it
every gene keeps BRKGA's inheritance (0.7). An untrained policy (``checkpoint "untrained"``) is uniform BRKGA.

**Training** (``graphopt train regal``, :func:`graphopt.optim.learned.regal.train.train_regal`): REINFORCE,
reward the relative improvement of BRKGA's best plan at a fixed budget over uniform BRKGA
at the same budget and seed, on :data:`TRAIN_CORPUS`; :data:`TEST_GRAPHS` are never seen.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from graphopt.errors import BadFileError, UsageError
from graphopt.ir.features import layer_share
from graphopt.ir.generate import layered_graph
from graphopt.optim.learned.regal.head import REGALHead
from graphopt.optim.base import Budget, register
from graphopt.optim.search._space import Decisions, SearchSpace
from graphopt.optim.search.brkga import BRKGA
from graphopt.runs.checkpoint import load_policy, save_policy
from graphopt.optim.learned.regal.train import (RegalConfig, gene_params, input_dim, regal_inputs, rescale,
                               train_regal)
from graphopt.sim import Plan, Problem

__all__ = ["REGAL", "RegalSpace", "SHIPPED", "TEST_GRAPHS", "TRAIN_CORPUS", "layer_split_devices",
           "layer_split_prior",
           "load_corpus", "load_regal_policy", "pretrain_regal", "regal_value",
           "trained_prior"]

#: The trained policy in the package.
SHIPPED = Path(__file__).parent.parent / "checkpoints" / "regal"

#: Cluster of REGAL's Table 1 here: two devices.
CLUSTER = "p100:2"

#: Training graphs, GRAPH[*SCALE]: zoo models of the train split at CPU size and random
#: layered graphs (seeds 0–5), each also rescaled (activations x0.5 or x2, REGAL's
#: augmentation). Held-out families (WaveNet, AmoebaNet) and layered seeds >= 100 never
#: appear.
TRAIN_CORPUS = (
    "zoo:rnnlm-2-quick", "zoo:transformer-xl-2-quick", "zoo:gpt2-small-quick",
    "zoo:bert-base-quick", "zoo:resnet-50-quick",
    "layered:12x8:0", "layered:20x6:1", "layered:16x10:2", "layered:24x8:3", "layered:30x5:4",
    "layered:10x12:5",
    "zoo:rnnlm-2-quick*2", "zoo:gpt2-small-quick*0.5", "layered:16x10:2*2", "layered:24x8:3*0.5",
)

#: Held-out test graphs: the held-out zoo families at CPU size and random layered graphs
#: of seeds no training graph has.
TEST_GRAPHS = (
    "zoo:wavenet-2x18-quick", "zoo:amoebanet-quick", "zoo:gnmt-2-quick",
    "layered:15x8:101", "layered:25x8:102", "layered:20x12:103", "layered:40x6:104",
)


def _graph(spec: str):
    """A corpus entry: ``zoo:NAME`` or ``layered:LxW:SEED``, optionally ``*SCALE``.

    Raises
    ------
    ValueError
        A malformed entry (a part that is not a number).
    GraphoptError
        L or W under 1 or L*W over :data:`graphopt.frontends.source.MAX_EXAMPLE_OPS` (a
        typo must not build a graph of 10^12 ops), or a SCALE that is not a finite
        number > 0.
    """
    from graphopt.frontends import load_source
    from graphopt.frontends.source import MAX_EXAMPLE_OPS

    base, _, scale = spec.partition("*")
    if base.startswith("layered:"):
        shape, seed = base.removeprefix("layered:").split(":")
        layers, width = (int(x) for x in shape.split("x"))
        if not (layers >= 1 and width >= 1 and layers * width <= MAX_EXAMPLE_OPS):
            raise UsageError(f"corpus entry {spec!r}: expected L, W >= 1 and L*W <= "
                             f"{MAX_EXAMPLE_OPS:,} ops")
        g = layered_graph(layers, width, seed=int(seed))
    else:
        g = load_source(base)
    if not scale:
        return g
    factor = float(scale)
    if not (np.isfinite(factor) and factor > 0):
        raise UsageError(f"corpus entry {spec!r}: SCALE must be a finite number > 0")
    with np.errstate(over="ignore"):  # sizes that overflow to inf: the graph's check names them
        return rescale(g, factor)


def load_corpus(specs: tuple[str, ...] | list[str], cluster: str = CLUSTER) -> list[Problem]:
    """Problems of corpus entries (see :data:`TRAIN_CORPUS`) on ``cluster``.

    Raises
    ------
    GraphoptError
        An entry that names no graph.
    """
    from graphopt.hardware import load_cluster

    c = load_cluster(cluster)
    out = []
    for s in specs:
        try:
            out.append(Problem(_graph(s), c))
        except ValueError as err:
            raise UsageError(f"corpus entry {s!r}: expected zoo:NAME or layered:LxW:SEED, "
                             f"optionally *SCALE ({err})") from None
    return out


class RegalSpace(SearchSpace):
    """The search space of :class:`SearchSpace` with REGAL's chromosome: ``units * D``
    device affinities (unit-major) then one priority per node; fusion is never searched.

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> prob = Problem(layered_graph(4, 3), load_cluster("p100:2"))
    >>> space = RegalSpace(prob, frozenset({"placement", "scheduling"}))
    >>> space.layout
    {'placement': slice(0, 24, None), 'scheduling': slice(24, 36, None)}
    >>> keys = np.random.default_rng(0).random((5, space.num_genes))
    >>> dec = space.decode(keys)
    >>> np.array_equal(space.decode(space.encode(dec)).units, dec.units)
    True
    """

    def __init__(self, problem: Problem, task: frozenset[str], init: Plan | None = None):
        if "fusion" in task:
            raise UsageError("regal decides placement and scheduling (REGAL's chromosome); "
                             "drop fusion from the task")
        super().__init__(problem, task, init)

    @property
    def layout(self) -> dict[str, slice]:
        sizes = {"placement": self.num_units * self.problem.num_devices,
                 "scheduling": self.problem.num_nodes}
        out, at = {}, 0
        for name in ("placement", "scheduling"):
            if name in self.task:
                out[name] = slice(at, at + sizes[name])
                at += sizes[name]
        return out

    @property
    def crossover_groups(self) -> np.ndarray:
        """A unit's D affinities cross over together (one group per unit, then one per
        priority): a child takes the unit's device from one parent, as with BRKGA's one
        key per unit. With a coin per affinity the unit would go wherever one parent's
        affinity beat the other's, and uniform BRKGA on this chromosome was a weaker
        search than on BRKGA's (2.98% higher peak memory, docs/regal.md)."""
        lay, d = self.layout, self.problem.num_devices
        parts, at = [], 0
        if "placement" in lay:
            parts.append(np.repeat(np.arange(self.num_units), d))
            at = self.num_units
        if "scheduling" in lay:
            parts.append(at + np.arange(self.problem.num_nodes))
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def decode(self, keys: np.ndarray) -> Decisions:
        """Affinities → the device of highest key per unit (ties to the lower device);
        priority keys are the priorities."""
        lay, d = self.layout, self.problem.num_devices
        units = prio = None
        if "placement" in lay:
            units = keys[:, lay["placement"]].reshape(len(keys), self.num_units, d).argmax(axis=2)
        if "scheduling" in lay:
            prio = keys[:, lay["scheduling"]].copy()
        return Decisions(units, prio)

    def encode(self, dec: Decisions) -> np.ndarray:
        """Decisions → keys :meth:`decode` maps back: affinity 0.75 for the unit's device,
        0.25 for the others; priorities as :class:`SearchSpace` encodes them."""
        keys = np.empty((len(dec), self.num_genes))
        lay, d = self.layout, self.problem.num_devices
        if dec.units is not None:
            aff = np.full((len(dec), self.num_units, d), 0.25)
            np.put_along_axis(aff, dec.units[:, :, None], 0.75, axis=2)
            keys[:, lay["placement"]] = aff.reshape(len(dec), -1)
        if dec.priority is not None:
            s = lay["scheduling"]  # the parent writes priorities into this layout's slice
            keys[:, s] = super().encode(Decisions(priority=dec.priority))[:, s]
        return keys


def layer_split_devices(space: RegalSpace) -> np.ndarray:
    """Per placement unit, the device :func:`layer_split_prior` leans it to: the run of
    whole layers (:func:`graphopt.ir.features.layer_share` cut at k/D) most of its nodes
    are in.

    >>> from graphopt.hardware import load_cluster
    >>> space = RegalSpace(Problem(layered_graph(4, 3), load_cluster("p100:2")),
    ...                    frozenset({"placement"}))
    >>> sorted(set(layer_split_devices(space).tolist()))
    [0, 1]
    """
    g, d = space.problem.graph, space.problem.num_devices
    run = np.minimum((layer_share(g) * d).astype(np.int64), d - 1)
    votes = np.zeros((space.num_units, d))
    np.add.at(votes, (space.unit_of, run), 1)
    return votes.argmax(axis=1)


def layer_split_prior(space: RegalSpace, strength: float = 1.5) -> dict[str, np.ndarray]:
    """A hand-written mutant prior for REGAL's chromosome, the bar a trained policy must
    clear: the model cut into D runs of whole layers holding equal weight and output bytes
    (:func:`graphopt.ir.features.layer_share`: a layer with its backward ops), a unit
    (by the vote of its nodes) drawing its affinity for its run's device from
    Beta(``strength``, 1) and for the others from Beta(1, ``strength``); priorities uniform,
    inheritance BRKGA's.

    ``strength`` 1.5 is the best of 1.25, 1.5, 2 and 3 on :data:`TRAIN_CORPUS` (mean peak
    memory 2.6% below uniform BRKGA's there, 5,000 evaluations, 3 seeds;
    ``bench/regal_priors.py``);
    stronger leanings take the diversity BRKGA needs. Returns ``alpha``, ``beta`` and
    ``inheritance`` per gene, as :func:`gene_params`.
    """
    g, d = space.problem.graph, space.problem.num_devices
    mine = np.arange(d)[None, :] == layer_split_devices(space)[:, None]
    alpha = [np.where(mine, strength, 1.0).reshape(-1)]
    beta = [np.where(mine, 1.0, strength).reshape(-1)]
    if "scheduling" in space.layout:
        alpha.append(np.ones(g.num_nodes))
        beta.append(np.ones(g.num_nodes))
    alpha, beta = np.concatenate(alpha), np.concatenate(beta)
    return {"alpha": alpha, "beta": beta, "inheritance": np.full(len(alpha), BRKGA.inheritance)}


def load_regal_policy(checkpoint: str | Path | None = None) -> tuple[REGALHead, dict]:
    """A REGAL policy and its provenance: ``None`` the shipped one, ``"untrained"`` a fresh
    head (uniform BRKGA), else a folder written by ``graphopt train regal``.

    Raises
    ------
    GraphoptError
        The folder holds no policy, or one for other features.
    """
    if checkpoint == "untrained":
        cfg = RegalConfig()
        return REGALHead(input_dim(), cfg.dim, cfg.layers, cfg.max_devices), {"untrained": True}
    head, info = load_policy(checkpoint or SHIPPED, lambda c: REGALHead(**c))
    if head.in_dim != input_dim():
        raise BadFileError(f"{checkpoint or SHIPPED}: policy reads {head.in_dim} features, this "
                           f"graphopt makes {input_dim()}")
    return head, info


def trained_prior(info: dict) -> str:
    """The prior a policy's distributions multiply, from its provenance (``info`` of
    :func:`load_regal_policy`): the one it was trained with; ``"uniform"`` for an untrained
    head or a policy trained before priors existed."""
    return info.get("config", {}).get("prior", "uniform")


@cache
def _shipped() -> tuple[REGALHead, dict]:
    return load_regal_policy(None)


def _prior(space: RegalSpace, prior: str) -> dict[str, np.ndarray] | None:
    """The per-gene distributions named ``prior`` that the policy's multiply (None: uniform)."""
    return layer_split_prior(space) if prior == "layer-split" else None


def _params(head: REGALHead, out: torch.Tensor, space: RegalSpace, elite_bias: bool,
            base: dict[str, np.ndarray] | None) -> dict:
    return gene_params(head, out, space.unit_of, space.num_units, space.problem.num_devices,
                       "scheduling" in space.task, BRKGA.inheritance, elite_bias, base=base)


def regal_value(problem: Problem, params: dict | None, seed: int, evals: int,
                objective: str = "memory", task: frozenset[str] = frozenset({"placement",
                                                                             "scheduling"}),
                brkga: BRKGA | None = None) -> float:
    """The best objective value BRKGA reaches on REGAL's chromosome within ``evals``
    evaluations: with per-gene ``params`` (``alpha``, ``beta``, ``inheritance``), or with
    uniform distributions and ``brkga``'s inheritance when None. What training prices an
    action with (:func:`graphopt.optim.learned.regal.train.train_regal`)."""
    base = brkga or BRKGA()
    if params is not None:
        base = BRKGA(base.population, base.elite_fraction, base.mutant_fraction,
                     inheritance=params["inheritance"], mutant_alpha=params["alpha"],
                     mutant_beta=params["beta"])
    _, stats = base.evolve(RegalSpace(problem, task), Budget(evals, objective=objective), seed)
    return stats["value"] if stats["value"] is not None else float("inf")


@register("regal")
@dataclass(eq=False)
class REGAL:
    """REGAL: BRKGA whose mutant distributions and crossover bias a trained GNN sets per node.

    One forward pass of the policy (its means, no sampling), then BRKGA on REGAL's
    chromosome (:class:`RegalSpace`) with those per-gene Beta distributions and
    inheritance probabilities: BRKGA's own cost plus one forward pass. Decides placement
    and scheduling (a subset of them); the objective is the budget's (REGAL's is memory).

    Examples
    --------
    >>> from graphopt.hardware import load_cluster
    >>> prob = Problem(layered_graph(6, 4), load_cluster("p100:2"))
    >>> plan, stats = REGAL(checkpoint="untrained").optimize(
    ...     prob, frozenset({"placement", "scheduling"}), Budget(300, objective="memory"), 0)
    >>> stats["value"] <= stats["initial_value"]
    True
    """

    objectives: ClassVar[tuple[str, ...]] = ("runtime", "memory")

    checkpoint: str | None = field(default=None, metadata={
        "help": "Folder of a policy from 'graphopt train regal' (None: the shipped one; "
                "'untrained': uniform BRKGA on REGAL's chromosome)."})
    elite_bias: bool = field(default=False, metadata={
        "help": "Let the policy's per-node elite bias move BRKGA's inheritance (0.7); "
                "REGAL's ablation found it harmful."})
    prior: str = field(default="policy", metadata={"choices": ("policy", "layer-split", "uniform"),
        "help": "Distributions the policy's multiply: 'layer-split' (the model cut in D runs of "
                "its layers, layer_split_prior), 'uniform' (REGAL's own), 'policy' the one the "
                "policy was trained with ('uniform' for an untrained one)."})
    population: int = field(default=100, metadata={"min": 2, "limit": 10_000,
                                                   "help": "Chromosomes per generation."})
    elite_fraction: float = field(default=0.2, metadata={"gt": 0, "max": 1,
        "help": "Share of the population kept unchanged as the elite."})
    mutant_fraction: float = field(default=0.1, metadata={"min": 0, "max": 1,
        "help": "Share of the population replaced by policy-drawn mutants each generation."})

    def optimize(self, problem: Problem, task: frozenset[str], budget: Budget, seed: int,
                 init: Plan | None = None) -> tuple[Plan, dict]:
        head, info = _shipped() if self.checkpoint is None else load_regal_policy(self.checkpoint)
        if problem.num_devices > head.max_devices:
            raise UsageError(f"regal: the policy has {head.max_devices} device slots; cluster "
                             f"{problem.cluster.name} has {problem.num_devices} devices")
        space = RegalSpace(problem, task, init)
        # one thread: the pass over a few thousand nodes takes a millisecond, and with the
        # simulator's threads beside it more threads wait on each other for a tenth of a
        # second, a tenth of BRKGA's own time on a small graph
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                out = head(*regal_inputs(problem))
        finally:
            torch.set_num_threads(threads)
        prior = trained_prior(info) if self.prior == "policy" else self.prior
        p = _params(head, out, space, self.elite_bias, _prior(space, prior))
        brkga = BRKGA(self.population, self.elite_fraction, self.mutant_fraction,
                      inheritance=p["inheritance"], mutant_alpha=p["alpha"], mutant_beta=p["beta"])
        plan, stats = brkga.evolve(space, budget, seed)
        first = next((h[2] for h in stats["history"] if h[2] is not None), None)
        return plan, {**stats, "initial_value": first, "elite_bias": self.elite_bias, "prior": prior,
                      "policy": "untrained" if info.get("untrained") else
                      str(self.checkpoint or "shipped")}


def pretrain_regal(corpus: list[Problem], out: str | Path, config: RegalConfig,
                   objective: str = "memory", max_seconds: float | None = None,
                   on_update=None, command: str = "") -> dict:
    """Train a REGAL policy on ``corpus`` (checkpoint in ``out``, resumed when there) and
    write the policy (``policy.safetensors`` + ``policy.json``) into ``out``: what
    ``graphopt train regal`` runs and what :data:`SHIPPED` holds.

    Each action is priced by BRKGA on REGAL's chromosome (placement and scheduling) at
    ``config.evals`` evaluations of ``objective`` (:func:`regal_value`), uniform BRKGA at
    the same budget and seed the reference. Returns the run state (``update``, ``log``,
    ``seconds``).
    """
    task = frozenset({"placement", "scheduling"})
    # per corpus graph, built once: its space and prior (every sampled action reuses them)
    spaces: dict[int, tuple[RegalSpace, dict | None]] = {}

    def to_params(head: REGALHead, out_: torch.Tensor, problem: Problem) -> dict:
        if id(problem) not in spaces:
            space = RegalSpace(problem, task)
            spaces[id(problem)] = space, _prior(space, config.prior)
        space, base = spaces[id(problem)]
        return _params(head, out_, space, config.elite_bias, base)

    def search(problem: Problem, params: dict | None, seed: int) -> float:
        return regal_value(problem, params, seed, config.evals, objective, task)

    head, state = train_regal(corpus, config, search, to_params, out, on_update,
                              info={"objective": objective}, max_seconds=max_seconds)
    rows = state["log"]
    save_policy(out, head, {"in_dim": head.in_dim, "dim": head.dim, "layers": head.layers,
                            "max_devices": head.max_devices},
                {"command": command, "objective": objective, "corpus": [p.graph.name for p in corpus],
                 "updates": state["update"], "seconds": round(state["seconds"], 1),
                 "config": asdict(config),
                 "reward_mean_last_50": float(np.mean([r["charts/reward_mean"] for r in rows[-50:]]))
                 if rows else None})
    return state
