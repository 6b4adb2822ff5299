"""benchmarks/_registry.py: the MPI peer is Open MPI's mpirun, whichever MPI owns `mpirun`.

Debian points `mpirun` at the installed MPI with the highest alternatives priority; on a
machine with MPICH alone (setup.sh installs it for the launcher tests) `mpirun` is MPICH's
Hydra, which rejects the Open MPI arguments the mpi-* backends pass.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from _paths import ROOT

sys.path.append(str(ROOT))  # after the installed pytfcomm
from benchmarks import _launch, _registry


def _fake(bindir: Path, name: str, version_line: str) -> Path:
    exe = bindir / name
    exe.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _mpi_spec() -> _registry.Spec:
    return next(s for s in _registry.BACKENDS if s.name == "mpi-tcp")


@pytest.fixture
def bindir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(_registry.importlib.util, "find_spec", lambda mod: object())
    return tmp_path


def test_mpich_mpirun_alone_is_not_taken_for_open_mpi(bindir: Path) -> None:
    _fake(bindir, "mpirun", "HYDRA build details:")
    assert _registry.open_mpi_mpirun() is None
    reason = _registry.unavailable_reason(_mpi_spec())
    assert reason is not None
    assert "Open MPI" in reason and "another MPI" in reason and "setup_bench.sh" in reason


def test_debians_open_mpi_name_wins_over_another_mpirun(bindir: Path) -> None:
    _fake(bindir, "mpirun", "HYDRA build details:")
    named = _fake(bindir, "mpirun.openmpi", "mpirun (Open MPI) 4.1.4")
    assert _registry.open_mpi_mpirun() == str(named)
    assert _registry.unavailable_reason(_mpi_spec()) is None
    cmds = _launch._commands(_mpi_spec(), 4, ["--sizes", "4K"])
    assert cmds[0][0] == str(named)


def test_an_open_mpi_mpirun_is_used_as_it_is(bindir: Path) -> None:
    plain = _fake(bindir, "mpirun", "mpirun (Open MPI) 5.0.3")
    assert _registry.open_mpi_mpirun() == str(plain)


def test_no_mpirun_at_all(bindir: Path) -> None:
    assert os.listdir(bindir) == []
    assert _registry.open_mpi_mpirun() is None
    assert "Open MPI's mpirun not found" in (_registry.unavailable_reason(_mpi_spec()) or "")
