"""The zoo's models in plain PyTorch, one module per family.

Each module holds an ``nn.Module`` whose ``forward`` returns a training loss, and a
``make(...)`` function returning ``(model, example_inputs)`` with weights and inputs
drawn from a seed. Sizes default to the papers'; every size is a keyword, so tests
build tiny versions of the same code.
"""

from graphopt.zoo.models import (
    amoebanet,
    bert,
    gnmt,
    gpt2,
    inception_v3,
    resnet,
    rnnlm,
    transformer_xl,
    wavenet,
)

#: Family name → the module that builds it.
FAMILIES = {
    "rnnlm": rnnlm,
    "gnmt": gnmt,
    "transformer_xl": transformer_xl,
    "inception_v3": inception_v3,
    "amoebanet": amoebanet,
    "wavenet": wavenet,
    "bert": bert,
    "gpt2": gpt2,
    "resnet": resnet,
}

__all__ = ["FAMILIES"]
