"""The C++ runtime stays a shared library (CMakeLists.txt, cmake/check_cxx_runtime.cmake).

A libpytfcomm_core.so with its own static copy of libstdc++ crashes at the
first number it formats once Python has loaded the shared libstdc++ too (found
on the GPU machine: its CXX, /opt/gcc/bin/g++, has only libstdc++.a; docs/gpu.md).
A -static-libstdc++ in CXXFLAGS/LDFLAGS is dropped with a warning; every link
of the core runs a check that fails the build, saying what to do, when the
runtime went in statically anyway (a compiler can do that without any flag),
instead of leaving a module that segfaults. (Building the whole core with a
static-linking compiler wrapper was checked by hand: the build stops with that
message; here a small library stands in for it.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _paths import ROOT

REPO = ROOT
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


def _check(lib: Path):
    return _cmake(f"-DLIB={lib}", f"-DOBJDUMP={OBJDUMP}", "-DCXX=g++",
                  "-P", str(REPO / "cmake" / "check_cxx_runtime.cmake"), timeout=60)  # fmt: skip


def test_every_link_of_the_core_is_checked(tmp_path: Path) -> None:
    r = _configure(tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    ninja = (tmp_path / "build.ninja").read_text()
    link = [b for b in ninja.split("\n\n") if "build libpytfcomm_core.so:" in b]
    assert len(link) == 1 and "check_cxx_runtime.cmake" in link[0], link


def test_a_statically_linked_runtime_fails_with_what_to_do(tmp_path: Path) -> None:
    """A library linked as /opt/gcc's g++ linked the core (the runtime inside it)."""
    src = tmp_path / "f.cc"
    src.write_text(
        "#include <sstream>\n"
        "std::string f(double x) { std::ostringstream o; o << x; return o.str(); }\n"
    )
    lib = tmp_path / "libstatic.so"
    subprocess.run([GXX, "-shared", "-fPIC", "-static-libstdc++", "-o", str(lib), str(src)],
                   check=True, timeout=120)  # fmt: skip
    r = _check(lib)
    assert r.returncode != 0
    assert "linked the C++ runtime statically" in r.stderr, r.stderr
    assert "CXX=/usr/bin/g++" in r.stderr, r.stderr


def test_the_check_passes_a_library_with_a_shared_runtime() -> None:
    """The installed module's core (a normal build) passes the same check."""
    import pytfcomm

    r = _check(Path(pytfcomm.__file__).parent / "libpytfcomm_core.so")
    assert r.returncode == 0, r.stderr
