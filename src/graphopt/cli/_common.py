"""What the commands share besides errors, locks and options: the console, the graph
argument's help, a loaded plan checked against its problem (:func:`check_plan`), and the
evaluation backend (:func:`evaluation_backend`).

Imports nothing heavy: ``graphopt --help`` builds every command from this module and
the command modules (:mod:`~graphopt.cli.errors`, :mod:`~graphopt.cli.locks`,
:mod:`~graphopt.cli.params`, :mod:`~graphopt.cli.signals`, :mod:`~graphopt.cli.warmup`),
so torch, numba and the cost models load only inside a command that uses them.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from graphopt.errors import GraphoptError, MissingDependencyError, UsageError

__all__ = ["GRAPH_HELP", "check_plan", "evaluation_backend", "console"]

# Tables are wide; when output goes to a file or a pipe, do not squeeze them to 80 columns.
console = Console(width=None if Console().is_terminal else 140)


GRAPH_HELP = ("Graph file (.npz or .json saved by graphopt), a zoo model 'zoo:NAME' (see "
              "'graphopt zoo list'), a Hugging Face model 'hf:MODEL_TYPE[:key=value,...]' "
              "(random weights, e.g. hf:bert:num_hidden_layers=2,seq=128), or a built-in "
              "example: 'example:mlp' (a 4-layer MLP training step) or 'example:layered-N' "
              "(a random layered graph of about N ops), "
              "or a model file to import: .pt2 (torch.export.save), .onnx, a TpuGraphs .npz or "
              "tuning .pb. Example: zoo:gnmt-4")


def check_plan(plan, problem, path: Path | None, *, same_graph: bool = False) -> None:
    """Check a plan loaded from ``path`` against ``problem`` (its length, its device
    indices; with ``same_graph``, that it was made for this graph:
    :func:`graphopt.sim.plan.check_made_for`), so that the error names the plan
    file; no path (no --plan) passes."""
    if path is None:
        return
    try:
        if same_graph:
            from graphopt.sim.plan import check_made_for

            check_made_for(plan, problem.graph)
        plan.check(problem.num_nodes, problem.num_devices)
    except GraphoptError as err:
        raise type(err)(f"{path}: {err}") from None


def evaluation_backend(backend: str, address: str | None, *, pool: bool = True):
    """The block a command runs its methods in: nothing for ``local``; for ``ray``, Ray
    started or joined at ``address`` and, with ``pool``, every method's evaluator on a
    pool of Ray actors (:func:`graphopt.evaluate.ray.ray_backend`). Ray is imported only here.

    Raises
    ------
    GraphoptError
        An unknown backend, ``--address`` without ``ray``, or Ray not installed.
    """
    import contextlib

    if backend not in ("local", "ray"):
        raise UsageError(f"--backend {backend!r}: expected local or ray")
    if backend == "local":
        if address:
            raise UsageError(f"--address {address}: only with --backend ray")
        return contextlib.nullcontext()
    try:
        from graphopt.evaluate import ray as evaluate_ray
    except ModuleNotFoundError as err:
        raise MissingDependencyError(f"--backend ray needs {err.name}: pip install 'graphopt[ray]'"
                                     ) from None
    return evaluate_ray.ray_backend(address) if pool else evaluate_ray.ray_session(address)
