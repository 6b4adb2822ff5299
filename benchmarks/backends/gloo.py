"""torch.distributed Gloo backend: ``dist.all_reduce`` (in-place) on a CPU float32 tensor.

Gloo is TCP over loopback (GLOO_SOCKET_IFNAME=lo is set by the launcher). all_reduce is
in-place, so ``reset`` copies the pristine input back before every iteration (untimed).
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist

from benchmarks.backends import _env, _harness


class Gloo:
    def __init__(self) -> None:
        self.rank, self.size = _env.rank_size()
        port = _env.ports()[0]
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=self.rank, world_size=self.size
        )

    def prepare(self, x: np.ndarray) -> _harness.Op:
        buf = x.copy()
        t = torch.from_numpy(buf)
        return _harness.Op(
            run=lambda: dist.all_reduce(t, op=dist.ReduceOp.SUM),
            result=lambda: buf,
            poison=lambda: buf.fill(np.nan),
            reset=lambda: np.copyto(buf, x),
        )

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        dist.destroy_process_group()

    def meta(self) -> dict:
        return {"torch": torch.__version__, "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME")}


if __name__ == "__main__":
    _harness.main(Gloo)
