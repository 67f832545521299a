"""Per-op costs: FLOP and byte formulas, the roofline model and measured profiles."""

from graphopt.cost.formulas import dtype_bytes, op_cost
from graphopt.cost.profile import Profile, profile_graph
from graphopt.cost.roofline import EFFICIENCY, OpCosts, op_costs

__all__ = ["op_cost", "dtype_bytes", "op_costs", "OpCosts", "EFFICIENCY", "Profile",
           "profile_graph"]
