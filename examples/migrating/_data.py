"""The synthetic data the migration examples share (no download)."""

from __future__ import annotations

import numpy as np

FEATURES, CLASSES = 16, 4


def make_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic classification data: 4 Gaussian blobs in 16 dimensions."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES))
    y = rng.integers(0, CLASSES, size=n)
    x = centers[y] + rng.normal(scale=1.5, size=(n, FEATURES))
    return x.astype(np.float32), y.astype(np.int32)
