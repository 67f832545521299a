"""A model that runs for real: a PyTorch module, one batch, its loss, and its blocks.

Every source that names PyTorch code (``zoo:``, ``hf:``, ``pipe:``, ``py:``) gives a
:class:`Model` (:meth:`graphopt.frontends.source.Source.model`). The commands derive the
rest from it: the traced training step (:meth:`~graphopt.frontends.source.Source.program`),
and for the pipeline task the **blocks**, the units a pipeline splits at.

The blocks are found in the module tree itself (:func:`find_blocks`): the outermost
``ModuleList`` or ``Sequential`` whose children are two or more modules of one class, as
the decoder and encoder stacks of ``transformers`` are (``model.layers``,
``transformer.h``, ``encoder.layer``; an encoder-decoder has two such stacks, and both
count, encoder first). A pipeline splits at the beginning of a block; what runs before
the first block (embeddings) goes with the first stage and what runs after the last
(final norm, head, loss) with the last. A model that is itself an ``nn.Sequential`` is
split between any two of its children.

>>> import torch
>>> class Net(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.embed = torch.nn.Linear(4, 8)
...         self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
...         self.head = torch.nn.Linear(8, 2)
...     def forward(self, x):
...         x = self.embed(x)
...         for layer in self.layers:
...             x = layer(x)
...         return self.head(x)
>>> find_blocks(Net())
['layers.0', 'layers.1', 'layers.2']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from graphopt.errors import UsageError

__all__ = ["Model", "find_blocks", "square_loss", "summed_outputs"]


def square_loss(output: Any, target: Tensor | None = None) -> Tensor:
    """The loss of a model without its own: the sum of the means of the squares of its
    output's floating-point tensors (``target`` is ignored).

    Not the traced training step's default (the sum of the means): a normed hidden
    state's mean is about zero, and a split model's loss checked against the unsplit
    one's would then agree whatever the split computed.

    >>> import torch
    >>> float(square_loss((torch.ones(2, 3), torch.arange(3), torch.full((4,), 2.0))))
    5.0
    """
    return summed_outputs(output, lambda t: t.square().mean())


def summed_outputs(output: Any, each: Callable[[Tensor], Tensor]) -> Tensor:
    """``each(t)`` summed over the floating-point tensors of a model's ``output``, in
    order: the loss of a model given none (the PyTorch frontend's: their means).

    Raises
    ------
    ValueError
        The output holds no floating-point tensor.
    """
    leaves = [t for t in torch.utils._pytree.tree_leaves(output)
              if isinstance(t, Tensor) and t.is_floating_point()]
    if not leaves:
        raise ValueError("the model's output holds no floating-point tensor to take a loss "
                         "from; pass loss=")
    total = each(leaves[0])
    for t in leaves[1:]:
        total = total + each(t)
    return total


def _stacks(module: nn.Module, prefix: str = "") -> list[str]:
    """Qualified names of the outermost containers of >= 2 same-class children."""
    found = []
    for name, child in module.named_children():
        qual = f"{prefix}{name}"
        kids = list(child.children())
        if (isinstance(child, nn.ModuleList | nn.Sequential) and len(kids) >= 2
                and len({type(k) for k in kids}) == 1):
            found.append(qual)
        else:
            found += _stacks(child, qual + ".")
    return found


def find_blocks(module: nn.Module) -> list[str]:
    """The qualified names of ``module``'s blocks, in the order the stacks hold them (see
    the module docstring). Empty when it has none.

    The stacks are listed in the order of the module tree; :func:`graphopt.sim.pipeline.op_layers`
    checks on the traced step that they also run in that order.
    """
    root = module
    prefix = ""
    # a wrapper of one child (graphopt's hf: training step wraps the transformers model)
    while isinstance(root, nn.Module) and not isinstance(root, nn.Sequential):
        kids = list(root.named_children())
        if len(kids) != 1:
            break
        prefix += kids[0][0] + "."
        root = kids[0][1]
    if isinstance(root, nn.Sequential) and len(root) >= 2:
        return [f"{prefix}{name}" for name, _ in root.named_children()]
    blocks = []
    for stack in _stacks(root, prefix):
        blocks += [f"{stack}.{name}" for name, _ in module.get_submodule(stack).named_children()]
    return blocks


@dataclass
class Model:
    """A PyTorch model with one batch, as a source names it.

    Attributes
    ----------
    name : str
        The source, e.g. ``"hf:llama:num_hidden_layers=2"``.
    module : nn.Module
        The model; ``module(*inputs)`` is its forward.
    inputs : tuple of Tensor
        One batch: every input's first dimension is the batch's (microbatches cut it).
    target : Tensor or None
        What the loss compares the output with (cut into microbatches as the inputs
        are), or None for a loss of the output alone.
    loss : callable or None
        ``loss(output, target) -> scalar``, the mean over the batch so that the mean of
        the microbatches' losses is the batch's; None: the traced training step's
        default loss (the PyTorch frontend's), and :func:`square_loss` where a pipeline
        runs (:meth:`loss_of`).
    blocks : tuple of str or None
        The units a pipeline splits at (qualified names of submodules); None: found by
        :func:`find_blocks`.
    """

    name: str
    module: nn.Module
    inputs: tuple[Tensor, ...]
    target: Tensor | None = None
    loss: Callable[[Any, Tensor | None], Tensor] | None = None
    blocks: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.inputs, Tensor):
            self.inputs = (self.inputs,)
        if self.blocks is None:
            self.blocks = tuple(find_blocks(self.module))

    @property
    def batch(self) -> int:
        """Examples per step: the first input's first dimension."""
        first = self.inputs[0]
        return int(first.shape[0]) if first.dim() else 1

    @property
    def layers(self) -> list[nn.Module]:
        """The block modules, in order."""
        return [self.module.get_submodule(b) for b in self.blocks]

    def loss_of(self, output: Any, target: Tensor | None) -> Tensor:
        """The loss a pipeline run computes of ``output`` against ``target``: :attr:`loss`,
        or :func:`square_loss`."""
        return (self.loss or square_loss)(output, target)

    def trace(self):
        """The traced training step (forward, loss, backward, SGD update) of one batch
        (:class:`graphopt.frontends.torch.TracedProgram`): with :attr:`loss` where the
        model has one, else the PyTorch frontend's default loss."""
        from graphopt.frontends.torch import trace_program

        loss = None if self.loss is None else (lambda out: self.loss(out, self.target))
        return trace_program(self.module, self.inputs, training=True, optimizer="sgd",
                             loss=loss, name=self.name)

    def microbatch(self, microbatches: int, index: int = 0) -> tuple[tuple[Tensor, ...], Tensor | None]:
        """Microbatch ``index`` of ``microbatches``: its inputs and target, each cut along
        its first dimension as ``torch.distributed.pipelining`` cuts them."""
        def cut(t: Tensor) -> Tensor:
            return t.tensor_split(microbatches)[index]
        return (tuple(cut(x) for x in self.inputs),
                None if self.target is None else cut(self.target))

    def check_microbatches(self, microbatches: int) -> None:
        """Refuse a microbatch count that does not divide the batch (one-line error)."""
        if microbatches < 1:
            raise UsageError(f"--microbatches {microbatches}: give at least 1")
        if self.batch % microbatches:
            raise UsageError(f"--microbatches {microbatches} does not divide {self.name}'s "
                             f"batch of {self.batch}")

    def require_blocks(self, stages: int = 2) -> None:
        """Refuse a model with fewer than ``stages`` blocks to split, naming the model."""
        if len(self.blocks) < 2:
            raise UsageError(f"{self.name}: no blocks to split a pipeline at (a ModuleList "
                             "or Sequential of two or more modules of one class, as a "
                             "transformer's stack of layers is)")
        if stages > len(self.blocks):
            raise UsageError(f"--stages {stages}: {self.name} has only {len(self.blocks)} "
                             f"blocks ({self.blocks[0]} .. {self.blocks[-1]})")

    def with_blocks(self, blocks: tuple[str, ...]) -> Model:
        """The same model with other blocks (each must name a submodule)."""
        for b in blocks:
            try:
                self.module.get_submodule(b)
            except AttributeError:
                raise UsageError(f"{self.name}: no submodule {b!r} to split at") from None
        return replace(self, blocks=tuple(blocks))
