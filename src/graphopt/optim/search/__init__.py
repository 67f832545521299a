"""Search baselines: random search, local search, simulated annealing (FlexFlow-style
MCMC), BRKGA, an exact CP-SAT model for small graphs, and the bar a user sets without
learning: ``best`` (the fastest plan of every heuristic, the start ``--init best`` gives)
and ``portfolio`` (every heuristic, then annealing from the best, in one budget).

Every method searches the parts of a plan named in its task, keeps colocation groups
whole (it places colocation *units*, not ops), prices plans only through a
:class:`~graphopt.evaluate.local.LocalEvaluator`, starts from ``init`` when given, and
returns the best plan it evaluated, never worse than the initial plan.
"""

from graphopt.optim.search.annealing import SimulatedAnnealing
from graphopt.optim.search.brkga import BRKGA
from graphopt.optim.search.cpsat import CPSAT
from graphopt.optim.search.local_search import LocalSearch
from graphopt.optim.search.portfolio import BestHeuristic, Portfolio
from graphopt.optim.search.random_search import RandomSearch

__all__ = ["BRKGA", "BestHeuristic", "CPSAT", "LocalSearch", "Portfolio", "RandomSearch",
           "SimulatedAnnealing"]
