"""Communicator.join (Horovod's join, ranks that ran out of data) over TCP and shared
memory, at one-shot and multi-segment sizes: the active ranks get exactly what the
active ranks gave, join agrees on the last rank, and calls pair up again after it."""

from __future__ import annotations

import pytest
from _harness import run_ranks


@pytest.fixture(autouse=True, params=["tcp", "shm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", request.param)
    return request.param


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("elems", [6, 1 << 18])
def test_ranks_that_ran_out_join(n: int, elems: int) -> None:
    out = run_ranks(n, "join_workers:steps", elems, timeout=240)
    for r, o in enumerate(out):
        assert o["failures"] == [], (r, o["failures"])
        assert o["last0"] == n - 1 and o["last1"] == n - 1
        assert o["last_bad"] in range(1, n) and o["last_bad"] == out[0]["last_bad"]
        if r > 0:
            # out= sized for every rank's rows: the joined rank gave none, which is said
            assert o["equal_gather"].startswith("InvalidArgumentError"), o["equal_gather"]
            assert "rows per rank: [0," in o["equal_gather"]
            assert o["root_joined"].startswith("MismatchError") and "root" in o["root_joined"]
            assert o["after_bad"] == float(n - 1)
