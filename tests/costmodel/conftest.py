"""Small TpuGraphs ``.npz`` files in the dataset's exact format, with learnable runtimes."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def chain_edges(n: int) -> np.ndarray:
    """int64 (n-1, 2) rows [u, v]: node u consumes v (TpuGraphs' direction)."""
    return np.stack([np.arange(1, n), np.arange(n - 1)], axis=1).astype(np.int64)


def node_feat(n: int, rng: np.random.Generator) -> np.ndarray:
    feat = np.zeros((n, 140), np.float32)
    feat[:, 13] = 1  # float32 one-hot
    feat[:, 21] = rng.integers(1, 64, n)
    feat[:, 28] = feat[:, 21]
    return feat


def write_tile(path: Path, n: int = 6, c: int = 12, seed: int = 0, **override) -> Path:
    """A tile file whose runtime grows with config feature 6 (a learnable rule)."""
    rng = np.random.default_rng(seed)
    cfg = rng.integers(1, 9, (c, 24)).astype(np.float32)
    runtime = (1000 * (1 + cfg[:, 6]) * (1 + seed)).astype(np.int64)
    arrays = {"node_feat": node_feat(n, rng), "node_opcode": np.full(n, 2, np.uint8),
                  "edge_index": chain_edges(n), "config_feat": cfg, "config_runtime": runtime,
                  "config_runtime_normalizers": np.full(c, 1000, np.int64)}
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def write_layout(path: Path, n: int = 12, c: int = 10, seed: int = 0, **override) -> Path:
    """A layout file: 3 configurable nodes; runtime grows with the number of
    non-default first dims; config 0 is the compiler default (all -1)."""
    rng = np.random.default_rng(seed)
    ids = np.array([2, 5, 9], np.int64)
    ncf = np.full((c, len(ids), 18), -1, np.float32)
    ncf[1:, :, :2] = rng.integers(0, 2, (c - 1, len(ids), 2))
    runtime = (10_000 + 100 * (ncf[:, :, 0] == 1).sum(axis=1)).astype(np.int64)
    arrays = {"node_feat": node_feat(n, rng), "node_opcode": np.full(n, 26, np.uint8),
                  "edge_index": chain_edges(n), "node_config_ids": ids, "node_config_feat": ncf,
                  "config_runtime": runtime, "node_splits": np.array([[0, 6]], np.int64)}
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path
