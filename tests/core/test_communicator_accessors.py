"""The supported accessors the TF and DLPack layers use instead of ``Communicator._core``:
``host_of``, ``native_handle``, ``gpu_backend`` and ``gpu_communicator``."""

from __future__ import annotations

import pytest
from _harness import run_ranks

import pytfcomm
from pytfcomm import _core, _dlpack
from pytfcomm.errors import ConfigError, InvalidArgumentError


@pytest.fixture(scope="module")
def solo():
    with pytfcomm.init(rank=0, size=1) as comm:
        yield comm


def test_host_of_checks_the_rank(solo) -> None:
    assert isinstance(solo.host_of(0), str) and solo.host_of(0)
    for bad in (1, -1):
        with pytest.raises(InvalidArgumentError, match=r"rank must be a rank in \[0, 1\)"):
            solo.host_of(bad)
    with pytest.raises(TypeError, match="rank must be an int, got bool"):
        solo.host_of(True)


def test_native_handle_is_stable_and_nonzero(solo) -> None:
    handle = solo.native_handle
    assert isinstance(handle, int) and handle > 0
    assert solo.native_handle == handle == solo._core.handle


def test_gpu_backend_follows_the_transport_argument(solo) -> None:
    assert solo.gpu_backend == _dlpack.BACKEND_AUTO
    with pytfcomm.init(rank=0, size=1, transport="tcp") as comm:
        assert comm.gpu_backend == _dlpack.BACKEND_STAGED


def test_gpu_communicator_without_cuda_says_so(solo) -> None:
    if _core.build_info()["cuda"]:
        pytest.skip("a CUDA build: tests/gpu covers gpu_communicator()")
    with pytest.raises(ConfigError, match="no CUDA support"):
        solo.gpu_communicator()


def test_host_of_names_every_rank_s_bind_host() -> None:
    binds = ["127.0.0.1", "127.0.0.2"]
    envs = [{"PYTFCOMM_BIND_HOST": b} for b in binds]
    results = run_ranks(2, "core_workers:accessors", binds, per_rank_env=envs)
    assert [r["hosts"] for r in results] == [binds, binds]
    for r in results:
        assert r["handles"][0] == r["handles"][1] > 0
        assert r["gpu_backend"] == _dlpack.BACKEND_AUTO
