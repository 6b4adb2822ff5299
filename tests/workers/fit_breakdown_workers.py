"""A traced window of NumPy collectives, run by tests/tf/test_fit_breakdown.py."""

from __future__ import annotations

import time

import numpy as np

import pytfcomm
from pytfcomm.timeline import load_events


def window(rank: int, size: int, addr: str, folder: str, elems: int) -> dict:
    """Three all-reduces inside a window stamped as fit_breakdown stamps a step
    (µs of ``time.monotonic``), one before it and one after; the events and the window."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = np.ones(elems, np.float32)
        path = comm.start_timeline(f"{folder}/t-%r.json")
        comm.allreduce(x)  # before the window
        time.sleep(0.01)
        t0 = time.monotonic() * 1e6
        for _ in range(3):
            comm.allreduce(x)
        time.sleep(0.01)  # outside pytfcomm, inside the window
        t1 = time.monotonic() * 1e6
        comm.allreduce(x)  # after it
        comm.stop_timeline()
        return {"window": [t0, t1], "events": load_events(path)}
