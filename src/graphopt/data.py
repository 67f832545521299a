"""Where the real measurement files live.

The TpuGraphs tuning records shipped with the project sit in ``shared/data/tpugraphs``
beside the repository (``../shared`` from the repository root); set
``GRAPHOPT_TPUGRAPHS_DIR`` to point elsewhere (e.g. at a downloaded copy).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["tpugraphs_dir"]


def tpugraphs_dir() -> Path:
    """Folder of the real TpuGraphs tuning records (it may not exist on every machine)."""
    env = os.environ.get("GRAPHOPT_TPUGRAPHS_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]  # src/graphopt/data.py -> repository root
    return repo.parent / "shared" / "data" / "tpugraphs"
