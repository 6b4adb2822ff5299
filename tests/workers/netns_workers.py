"""Run in network namespaces that tests/test_netns_hierarchical.py creates (not a test module)."""

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
