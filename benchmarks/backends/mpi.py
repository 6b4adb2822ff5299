"""MPI backend via mpi4py: ``comm.Allreduce(x, y, op=SUM)`` (out-of-place, buffer protocol).

Started by ``mpirun``; the transport (shared memory ``btl self,vader`` or ``btl self,tcp``
on loopback) is chosen by the launcher's MCA arguments, not here.
"""

from __future__ import annotations

import mpi4py
import numpy as np
from mpi4py import MPI

from benchmarks.backends import _harness


class Mpi:
    def __init__(self) -> None:
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def prepare(self, x: np.ndarray) -> _harness.Op:
        y = np.empty_like(x)
        return _harness.Op(
            run=lambda: self.comm.Allreduce(x, y, op=MPI.SUM),
            result=lambda: y,
            poison=lambda: y.fill(np.nan),
        )

    def barrier(self) -> None:
        self.comm.Barrier()

    def close(self) -> None:
        pass  # mpi4py finalizes at exit

    def meta(self) -> dict:
        return {"mpi4py": mpi4py.__version__, "mpi": MPI.Get_library_version().splitlines()[0]}


if __name__ == "__main__":
    _harness.main(Mpi)
