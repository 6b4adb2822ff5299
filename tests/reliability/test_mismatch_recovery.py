"""Horovod's contract for mismatches: ranks that disagree on a collective before any
data moved all raise MismatchError, and the communicator stays usable.

A suite migrated from Horovod runs as one session and survives its bad calls, so each
run below makes every kind of bad call in a row on one communicator, and checks after
each that correct all-reduces, broadcasts and all-gathers (large and small) return the
right values on every rank: no stale bytes in pipes or shared-memory slots, sequence
numbers still agree. docs/errors.md has the table of kinds.
"""

from __future__ import annotations

import pytest
from _harness import run_ranks
from mismatch_workers import KINDS

import pytfcomm

# 256 B (in the negotiation); 4 MiB (the ring: on shared memory at N=2 read from the
# sender's memory, 2 MiB per rank; at N=3 copied through the shared rings)
SIZES = {"oneshot": 64, "large": 1 << 20}


@pytest.mark.parametrize(
    ("n_ranks", "transport"),
    # Five ranks over TCP: a round's records reach most ranks forwarded in a
    # bundle of several (docs/negotiation.md), and a bad record must still be
    # seen by all.
    [(n, t) for n in (2, 3) for t in ("tcp", "shm", "auto")] + [(5, "tcp")],
)
@pytest.mark.parametrize("size", list(SIZES))
def test_every_mismatch_leaves_the_communicator_usable(
    transport: str, size: str, n_ranks: int
) -> None:
    kinds = list(KINDS)
    results = run_ranks(
        n_ranks, "mismatch_workers:session", transport, SIZES[size], kinds, timeout=90
    )
    for r, res in enumerate(results):
        assert list(res) == kinds, f"rank {r} stopped after {list(res)[-1]}: {res}"
        for kind, got in res.items():
            assert got["type"] == "MismatchError" and got["is_mismatch"], (r, kind, got)
            assert not got["closed"], (r, kind, got)
            assert got["after"] is None, (r, kind, got)
    # Every rank's message names the collective and says the communicator lives on.
    for res in results:
        for kind, got in res.items():
            if kind not in ("fused_list", "fused_small", "async_order", "async_partial"):
                assert "still usable" in got["message"], (kind, got)


def test_mismatch_error_is_a_comm_error() -> None:
    assert issubclass(pytfcomm.MismatchError, pytfcomm.CommError)
