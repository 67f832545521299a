"""The options of a rewrite (imports nothing heavy: the command line builds its options
from these fields)."""

from __future__ import annotations

from dataclasses import dataclass, field

from graphopt.errors import MAX_SEED

__all__ = ["RewriteConfig"]


@dataclass
class RewriteConfig:
    """Limits, extractor and cost model of a rewrite. Defaults are Tensat's."""

    iterations: int = field(default=15, metadata={"min": 1,
        "help": "Saturation iterations at most (Tensat: 15). Example: --iterations 5"})
    node_limit: int = field(default=50_000, metadata={"min": 1,
        "help": "E-nodes at most (Tensat: 50000): an iteration that would pass it is undone "
                "and saturation stops. Example: --node-limit 20000"})
    time_limit: float = field(default=3600.0, metadata={"gt": 0,
        "help": "Stop saturating after this many seconds (Tensat: 3600). Example: 5"})
    multi_iterations: int = field(default=1, metadata={"min": 0,
        "help": "Iterations in which the multi-pattern rules (merge two linears or "
                "convolutions of one input) run; Tensat's k_multi (1): more grows the "
                "e-graph fast."})
    extractor: str = field(default="ilp", metadata={"choices": ("ilp", "greedy"),
        "help": "ilp: Tensat's ILP with cycle constraints (OR-Tools CP-SAT); greedy: each "
                "e-class's cheapest tree. Example: --extractor greedy"})
    search_time_limit: float = field(default=10.0, metadata={"gt": 0,
        "help": "Seconds for the whole search, saturation included: the ILP gets what "
                "saturation left of them (at least 1 s) and the best program found by "
                "then is used. Tensat gives its ILP 10 s on top of saturation; counting "
                "saturation in keeps every search within the limit. Example: 30"})
    cluster: str = field(default="cpu:1", metadata={
        "help": "Cluster preset whose first device prices ops by roofline. Example: h100:1"})
    cost: str = field(default="roofline", metadata={"choices": ("roofline", "measured"),
        "help": "roofline: the cluster's roofline; measured: time each distinct op on this "
                "CPU as the rewritten program runs it (a fused activation as its fused "
                "kernel; ops the rules do not know by graphopt's measured profile), as "
                "Tensat prices e-nodes."})
    check: bool = field(default=True, metadata={
        "help": "Run both programs on the example inputs and refuse a result whose outputs "
                "differ beyond rtol/atol."})
    rtol: float = field(default=1e-3, metadata={"gt": 0,
        "help": "Relative tolerance of the output check (at least two units in the last "
                "place of the output's dtype: 1.6% in bfloat16)."})
    atol: float = field(default=1e-4, metadata={"gt": 0,
        "help": "Absolute tolerance of the output check, relative to the largest output."})
    seed: int = field(default=0, metadata={"min": 0, "max": MAX_SEED,
                                           "help": "Seed of the ILP solver."})
