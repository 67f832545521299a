"""Where the real measurement files live.

The TpuGraphs tuning records shipped with the project sit in ``data/tpugraphs`` at the
repository's root, which only a source checkout has; set ``GRAPHOPT_TPUGRAPHS_DIR`` to
point elsewhere (e.g. at a downloaded copy), as an installed package must.
"""

from __future__ import annotations

import os
from pathlib import Path

from graphopt.errors import UsageError

__all__ = ["tpugraphs_dir"]

#: The records' folder in a source checkout: ``src/graphopt/data.py`` → repository root
#: → ``data/tpugraphs``. An installed package has no such folder.
_CHECKOUT_DIR = Path(__file__).resolve().parents[2] / "data" / "tpugraphs"


def tpugraphs_dir() -> Path:
    """Folder of the real TpuGraphs tuning records.

    Returns
    -------
    Path
        ``$GRAPHOPT_TPUGRAPHS_DIR`` when set (taken as given: it need not exist),
        else the folder beside a source checkout.

    Raises
    ------
    GraphoptError
        ``GRAPHOPT_TPUGRAPHS_DIR`` is unset and there is no source checkout's folder
        (an installed package): the message says what to set the variable to.

    Examples
    --------
    >>> from unittest import mock
    >>> with mock.patch.dict("os.environ", {"GRAPHOPT_TPUGRAPHS_DIR": "/data/tpugraphs"}):
    ...     print(tpugraphs_dir())
    /data/tpugraphs
    """
    env = os.environ.get("GRAPHOPT_TPUGRAPHS_DIR")
    if env:
        return Path(env)
    if _CHECKOUT_DIR.is_dir():
        return _CHECKOUT_DIR
    raise UsageError(
        "GRAPHOPT_TPUGRAPHS_DIR is not set and this is not a source checkout (no "
        f"{_CHECKOUT_DIR}): set GRAPHOPT_TPUGRAPHS_DIR to the folder holding the TpuGraphs "
        "tuning records (module_tuning_data_layout.pb, op_tuning_data.pb), e.g. the testdata "
        "of https://github.com/google-research-datasets/tpu_graphs")
