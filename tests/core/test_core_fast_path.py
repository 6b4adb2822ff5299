"""The C++ fast path of ``Communicator.allreduce`` (csrc/bindings/fast_allreduce.cc).

It takes only the common call and must agree bit for bit with the full path:
same results, same shape digest (ranks on different paths must still match),
and for anything else it declines without touching the output, so the full
path raises its usual errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from _harness import check_matrix, run_ranks

import pytfcomm
from pytfcomm import _core
from pytfcomm.communicator import shape_tag


@pytest.fixture(scope="module")
def solo():
    with pytfcomm.init(rank=0, size=1) as comm:
        yield comm


@pytest.mark.parametrize(
    "shape", [(), (7,), (1024,), (2, 3), (4, 6, 1), (1, 1, 1, 1, 9), (2**40, 3)]
)
def test_shape_digest_is_the_python_one(shape: tuple[int, ...]) -> None:
    assert _core.shape_digest(list(shape)) == shape_tag(shape)


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "bool"]
)
@pytest.mark.parametrize("shape", [(), (5,), (3, 4, 2)])
def test_common_call_is_taken(solo, dtype: str, shape: tuple[int, ...]) -> None:
    x = (np.arange(int(np.prod(shape)), dtype=np.int64) % 3).astype(dtype).reshape(shape)
    out = np.full_like(x, 1)
    assert solo._core.allreduce_fast(x, out, "sum", "auto") is True
    assert np.array_equal(out, x)
    assert solo._core.allreduce_fast(x, x, "max", "ring") is True  # in place


def _declined(solo, x, out, op="sum", algorithm="auto") -> None:
    before = np.array(out, copy=True) if isinstance(out, np.ndarray) else None
    assert solo._core.allreduce_fast(x, out, op, algorithm) is False
    if before is not None:
        assert np.array_equal(out, before, equal_nan=True), "a declined call wrote its output"


def test_anything_else_is_declined_untouched(solo) -> None:
    x = np.arange(12, dtype=np.float32)
    out = np.zeros(12, np.float32)
    _declined(solo, x, out, op="SUM")  # other spellings: the full path normalises them
    _declined(solo, x, out, op=0)
    _declined(solo, x, out, algorithm="Ring")
    _declined(solo, x, out, algorithm=None)
    _declined(solo, x, np.zeros(12, np.float64))  # dtype differs
    _declined(solo, x, np.zeros((3, 4), np.float32))  # shape differs, same count
    _declined(solo, x[::2], np.zeros(6, np.float32))  # input not contiguous
    _declined(solo, x.reshape(3, 4), np.zeros((4, 3), np.float32).T)  # output not contiguous
    ro = np.zeros(12, np.float32)
    ro.flags.writeable = False
    _declined(solo, x, ro)
    _declined(solo, x.astype(">f4"), np.zeros(12, ">f4"))  # not native byte order
    _declined(solo, x.astype(np.complex64), np.zeros(12, np.complex64))
    _declined(solo, list(range(12)), out)
    _declined(solo, np.ma.masked_array(x), out)  # subclasses take the full path
    _declined(solo, x, None)


def test_declined_calls_still_get_the_full_paths_errors(solo) -> None:
    x = np.arange(12, dtype=np.float32)
    ro = np.zeros(12, np.float32)
    ro.flags.writeable = False
    with pytest.raises(pytfcomm.InvalidArgumentError, match="read-only"):
        solo.allreduce(x, out=ro)
    with pytest.raises(pytfcomm.InvalidArgumentError, match="op must be"):
        solo.allreduce(x, op="avg")
    assert np.array_equal(solo.allreduce(x, op="SUM"), x)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_ranks_on_different_paths_agree(transport: str) -> None:
    # Even ranks take the fast path, odd ranks the full one (a timeout
    # forces it): the shape digests must match, and so must the results.
    results = run_ranks(
        3, "core_workers:fast_and_full_paths", env={"PYTFCOMM_TRANSPORT": transport}
    )
    check_matrix(results)
