"""Running plans for real: a placed-execution engine for traced PyTorch programs.

A plan of a graph traced from a PyTorch program (:func:`graphopt.frontends.torch.trace_program`)
runs op by op where the plan puts each op, in the order its priorities give, with
real tensor transfers between devices: worker processes pinned to CPU cores talking
over ``torch.distributed`` (gloo), or CUDA devices with one stream per device and copy
streams between them. See docs/execution.md.
"""
