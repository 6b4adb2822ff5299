"""Tensor fusion (allreduce_many, allreduce_async): right results, in the right outputs,
identical on every rank, and loud errors when ranks pass different lists."""

from __future__ import annotations

import numpy as np
import pytest
from _harness import check_matrix, run_ranks

import pytfcomm

# None = PYTFCOMM_FUSION_BYTES (one buffer per dtype here); 64 and 4096 force
# many buffers, tensors above them go alone.
THRESHOLDS = [None, 4096, 64]


@pytest.fixture(autouse=True, params=["tcp", "shm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", request.param)
    return request.param


@pytest.mark.parametrize("n", [2, 3])
def test_many_every_op_dtype_threshold(n: int) -> None:
    check_matrix(run_ranks(n, "fusion_workers:many_matrix", THRESHOLDS, False, timeout=240))


def test_many_in_place() -> None:
    check_matrix(run_ranks(2, "fusion_workers:many_matrix", [None, 64], True))


def test_many_direct_path() -> None:
    # Every tensor of 1 KiB or more skips the fusion buffer.
    env = {"PYTFCOMM_FUSION_DIRECT_BYTES": "1024"}
    check_matrix(run_ranks(2, "fusion_workers:many_matrix", [None], False, env=env))


@pytest.mark.parametrize("fusion_bytes", [1 << 20, 512, 4])
def test_results_land_in_their_own_output(fusion_bytes: int) -> None:
    for values in run_ranks(2, "fusion_workers:ordering", fusion_bytes):
        assert values == [float(i + 1) for i in range(40)]


@pytest.mark.parametrize("kind", ["swapped", "longer", "dtype"])
def test_mismatched_lists_fail_on_every_rank(kind: str) -> None:
    results = run_ranks(3, "fusion_workers:mismatched_lists", kind, timeout=60)
    # As for every collective (test_core_errors.py): every rank sees the
    # disagreement in the negotiation and raises MismatchError itself (no
    # rank learns it from a peer's abort), and the communicator stays usable.
    for r, res in enumerate(results):
        assert res["type"] == "MismatchError", f"rank {r}: {res}"
        assert "disagree" in res["message"], f"rank {r}: {res}"
        assert res["after"] == 3.0, f"rank {r}: {res}"


@pytest.mark.parametrize("n", [2, 3])
def test_async_results(n: int) -> None:
    check_matrix(run_ranks(n, "fusion_workers:async_many", 6))


def test_async_mismatch_fails_on_every_rank() -> None:
    results = run_ranks(2, "fusion_workers:async_mismatch", timeout=60)
    for r, res in enumerate(results):
        assert None not in res["errors"], f"rank {r} got a result from a mismatched list: {res}"
        assert set(res["errors"]) == {"MismatchError"}, f"rank {r}: {res}"
        assert res["after"] == 2.0, f"rank {r}: {res}"


@pytest.fixture(scope="module")
def solo():
    with pytfcomm.init(rank=0, size=1) as comm:
        yield comm


def test_single_rank_is_identity(solo, transport) -> None:
    xs = [np.arange(n, dtype=np.float32) for n in (0, 1, 100)]
    for x, y in zip(xs, solo.allreduce_many(xs, "mean"), strict=True):
        assert np.array_equal(x, y)
    h = solo.allreduce_async(xs[2], "max")
    assert np.array_equal(h.wait(timeout=30), xs[2]) and h.done()


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda c: c.allreduce_many(np.ones(3)), TypeError, "list or tuple"),
        (lambda c: c.allreduce_many([np.ones(3), [1.0]]), TypeError, r"arrays\[1\]"),
        (lambda c: c.allreduce_many([np.ones((4, 4))[:, 1]]), ValueError, "C-contiguous"),
        (lambda c: c.allreduce_many([np.ones(3, np.complex64)]), ValueError, "complex64"),
        (lambda c: c.allreduce_many([np.ones(3)], out=[]), ValueError, "one output per input"),
        (lambda c: c.allreduce_many([np.ones(3)], out=[np.ones(4)]), ValueError, "shape"),
        (lambda c: c.allreduce_many([np.ones(3)], out=[np.ones(3, "f4")]), ValueError, "dtype"),
        (lambda c: c.allreduce_many([np.ones(3, bool)], op="mean"), ValueError, "bool"),
        (lambda c: c.allreduce_many([np.ones(3)], op="avg"), ValueError, "op must be"),
        (lambda c: c.allreduce_many([np.ones(3)], fusion_bytes=0), ValueError, "fusion_bytes"),
        (lambda c: c.allreduce_async([1.0]), TypeError, "numpy.ndarray"),
        (lambda c: c.allreduce_async(np.ones(3, bool), op="mean"), ValueError, "bool"),
        (lambda c: c.allreduce_async(np.ones(3), out=np.ones(2)), ValueError, "shape"),
    ],
)
def test_bad_arguments(solo, transport, call, exc, words) -> None:
    with pytest.raises(exc, match=words):
        call(solo)


def test_read_only_output_is_refused(solo, transport) -> None:
    out = np.zeros(3)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        solo.allreduce_many([np.ones(3)], out=[out])
