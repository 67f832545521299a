"""Per-op costs: the roofline model and measured profiles.

FLOP and byte counts describe the IR and live in :mod:`graphopt.ir.formulas`.
"""

from graphopt.cost.profile import Profile, profile_graph
from graphopt.cost.roofline import EFFICIENCY, OpCosts, op_costs

__all__ = [
           "EFFICIENCY",
           "OpCosts",
           "Profile",
           "op_costs",
           "profile_graph",
]
