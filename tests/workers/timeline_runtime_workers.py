"""Timelines started and stopped at run time, run by tests/timeline/test_timeline_runtime.py."""

from __future__ import annotations

import threading

import numpy as np

import pytfcomm


def toggle(rank: int, size: int, addr: str, folder: str, elems: int) -> dict:
    out: dict = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        x = np.ones(elems, np.float32)
        out["before"] = comm.timeline_path
        comm.allreduce(x)  # not traced
        out["first"] = comm.start_timeline(f"{folder}/t.json")
        for _ in range(3):
            comm.allreduce(x)
        comm.stop_timeline()
        out["stopped"] = comm.timeline_path
        for _ in range(2):
            comm.allreduce(x)  # not traced
        out["resumed"] = comm.start_timeline(f"{folder}/t.json")  # the same file: appended
        comm.broadcast(x, root=0)
        comm.stop_timeline()
        out["second"] = comm.start_timeline(f"{folder}/u-%r.json")  # a new file
        comm.allreduce(x)
        try:
            comm.start_timeline(f"{folder}/no/such/dir/v.json")
            out["bad"] = "no error"
        except pytfcomm.ConfigError as exc:
            out["bad"] = str(exc)
        out["after_bad"] = comm.timeline_path
        comm.allreduce(x)
        # Start and stop from another thread while collectives run: no crash,
        # the file stays valid JSON.
        stop = threading.Event()

        def flip() -> None:
            for i in range(40):
                if stop.is_set():
                    return
                if i % 2:
                    comm.stop_timeline()
                else:
                    comm.start_timeline(f"{folder}/w.json")

        t = threading.Thread(target=flip, name="flipper")
        t.start()
        for _ in range(200):
            y = comm.allreduce(x)
            assert y[0] == size
        stop.set()
        t.join(30)
        comm.stop_timeline()
    return out


def start_refused(rank: int, size: int, addr: str, pattern: str) -> dict:
    """start_timeline(pattern) where the file must be refused: the error, and that the
    collectives go on without a timeline."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        try:
            out = {"error": "", "path": comm.start_timeline(pattern)}
        except pytfcomm.ConfigError as exc:
            out = {"error": str(exc), "path": comm.timeline_path}
        out["sum"] = float(comm.allreduce(np.ones(4, np.float32))[0])
    return out
