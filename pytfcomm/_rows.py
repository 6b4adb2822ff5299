"""How a reduce-scatter splits dimension 0 over the ranks (Horovod's rule), and the
padded copy that lets rows that do not divide evenly go through the core's
reduce-scatter, which gives every rank an equal block. No TensorFlow here."""

from __future__ import annotations

import numpy as np


def reduce_scatter_rows(rows: int, size: int) -> list[int]:
    """The rows each rank gets of a first dimension ``rows`` split over ``size`` ranks
    (Horovod's rule: ``rows // size`` each, the first ``rows % size`` ranks one more)."""
    return [rows // size + (1 if r < rows % size else 0) for r in range(size)]


def padded_blocks(x: np.ndarray, shares: list[int], out: np.ndarray) -> None:
    """Copy rank r's share of ``x``'s rows (``shares[r]`` rows, in order) to the start
    of block r of ``out`` (``len(shares)`` blocks of ``max(shares)`` rows) and zero the
    rest of each block: the same reduction then gives every rank its rows, first."""
    block = out.shape[0] // len(shares)
    first = 0
    for r, count in enumerate(shares):
        start = r * block
        out[start : start + count] = x[first : first + count]
        out[start + count : start + block] = 0
        first += count
