"""Partitioning a graph into stages: multi-chip-module partitioning (Xie et al., MLSys
2022: the constraints and their checker, CP-SAT repair of proposals into valid
partitions, and the baselines) and the pipeline task's splits (``even``, ``params``,
``exact``).

See docs/mcm.md and docs/execution.md. The learned policy is
:mod:`graphopt.optim.learned.mcm.method`.
"""

from graphopt.optim.partition.constraints import check_partition, memory_need, valid_partitions
from graphopt.optim.partition.repair import RepairModel, RepairResult, solve_throughput

__all__ = ["RepairModel", "RepairResult", "check_partition", "memory_need", "solve_throughput",
           "valid_partitions"]
from graphopt.optim.partition.methods import MCMCPSAT, MCMSA, MCMGreedy, MCMRandom  # noqa: E402

from graphopt.optim.partition.pipeline import EvenSplit, ExactSplit, ParamsSplit  # noqa: E402

__all__ += ["MCMCPSAT", "EvenSplit", "ExactSplit", "MCMGreedy", "MCMRandom", "MCMSA", "ParamsSplit"]
