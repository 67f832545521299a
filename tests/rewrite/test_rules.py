"""Every rule, alone, on a small program where it applies: every program the e-graph
then holds (random extractions) computes what the original does on random inputs."""

import random

import pytest
import torch
from egglog import ruleset
from torch import nn

from graphopt.rewrite import RewriteConfig
from graphopt.rewrite import rules as R
from graphopt.rewrite.api import export_module, saturate
from graphopt.rewrite.codegen import build_module
from graphopt.rewrite.extract import _FREE as FREE
from graphopt.rewrite.extract import extract_greedy, extract_ilp, read_egraph
from graphopt.rewrite.terms import to_terms


class F(nn.Module):
    """A module from a function of its input and its layers."""

    def __init__(self, fn, **layers):
        super().__init__()
        self.fn = fn
        for k, v in layers.items():
            self.add_module(k, v)

    def forward(self, x):
        return self.fn(self, x)


def _bn(c):
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_()
    return bn


V = (2, 3, 4)  # a vector input
IMG = (1, 4, 6, 6)
CASES = {
    "permute-compose": (lambda m, x: x.permute(0, 2, 1).permute(2, 1, 0).sum(0), {}, V),
    "permute-identity": (lambda m, x: x.permute(0, 2, 1).permute(0, 2, 1) + 1, {}, V),
    "reshape-compose": (lambda m, x: x.reshape(6, 4).reshape(4, 6).exp(), {}, V),
    "reshape-identity": (lambda m, x: x.reshape(6, 4).reshape(2, 3, 4).exp(), {}, V),
    "bn-fold": (lambda m, x: m.bn(m.c(x)), {"c": nn.Conv2d(4, 5, 3), "bn": _bn(5)}, IMG),
    "scale-compose": (lambda m, x: x * 2.0 * 0.25, {}, V),
    "scale-one": (lambda m, x: (x * 1.0).exp(), {}, V),
    "scale-linear": (lambda m, x: m.l(x) * 0.5, {"l": nn.Linear(4, 3)}, V),
    "scale-conv": (lambda m, x: m.c(x) * 3.0, {"c": nn.Conv2d(4, 2, 1)}, IMG),
    "scale-matmul": (lambda m, x: (x @ x.transpose(1, 2)) * 0.5, {}, V),
    "scale-matmul-right": (lambda m, x: (x @ x.transpose(1, 2)) * 0.5, {}, V),
    "scale-matmul-out": (lambda m, x: (x * 0.5) @ x.transpose(1, 2), {}, V),
    "scale-permute": (lambda m, x: x.permute(0, 2, 1) * 2.0, {}, V),
    "scale-permute-out": (lambda m, x: (x * 2.0).permute(0, 2, 1), {}, V),
    "scale-reshape": (lambda m, x: x.reshape(6, 4) * 2.0, {}, V),
    "scale-slice": (lambda m, x: x.split([1, 3], -1)[1] * 2.0, {}, V),
    "add-commute": (lambda m, x: x + x.exp(), {}, V),
    "mul-commute": (lambda m, x: x * x.exp(), {}, V),
    "add-associate": (lambda m, x: x + x.exp() + x.tanh(), {}, V),
    "distribute": (lambda m, x: x * x.exp() + x.tanh() * x.exp(), {}, V),
    "distribute-out": (lambda m, x: (x + x.tanh()) * x.exp(), {}, V),
    "add-scales": (lambda m, x: x * 2.0 + x * 3.0, {}, V),
    "add-scales-self": (lambda m, x: x + x * 3.0, {}, V),
    "add-scales-twice": (lambda m, x: x.exp() + x.exp(), {}, V),
    "split-cat": (lambda m, x: torch.cat([x.exp(), x.tanh()], 1).split([3, 3], 1)[0], {}, V),
    "split-cat-right": (lambda m, x: torch.cat([x.exp(), x.tanh()], 1).split([3, 3], 1)[1],
                        {}, V),
    "cat-slices": (lambda m, x: torch.cat(x.split([1, 3], -1), -1).exp(), {}, V),
    "slice-whole": (lambda m, x: m.l(x).split(3, -1)[0].exp(), {"l": nn.Linear(4, 3)}, V),
    "slice-whole-conv": (lambda m, x: m.c(x).split(2, 1)[0].exp(), {"c": nn.Conv2d(4, 2, 1)},
                         IMG),
    "cat-unary": (lambda m, x: torch.cat([x.relu(), (x * 2.0).relu()], 1), {}, V),
    "cat-unary-out": (lambda m, x: torch.cat([x, x.exp()], 1).tanh(), {}, V),
    "merge-linear": (lambda m, x: torch.cat([m.a(x), m.b(x).tanh()], -1),
                     {"a": nn.Linear(4, 3), "b": nn.Linear(4, 5)}, V),
    "merge-conv": (lambda m, x: m.a(x) + m.b(x), {"a": nn.Conv2d(4, 3, 3, padding=1),
                                                  "b": nn.Conv2d(4, 3, 3, padding=1)}, IMG),
    "enlarge-conv": (lambda m, x: m.a(x) + m.b(x), {"a": nn.Conv2d(4, 3, 1),
                                                    "b": nn.Conv2d(4, 3, 3, padding=1)}, IMG),
    # bookkeeping: weights concatenated in any grouping are one; derived weights keep
    # their place in the merge order
    "weight-cat-associate": (lambda m, x: m.a(x) + m.b(x) + m.c(x),
                             {"a": nn.Linear(4, 3), "b": nn.Linear(4, 3), "c": nn.Linear(4, 3)},
                             V),
    "order-scale": (lambda m, x: m.a(x) * 0.5 + m.b(x), {"a": nn.Linear(4, 3),
                                                          "b": nn.Linear(4, 3)}, V),
    "order-bn": (lambda m, x: m.bn(m.a(x)) + m.b(x), {"a": nn.Conv2d(4, 5, 1), "bn": _bn(5),
                                                      "b": nn.Conv2d(4, 5, 1)}, IMG),
    # the activations of two merged convolutions become the merged one's, then fuse
    "unary-slice": (lambda m, x: torch.cat([m.a(x).relu(), m.b(x).relu()], 1).exp(),
                    {"a": nn.Conv2d(4, 3, 3, padding=1), "b": nn.Conv2d(4, 2, 3, padding=1)},
                    IMG),
}
ACTIVATIONS = {"relu": torch.relu, "gelu": nn.functional.gelu, "tanh": torch.tanh,
               "sigmoid": torch.sigmoid, "silu": nn.functional.silu}
