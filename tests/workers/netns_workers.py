"""Run in the network namespaces of tests/core/test_netns_hierarchical.py (not a test module)."""

from __future__ import annotations

import core_workers

import pytfcomm


def topology_and_allreduce(rank: int, size: int, addr: str, sizes: list[int]) -> dict:
    """What this rank sees of the job, then the every-dtype/op all-reduce matrix."""
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        topo = {
            "num_hosts": comm.num_hosts,
            "local_rank": comm.local_rank,
            "local_size": comm.local_size,
        }
        import numpy as np

        comm.allreduce(np.ones(1 << 20, np.float32), algorithm="hierarchical")
        topo["explicit"] = comm._core.last_algorithm()
        comm.allreduce(np.ones(1 << 20, np.float32))
        topo["auto_1m"] = comm._core.last_algorithm()
    out = core_workers.allreduce_matrix(
        rank, size, addr, sizes, ["hierarchical", "auto", "ring"], False
    )
    out["topology"] = topo
    return out


def allreduce_through_outage(rank: int, size: int, addr: str, limit_s: float) -> dict:
    """All-reduce in a loop, checking every result, until the test creates the file
    ``stop`` (every rank stops at the same call: the flag travels in the
    all-reduce). Creates ``looping.RANK`` once it has run a few calls. Returns the
    calls made and the longest any took, or what the communicator raised."""
    import os
    import time
    from pathlib import Path

    import numpy as np

    out: dict = {"calls": 0, "longest": 0.0, "type": None}
    start = time.monotonic()
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        try:
            while time.monotonic() - start < limit_s:
                i = out["calls"]
                x = np.full(1024, float(rank + 1 + i))
                x[0] = 1.0 if os.path.exists("stop") else 0.0
                t = time.monotonic()
                y = comm.allreduce(x)
                out["longest"] = max(out["longest"], time.monotonic() - t)
                want = sum(r + 1 + i for r in range(size))
                assert np.all(y[1:] == want), (i, y[:4], want)
                out["calls"] = i + 1
                if out["calls"] == 20:
                    Path(f"looping.{rank}").write_text("")
                if y[0] > 0:
                    break
                time.sleep(0.005)
        except pytfcomm.CommError as exc:
            out.update(type=type(exc).__name__, message=str(exc), at=time.time())
    return out
