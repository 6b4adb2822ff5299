"""A peer that stops answering (SIGSTOP, a hung host) is named within
PYTFCOMM_PEER_TIMEOUT (10 s by default) by every other rank, whether they wait for
it in a collective or were idle when it stopped; the 600 s collective deadline
never comes into it (docs/reliability.md)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from _harness import collect_survivors, start_ranks

VICTIM = 2


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("busy", [True, False], ids=["in-a-collective", "idle"])
def test_stopped_peer_is_named_within_the_liveness_timeout(transport: str, busy: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="pytfcomm-liveness-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            3,
            "interrupt_workers:stopped_peer",
            VICTIM,
            busy,
            workdir=workdir,
            # The defaults a user has: no deadline of ours shorter than 600 s.
            env={"PYTFCOMM_TRANSPORT": transport, "PYTFCOMM_TIMEOUT": "600"},
        )
        outcomes = collect_survivors(procs, results, workdir, VICTIM, timeout=90)
    named = re.compile(rf"rank {VICTIM} \(127\.0\.0\.1[:,)]")
    for r in (0, 1):
        ok, res = outcomes[r]
        assert ok, res
        # Waiting, the call raises the cause; idle, the background thread closed
        # the communicator and the next call says so, with the cause.
        assert res["type"] == ("PeerLostError" if busy else "CommClosedError"), res
        assert named.search(res["message"]) and "heartbeat" in res["message"], res
        assert res["closed"], res
        # PYTFCOMM_PEER_TIMEOUT is 10 s; idle ranks notice it in the background
        # and raise at their next call (after their 12 s sleep).
        assert res["seconds"] < 16, res
        if busy:
            assert res["seconds"] > 8, res  # not before the timeout
