"""pytfcomm backend: ``comm.allreduce(x, op="sum", out=y, algorithm=...)`` (no allocation).

Named ``pytfcomm_backend`` (not ``pytfcomm``) so the module never shadows the real package.
Variants are selected through the environment the launcher passes (see _registry.py):
  PYTFCOMM_TRANSPORT   tcp|shm|auto; given to ``pytfcomm.init(transport=...)`` when that
                       keyword exists, and left in the environment for the library either way.
  PYTFCOMM_ALGORITHM   auto|ring (default auto), the ``algorithm=`` of every call.
"""

from __future__ import annotations

import inspect
import os

import numpy as np

import pytfcomm
from benchmarks.backends import _env, _harness


class PyTfComm:
    def __init__(self) -> None:
        self.rank, self.size = _env.rank_size()
        kwargs: dict = {}
        self.transport = os.environ.get("PYTFCOMM_TRANSPORT", "")
        if self.transport and "transport" in inspect.signature(pytfcomm.init).parameters:
            kwargs["transport"] = self.transport
        self.algorithm = os.environ.get("PYTFCOMM_ALGORITHM", "auto")
        addr = f"127.0.0.1:{_env.ports()[0]}"
        self.comm = pytfcomm.init(rank=self.rank, size=self.size, addr=addr, **kwargs)

    def prepare(self, x: np.ndarray) -> _harness.Op:
        y = np.empty_like(x)
        comm, alg = self.comm, self.algorithm
        return _harness.Op(
            run=lambda: comm.allreduce(x, op="sum", out=y, algorithm=alg),
            result=lambda: y,
            poison=lambda: y.fill(np.nan),
        )

    def barrier(self) -> None:
        self.comm.barrier()

    def close(self) -> None:
        self.comm.close()

    def meta(self) -> dict:
        return {
            "pytfcomm": getattr(pytfcomm, "__version__", "unknown"),
            "path": os.path.dirname(pytfcomm.__file__),
            "transport": self.transport or "default",
            "algorithm": self.algorithm,
        }


if __name__ == "__main__":
    _harness.main(PyTfComm)
