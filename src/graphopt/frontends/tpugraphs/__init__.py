"""TpuGraphs: XLA programs measured on TPUs, as raw tuning protos and as the public ``.npz`` files.

Two forms of the same data come in here:

* **Raw tuning protobufs** (``ModuleTuningData`` / ``TuningData``, package ``tpu_graphs``):
  an XLA ``HloModuleProto`` plus every measured run (configuration, error flag,
  whether it is the compiler default, ``compute_time_ns``). :func:`load_tuning_data`
  reads them into :class:`TuningRecord` objects (:mod:`~graphopt.frontends.tpugraphs.records`).
  The messages are declared at run time from their field numbers (no generated
  ``_pb2`` code). Needs the ``protobuf`` package.
* **The public dataset's ``.npz`` files** (tile and layout collections):
  :func:`load_tpugraphs_npz` reads one into a :class:`TpuGraphsSample`, checking
  every key, dtype and shape first (:mod:`~graphopt.frontends.tpugraphs.npz`). Needs
  only numpy; never unpickles.

How an HLO module becomes a :class:`~graphopt.ir.Graph` (its two views) and how costs
follow from shapes: :mod:`~graphopt.frontends.tpugraphs.hlo`.

References
----------
P. M. Phothilimthana et al., "TpuGraphs: A Performance Prediction Dataset on Large
Tensor Computational Graphs", NeurIPS 2023 Datasets and Benchmarks.
https://github.com/google-research-datasets/tpu_graphs
"""

from graphopt.frontends.tpugraphs.hlo import hlo_module_to_graph
from graphopt.frontends.tpugraphs.npz import (TPUGRAPHS_OPCODES, TpuGraphsSample, is_tpugraphs_npz,
                                              load_npz_graph, load_tpugraphs_npz, opcode_name)
from graphopt.frontends.tpugraphs.records import (LayoutConfig, TileConfig, TuningRecord,
                                                  load_hlo_graph, load_tuning_data)

__all__ = [
    "TPUGRAPHS_OPCODES",
    "LayoutConfig",
    "TileConfig",
    "TpuGraphsSample",
    "TuningRecord",
    "hlo_module_to_graph",
    "is_tpugraphs_npz",
    "load_hlo_graph",
    "load_npz_graph",
    "load_tpugraphs_npz",
    "load_tuning_data",
    "opcode_name",
]
