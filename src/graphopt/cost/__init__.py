"""Per-op costs: FLOP and byte formulas, the roofline model and measured profiles."""

from graphopt.cost.formulas import dtype_bytes, op_cost
from graphopt.cost.profile import Profile, profile_graph
from graphopt.cost.roofline import EFFICIENCY, OpCosts, op_costs

__all__ = [
           "EFFICIENCY",
           "OpCosts",
           "Profile",
           "dtype_bytes",
           "op_cost",
           "op_costs",
           "profile_graph",
]
