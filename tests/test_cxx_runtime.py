"""The C++ runtime stays a shared library (CMakeLists.txt, cmake/check_cxx_runtime.cmake).

A libpytfcomm_core.so with its own static copy of libstdc++ crashes at the
first number it formats once Python has loaded the shared libstdc++ too (found
on the GPU machine: its CXX, /opt/gcc/bin/g++, has only libstdc++.a; docs/gpu.md).
A -static-libstdc++ in CXXFLAGS/LDFLAGS is dropped with a warning; a compiler
that links the runtime statically anyway fails the build with what to do,
instead of a module that segfaults on import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GXX = shutil.which("g++")
OBJDUMP = shutil.which("objdump")
pytestmark = pytest.mark.skipif(
    not (GXX and OBJDUMP and shutil.which("ninja")), reason="needs g++, objdump and ninja"
)


def _cmake(*args: str, env: dict[str, str] | None = None, timeout: float = 600):
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    return subprocess.run(
        ["cmake", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PATH": path, **(env or {})},
    )


def _configure(build: Path, **env: str):
    return _cmake("-S", str(REPO), "-B", str(build), "-G", "Ninja",
                  "-DPYTFCOMM_BUILD_PYTHON=OFF", env=env)  # fmt: skip


def test_static_runtime_flags_are_dropped(tmp_path: Path) -> None:
    r = _configure(tmp_path, LDFLAGS="-static-libstdc++", CXXFLAGS="-O2 -static-libstdc++")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dropping -static-libstdc++ from CMAKE_SHARED_LINKER_FLAGS" in r.stderr
    assert "dropping -static-libstdc++ from CMAKE_CXX_FLAGS" in r.stderr
    assert "static-libstdc++" not in (tmp_path / "build.ninja").read_text()


def test_a_compiler_linking_the_runtime_statically_fails_the_build_clearly(
    tmp_path: Path,
) -> None:
    """A g++ that adds -static-libstdc++ on its own (as /opt/gcc's did, through
    its library directory): the build stops at libpytfcomm_core.so and says how
    to build instead."""
    wrapper = tmp_path / "g++"
    wrapper.write_text(f'#!/bin/sh\nexec {GXX} "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    build = tmp_path / "build"
    r = _configure(build, CXX=str(wrapper))
    assert r.returncode == 0, r.stderr[-3000:]
    r = _cmake("--build", str(build), "-j", "2", "--target", "pytfcomm_core")
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "linked the C++ runtime statically" in out, out[-3000:]
    assert "CXX=/usr/bin/g++" in out, out[-3000:]


def test_the_check_passes_a_library_with_a_shared_runtime() -> None:
    """The installed module's core (a normal build) passes the same check."""
    import pytfcomm

    lib = Path(pytfcomm.__file__).parent / "libpytfcomm_core.so"
    r = _cmake(f"-DLIB={lib}", f"-DOBJDUMP={OBJDUMP}", "-DCXX=g++",
               "-P", str(REPO / "cmake" / "check_cxx_runtime.cmake"), timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
