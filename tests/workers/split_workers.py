"""Sub-communicators (Communicator.split) in separate processes, run by tests/core/test_split.py."""

from __future__ import annotations

import numpy as np
from reference import error_text as _err

import pytfcomm


def groups(rank: int, size: int, addr: str, elems: int) -> dict:
    """Evens and odds each get a group; collectives interleave with the parent's."""
    out: dict = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        evens = comm.split(list(range(0, size, 2)))
        odds = comm.split([r for r in range(size) if r % 2 == 1][::-1])  # order is free
        mine = evens if rank % 2 == 0 else odds
        other = odds if rank % 2 == 0 else evens
        out["other_is_none"] = other is None
        out["sub"] = [mine.rank, mine.size, mine.parent_ranks]
        x = np.full(elems, rank + 1, dtype=np.float32)
        # group collective, then a parent one, then the group again: no cross-pairing.
        out["group_sum"] = float(mine.allreduce(x)[-1])
        out["all_sum"] = float(comm.allreduce(x)[-1])
        root = mine.size - 1
        b = mine.broadcast(np.full(elems, float(rank), dtype=np.float64), root)
        out["bcast"] = float(b[0])
        g = mine.allgather(np.full((rank + 1, 2), rank, dtype=np.int32))
        out["gather"] = g[:, 0].tolist()
        out["group_sum2"] = float(mine.allreduce(x * 2)[0])
        # groups of one rank each
        solo = [comm.split([r]) for r in range(size)]
        me = solo[rank]
        out["solo"] = float(me.allreduce(np.ones(3))[0])
        out["solo_others_none"] = all(s is None for i, s in enumerate(solo) if i != rank)
        me.close()
        mine.close()
        # parent still fine after closing a group
        out["after_close"] = float(comm.allreduce(np.ones(2))[0])
        out["group_closed"] = _err(lambda: mine.allreduce(np.ones(2)))
    return out


def disagree(rank: int, size: int, addr: str) -> dict:
    out: dict = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        out["disagree"] = _err(lambda: comm.split([0, 1] if rank == 0 else [0]))
        out["bad_rank"] = _err(lambda: comm.split([0, size]))
        out["empty"] = _err(lambda: comm.split([]))
        out["twice"] = _err(lambda: comm.split([0, 0]))
        out["not_list"] = _err(lambda: comm.split("01"))
        # still usable, and a split works afterwards
        out["after"] = float(comm.allreduce(np.ones(2))[0])
        g = comm.split(list(range(size)))
        out["whole"] = float(g.allreduce(np.ones(2))[0])
        g.close()
    return out
