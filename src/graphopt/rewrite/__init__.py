"""Tensat-style graph rewriting: TASO's rules applied by equality saturation (egglog),
the cheapest equivalent program extracted greedily or by ILP (OR-Tools), and rebuilt as
a runnable :class:`torch.fx.GraphModule`.

The names load their modules on first use (torch and egglog are heavy).
"""

from graphopt._lazy import lazy_exports
from graphopt.rewrite.config import RewriteConfig

__all__ = ["RewriteConfig", "RewriteError", "RewriteResult", "rewrite", "sequential_rewrite"]

__getattr__ = lazy_exports(__name__, {
    "graphopt.rewrite.api": ("RewriteResult", "rewrite", "sequential_rewrite"),
    "graphopt.rewrite.terms": ("RewriteError",),
})
