"""Rank/size/port discovery for workers started by benchmarks._launch (spawn mode)."""

from __future__ import annotations

import os


def rank_size() -> tuple[int, int]:
    return int(os.environ["BENCH_RANK"]), int(os.environ["BENCH_SIZE"])


def ports() -> list[int]:
    """Free loopback ports picked by the launcher (at least one per rank)."""
    return [int(p) for p in os.environ["BENCH_PORTS"].split(",")]
