"""Shared fixtures. Multi-process helpers live in tests/_harness.py; the CUDA
build and the GPU stand-ins in tests/_gpu_builds.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))

import _gpu_builds

pytest_plugins = ["_xdist_groups", "_quick_tier"]  # xdist split; the quick tier


@pytest.fixture
def ranks():
    """The run_ranks function of tests/_harness.py."""
    from _harness import run_ranks

    return run_ranks


@pytest.fixture(scope="session")
def cuda_configure(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The CUDA variant of the core, configured once per session: (build dir, CMake output).

    PYTFCOMM_TEST_CUDA_BUILD names a directory to keep between runs (rebuilt
    incrementally); else a fresh temporary one. Skips, saying what is missing,
    without nvcc or nccl.h."""
    if _gpu_builds.MISSING:
        pytest.skip(_gpu_builds.MISSING)
    keep = os.environ.get("PYTFCOMM_TEST_CUDA_BUILD")
    build = Path(keep) if keep else tmp_path_factory.mktemp("cuda-build")
    return build, _gpu_builds.configure_core(build)


@pytest.fixture(scope="session")
def cuda_build(cuda_configure: tuple[Path, str]) -> Path:
    """That build with _core and libpytfcomm_core.so built; the build directory."""
    build, _ = cuda_configure
    _gpu_builds.build_targets(build, "_core")
    return build


@pytest.fixture(scope="session")
def cuda_package(cuda_build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pytfcomm package (put it on PYTHONPATH) of this checkout's Python files and
    the CUDA-built libraries."""
    root = tmp_path_factory.mktemp("cuda-pkg")
    return _gpu_builds.make_package(root, _gpu_builds.core_libs(cuda_build))


@pytest.fixture(scope="session")
def standin_libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory holding the stand-ins' libcuda.so.1 and libnccl.so.2
    (tests/gpu/standin), built once per session."""
    if _gpu_builds.MISSING:
        pytest.skip(_gpu_builds.MISSING)
    return _gpu_builds.build_standin(tmp_path_factory.mktemp("standin-build"))


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The first test to need one of the session's build steps also pays for it: give
    that test (only) each such step's limit on top of the usual limit."""
    fixtures = [set(getattr(item, "fixturenames", ())) for item in items]
    for item, extra in zip(items, _gpu_builds.first_use_seconds(fixtures), strict=True):
        if extra:
            marker = item.get_closest_marker("timeout")
            base = marker.args[0] if marker and marker.args else config.getini("timeout")
            item.add_marker(pytest.mark.timeout(float(base or 300) + extra))
