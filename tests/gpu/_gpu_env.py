"""What tests/gpu/conftest.py's ``gpu_env`` fixture gives a test: how its ranks
reach a GPU (a real one, or the CPU stand-ins)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class GpuEnv:
    """How the ranks of a GPU test reach a GPU."""

    standin: bool  # the CPU stand-ins (else a real GPU)
    env: dict[str, str] = field(default_factory=dict)  # for run_ranks(env=...)
    nccl_version: tuple[int, ...] = ()
    nccl_found: str = ""  # what gpu_info() reported: version, library, the candidates
    standin_libs: Path | None = None
    core_build: Path | None = None

    def ranks_for_nccl(self, n: int) -> int:
        """NCCL < 2.30 cannot put 2 ranks on one GPU: then 1 rank."""
        return n if self.standin or self.nccl_version >= (2, 30) else 1

    def skip_unless_nccl_ranks(self, n: int) -> None:
        """Skip, naming the NCCL found, when it cannot put n ranks on the one GPU."""
        if self.ranks_for_nccl(n) < n:
            pytest.skip(f"NCCL < 2.30 cannot put {n} ranks on one GPU (found: {self.nccl_found})")

    def with_env(self, **extra: str) -> dict[str, str]:
        return {**self.env, **extra}


def real_gpu_only(env: GpuEnv, why: str) -> None:
    """Skip on the stand-ins, saying why they cannot stand in for a GPU here."""
    if env.standin:
        pytest.skip(f"needs a real GPU: {why}")
