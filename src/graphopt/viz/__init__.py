"""Pictures of plans and training: Gantt charts of simulated timelines."""

from graphopt.viz.gantt import gantt

__all__ = ["gantt"]
