"""Large collectives over TCP never wedge the connection.

A ring used to post a whole chunk of sends at once while its peer had only
a few receives posted; the peer's kernel receive queue filled, and loopback
TCP then fell into loss recovery whose retransmission timer backed off to
minutes: both ranks stalled until the deadline (seen in 1 of 5 to 1 of 2
runs of 60 iterations of this very pattern, more often on a loaded
machine). Sends are now paced by receives and idle receive queues are read
ahead (docs/transports.md)."""

from __future__ import annotations

from _harness import run_ranks


def test_back_to_back_64_mib_collectives_never_stall() -> None:
    env = {"PYTFCOMM_SEGMENT_BYTES": "65536"}
    for attempt in range(3):
        results = run_ranks(2, "stream_workers:big_exchanges", 40, env=env, timeout=120)
        for r, res in enumerate(results):
            assert res["bad"] == 0, (attempt, r, res)
            # Each iteration moves ~200 MB per rank: tens of ms, never the
            # seconds of a stalled connection.
            assert res["worst"] < 5.0, (attempt, r, res)
