"""``rewrite(module, example_inputs)``: Tensat's equality saturation on a PyTorch program,
and the sequential greedy rewriter (TASO-style) it is compared with.

Steps: ``torch.export`` the module in inference, translate its forward graph into
terms (:mod:`graphopt.rewrite.terms`), add them to an egglog e-graph, run the rules
(:mod:`graphopt.rewrite.rules`) until saturation or a limit, price every e-node with
graphopt's cost model, extract the cheapest program (greedy or ILP,
:mod:`graphopt.rewrite.extract`), rebuild it as a :class:`torch.fx.GraphModule`
(:mod:`graphopt.rewrite.codegen`), and check that it computes what the original did
on the example inputs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from egglog import EGraph, ruleset
from torch import fx

from graphopt.errors import check_fields
from graphopt.rewrite.config import RewriteConfig
from graphopt.hardware import load_cluster
from graphopt.rewrite import rules as R
from graphopt.rewrite.codegen import ARGS, ENode, build_module, post_order
from graphopt.rewrite.extract import (Costs, EClasses, dag_cost, extract_greedy, extract_ilp,
                                      read_egraph)
from graphopt.rewrite.terms import L, RewriteError, T, Translation, W, _Lets, to_terms

__all__ = ["RewriteConfig", "RewriteResult", "export_module", "load_model", "rewrite",
           "sequential_rewrite"]


@dataclass
class RewriteResult:
    """A rewritten program and what the search did.

    Attributes
    ----------
    module : torch.fx.GraphModule
        Runnable: same inputs and outputs as the original module.
    original : torch.fx.GraphModule
        The original forward graph (``torch.export``-ed).
    stats : dict
        ``iterations``, ``stop`` (saturated, iterations, nodes or time), ``enodes`` and
        ``eclasses`` at the end, ``rule_matches``, ``saturate_s``, ``extract_s``,
        ``search_s`` (both), ``cost_before`` and ``cost_after`` (predicted seconds),
        ``ops_before`` and ``ops_after`` (call nodes), ``max_error``, the ILP's
        ``ilp`` stats, and the ``config``.
    """

    module: fx.GraphModule
    original: fx.GraphModule
    stats: dict[str, Any]


def export_module(module: torch.nn.Module, example_inputs: tuple) -> fx.GraphModule:
    """The inference forward graph of ``module`` (``torch.export``, eval mode).

    Raises
    ------
    RewriteError
        ``torch.export`` cannot trace the module.
    """
    for i, x in enumerate(torch.utils._pytree.tree_leaves(tuple(example_inputs))):
        if isinstance(x, torch.Tensor) and 0 in x.shape:
            raise RewriteError(f"example input {i} has shape {tuple(x.shape)}: a rewrite prices "
                               "ops at the inputs' sizes, so give inputs of the size the "
                               "program runs at, none of them empty")
    if isinstance(module, fx.GraphModule) and any(
            isinstance(n.meta.get("val"), torch.Tensor) for n in module.graph.nodes
            if n.op == "placeholder"):
        return module
    module = module.eval()
    try:
        with torch.no_grad():
            return torch.export.export(module, tuple(example_inputs)).module()
    except Exception as err:  # torch.export raises many types; all mean "cannot trace"
        raise RewriteError(f"torch.export failed on {type(module).__name__}: "
                           f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
                           ) from err


def _count_nodes(eg: EGraph) -> int:
    total = 0
    for op in ARGS:
        owner, _, name = op.partition(".")
        fn = {"T": T, "W": W, "L": L}[owner]
        total += eg.function_size(getattr(fn, name) if name else fn)
    return total


def saturate(tr: Translation, cfg: RewriteConfig, rules: Any = None) -> tuple[EGraph, dict]:
    """An e-graph of ``tr`` with ``rules`` (default: Tensat's schedule of all rules) run
    until saturation or one of ``cfg``'s limits."""
    start = time.perf_counter()
    eg = tr.egraph()
    matches: dict[str, int] = {}
    stop, it = "iterations", 0
    for it in range(1, cfg.iterations + 1):
        rs = rules or (R.ALL if it <= cfg.multi_iterations else R.SINGLE)
        # One iteration of the associative rules on LSTM gate sums can take the e-graph
        # from 30k to 100k e-nodes, and extraction past Tensat's 10 s; so an iteration
        # that passes the node limit is undone and saturation stops at the last one within.
        eg.push()
        report = eg.run(1, ruleset=rs)
        if _count_nodes(eg) > cfg.node_limit:
            eg.pop()
            stop = "nodes"
            break
        for decl, count in report.num_matches_per_rule.items():
            name = getattr(decl, "name", None) or str(decl)
            matches[name] = matches.get(name, 0) + count
        if not report.updated and it > cfg.multi_iterations:
            stop = "saturated"
            break
        if time.perf_counter() - start >= cfg.time_limit:
            stop = "time"
            break
    return eg, {"iterations": it - (stop == "nodes"), "stop": stop, "saturate_s": time.perf_counter() - start,
                "rule_matches": dict(sorted(matches.items()))}


def _costs(cfg: RewriteConfig) -> Costs:
    return Costs(load_cluster(cfg.cluster), measure=cfg.cost == "measured")


#: Seconds the ILP gets however long saturation took: a search past its limit still
#: improves on the greedy program.
MIN_ILP_S = 1.0


def _extract(ec: EClasses, cost: dict[ENode, float], cfg: RewriteConfig, deadline: float
             ) -> tuple[dict[str, ENode], dict]:
    """The cheapest program of ``ec`` by ``cfg.extractor``; the ILP stops by ``deadline``
    (a ``time.perf_counter()`` value) or after :data:`MIN_ILP_S`, whichever is later."""
    greedy = extract_greedy(ec, cost)
    if cfg.extractor == "greedy":
        return greedy, {}
    seconds = max(deadline - time.perf_counter(), MIN_ILP_S)
    choice, ilp = extract_ilp(ec, cost, seconds, cfg.seed, hint=greedy)
    if dag_cost(choice, ec.root, cost) > dag_cost(greedy, ec.root, cost):
        choice = greedy  # the solver stopped before reaching its hint's cost
    return choice, {"ilp": ilp}


def _check(original: fx.GraphModule, new: fx.GraphModule, inputs: tuple,
           cfg: RewriteConfig) -> float:
    """Largest output difference, relative to the largest output; raises past tolerance."""
    with torch.no_grad():
        ref = torch.utils._pytree.tree_leaves(original(*inputs))
        out = torch.utils._pytree.tree_leaves(new(*inputs))
    if len(ref) != len(out):
        raise RewriteError(f"the rewritten program has {len(out)} outputs, not {len(ref)}")
    worst = 0.0
    for i, (a, b) in enumerate(zip(ref, out)):
        if not isinstance(a, torch.Tensor):
            continue
        if a.shape != b.shape:
            raise RewriteError(f"output {i}: shape {tuple(b.shape)}, expected {tuple(a.shape)}")
        if not a.is_floating_point():
            if not torch.equal(a, b):
                raise RewriteError(f"output {i} differs")
            continue
        scale = float(a.abs().max()) if a.numel() else 0.0
        err = float((a - b).abs().max()) if a.numel() else 0.0
        worst = max(worst, err / max(scale, 1e-12))
        # a rewrite may round differently (a fused kernel, a sum re-associated): allow two
        # units in the last place of the output's dtype (bfloat16: 1.6%) when rtol is tighter
        rtol = max(cfg.rtol, 2 * torch.finfo(a.dtype).eps)
        if not torch.allclose(b, a, rtol=rtol, atol=cfg.atol * max(scale, 1.0)):
            raise RewriteError(f"output {i} differs from the original's by {err:.3g} "
                               f"(largest value {scale:.3g}, rtol {rtol:.2g}); a rule is wrong "
                               "for this program")
    return worst


def _ops(gm: fx.GraphModule) -> int:
    return sum(n.op == "call_function" for n in gm.graph.nodes)


def rewrite(module: torch.nn.Module, example_inputs: tuple,
            config: RewriteConfig | None = None) -> RewriteResult:
    """Rewrite ``module``'s inference program by equality saturation (Tensat).

    Parameters
    ----------
    module : torch.nn.Module
        Put in eval mode and exported with ``torch.export`` (an already exported
        ``ExportedProgram.module()`` is taken as it is).
    example_inputs : tuple of Tensor
        Inputs to export with and to check the result on.
    config : RewriteConfig, optional
        Limits, extractor and cost model (Tensat's defaults).

    Returns
    -------
    RewriteResult

    Raises
    ------
    RewriteError
        The module cannot be exported, or (``config.check``) the rewritten program's
        outputs differ from the original's.
    GraphoptError
        A field of ``config`` is out of range.

    Examples
    --------
    >>> import torch
    >>> conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
    >>> res = rewrite(conv, (torch.randn(1, 3, 8, 8),))
    >>> [n.target.__name__ for n in res.module.graph.nodes if n.op == "call_function"]
    ['conv2d.default']
    """
    cfg = config or RewriteConfig()
    check_fields(cfg, lambda name: f"RewriteConfig.{name}")
    original = export_module(module, example_inputs)
    tr = to_terms(original)
    began = time.perf_counter()
    eg, stats = saturate(tr, cfg)
    start = time.perf_counter()
    ec = read_egraph(eg, tr)
    costs = _costs(cfg)
    cost = costs.of(ec)
    choice, extra = _extract(ec, cost, cfg, began + cfg.search_time_limit)
    stats.update(extra)
    stats["extract_s"] = time.perf_counter() - start
    stats["search_s"] = stats["saturate_s"] + stats["extract_s"]
    stats["enodes"], stats["eclasses"] = ec.num_nodes, len(ec.nodes)
    stats["cost_before"] = _program_cost(tr, costs, cfg)
    stats["cost_after"] = dag_cost(choice, ec.root, cost)
    new = build_module(choice, ec.root, tr, original, ec.position)
    stats["ops_before"], stats["ops_after"] = _ops(original), _ops(new)
    if cfg.check:
        stats["max_error"] = _check(original, new, tuple(example_inputs), cfg)
    stats["config"] = asdict(cfg)
    return RewriteResult(new, original, stats)


def _program_cost(tr: Translation, costs: Costs, cfg: RewriteConfig) -> float:
    """Predicted seconds of the untouched program."""
    eg = tr.egraph()
    ec = read_egraph(eg, tr)
    cost = costs.of(ec)
    return dag_cost(extract_greedy(ec, cost), ec.root, cost)


def _terms_of(choice: dict[str, ENode], root: str, prefix: str) -> tuple[T, list]:
    """The egglog term of the program ``choice`` names (to start a new e-graph from), and
    the let bindings it refers to."""
    lets: list = []
    bind = _Lets(prefix, lets)
    made: dict[str, Any] = {}
    for c in post_order(choice, root):
        node = choice[c]
        owner, _, name = node.op.partition(".")
        fn = {"T": T, "W": W, "L": L}[owner]
        fn = getattr(fn, name) if name else fn
        args = [made[a] if k in "TWL" else a for a, k in zip(node.args, ARGS[node.op])]
        made[c] = bind(fn(*args)) if c != root else fn(*args)
    return made[root], lets


def sequential_rewrite(module: torch.nn.Module, example_inputs: tuple,
                       config: RewriteConfig | None = None) -> RewriteResult:
    """The sequential greedy rewriter Tensat compares with (TASO-style), on the same
    rules and cost model as :func:`rewrite`.

    Rounds over the rules in :data:`graphopt.rewrite.rules.BY_NAME` order: each rule is
    applied alone, for one step, to the current program (at every match at once); the
    cheapest program of that small e-graph (greedy extraction) replaces the current one
    if it is predicted faster (each step extracted as :func:`rewrite` extracts, the ILP
    limited to 2 s). Stops when a whole round improves nothing, or at
    ``config.time_limit``. Unlike TASO it keeps no queue of worse programs to backtrack
    to: a rewrite that pays only after another one is missed, which is what saturation
    does not miss.

    Returns
    -------
    RewriteResult
        As :func:`rewrite`; ``stats["steps"]`` counts accepted rewrites.
    """
    cfg = config or RewriteConfig()
    check_fields(cfg, lambda name: f"RewriteConfig.{name}")
    original = export_module(module, example_inputs)
    tr = to_terms(original)
    costs = _costs(cfg)
    start = time.perf_counter()
    singles = {name: ruleset(r, name=f"seq-{name}") for name, r in R.BY_NAME.items()}
    # each step's program is priced as a DAG (a merged op shared by its splits counts
    # once), as TASO does; the greedy tree cost would never accept a merge
    step_ilp_s = min(cfg.search_time_limit, 2.0)
    current = tr
    ec = read_egraph(tr.egraph(), tr)
    cost = costs.of(ec)
    choice = extract_greedy(ec, cost)
    best = before = dag_cost(choice, ec.root, cost)
    steps, improved = 0, True
    eg = current.egraph()
    while improved and time.perf_counter() - start < cfg.time_limit:
        improved = False
        for rs in singles.values():
            eg.push()  # try the rule, then forget it unless it pays
            if not eg.run(1, ruleset=rs).updated:
                eg.pop()
                continue
            cand_ec = read_egraph(eg, current)
            eg.pop()
            cand_cost = costs.of(cand_ec)
            cand, _ = _extract(cand_ec, cand_cost, cfg, time.perf_counter() + step_ilp_s)
            value = dag_cost(cand, cand_ec.root, cand_cost)
            if value < best * (1 - 1e-9):
                best, ec, cost, choice = value, cand_ec, cand_cost, cand
                root, lets = _terms_of(cand, cand_ec.root, f"$s{steps}_")
                # the original's terms stay: its facts (shapes) refer to them
                current = replace(tr, root=root, lets=tr.lets + lets)
                eg = current.egraph()
                steps += 1
                improved = True
    search = time.perf_counter() - start
    new = build_module(choice, ec.root, tr, original, ec.position)
    stats = {"steps": steps, "search_s": search, "cost_before": before, "cost_after": best,
             "ops_before": _ops(original), "ops_after": _ops(new), "config": asdict(cfg)}
    if cfg.check:
        stats["max_error"] = _check(original, new, tuple(example_inputs), cfg)
    return RewriteResult(new, original, stats)


def load_model(source: str, size: str = "bench") -> tuple[torch.nn.Module, tuple]:
    """A program to rewrite and its example inputs: a ``.pt2`` file or a model of
    :data:`graphopt.rewrite.models.MODELS`.

    A ``.pt2`` archive is read as the torch frontend reads it
    (:func:`graphopt.frontends.torch.load_archive`: no pickles, no compiled code, inputs
    of bounded size); its example inputs are the ones saved with it, or seeded random
    tensors of its inputs' shapes.

    Raises
    ------
    GraphoptError
        Unknown model name, or an unreadable or unsafe archive.
    """
    from graphopt.frontends.torch import load_archive
    from graphopt.rewrite.models import make_model

    if not source.endswith(".pt2"):
        return make_model(source, size)
    ep = load_archive(source)
    if ep.example_inputs is not None:
        return ep.module(), tuple(ep.example_inputs[0])
    gen = torch.Generator().manual_seed(0)
    shapes = [n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"
              and n.name in ep.graph_signature.user_inputs]
    return ep.module(), tuple(torch.randn(v.shape, generator=gen).to(v.dtype) for v in shapes)