for _f, _act in ACTIVATIONS.items():
    CASES[f"conv-{_f}-fuse"] = (lambda m, x, act=_act: act(m.c(x)),
                                {"c": nn.Conv2d(4, 5, 3, padding=1)}, IMG)
    CASES[f"linear-{_f}-fuse"] = (lambda m, x, act=_act: act(m.l(x)), {"l": nn.Linear(4, 3)}, V)


HELPERS = {"weight-cat-associate": ("merge-linear",), "permute-identity": ("permute-compose",),
           "unary-slice": ("merge-conv", "conv-relu-fuse"),
           "reshape-identity": ("reshape-compose",), "order-bn": ("bn-fold", "merge-conv"),
           "order-scale": ("scale-linear", "merge-linear")}


def test_every_rule_has_a_case():
    assert set(CASES) == set(R.BY_NAME)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_keeps_outputs(name):
    torch.manual_seed(0)
    fn, layers, shape = CASES[name]
    module = F(fn, **layers).eval()
    x = torch.randn(*shape)
    original = export_module(module, (x,))
    tr = to_terms(original)
    # a rule that needs another's result first runs with it; it must fire either way
    rules = [R.BY_NAME[n] for n in (name, *HELPERS.get(name, ()))]
    eg, stats = saturate(tr, RewriteConfig(iterations=4), rules=ruleset(*rules, name=f"t-{name}"))
    assert stats["rule_matches"].get(name, 0) > 0, stats["rule_matches"]
    ec = read_egraph(eg, tr)
    ec0 = read_egraph(tr.egraph(), tr)
    before = build_module(extract_greedy(ec0, dict.fromkeys((n for ns in ec0.nodes.values()
                                                             for n in ns), 1.0)),
                          ec0.root, tr, original).code
    rng = random.Random(0)
    want = module(x)
    codes = set()
    for trial in range(8):
        # random prices (views and weights free, as in the cost model), extracted both
        # ways: each program found is one the e-graph holds
        cost = {n: 0.0 if n.op in FREE or n.op.startswith("W") else rng.random()
                for ns in ec.nodes.values() for n in ns}
        choice = extract_greedy(ec, cost)
        if trial % 2:
            choice, _ = extract_ilp(ec, cost, time_limit=5.0, hint=choice)
        gm = build_module(choice, ec.root, tr, original)
        codes.add(gm.code)
        torch.testing.assert_close(gm(x), want, rtol=1e-4, atol=1e-5)
    assert codes - {before}  # a new program was built, and it computes the same
