"""Large collectives over TCP never wedge the connection.

A ring used to post a whole chunk of sends at once while its peer had only
a few receives posted; the peer's kernel receive queue filled, and loopback
TCP then fell into loss recovery whose retransmission timer backed off to
minutes: both ranks stalled until the deadline (seen in 1 of 5 to 1 of 2
runs of 60 iterations of this very pattern, more often on a loaded
machine). Sends are now paced by receives and idle receive queues are read
ahead (docs/transports.md)."""

from __future__ import annotations

import pytest
from _harness import free_port, run_ranks


def test_back_to_back_64_mib_collectives_never_stall() -> None:
    env = {"PYTFCOMM_SEGMENT_BYTES": "65536"}
    for attempt in range(3):
        results = run_ranks(2, "stream_workers:big_exchanges", 40, env=env, timeout=120)
        for r, res in enumerate(results):
            assert res["bad"] == 0, (attempt, r, res)
            # Each iteration moves ~200 MB per rank: tens of ms, never the
            # seconds of a stalled connection.
            assert res["worst"] < 5.0, (attempt, r, res)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_root_that_closes_at_once_still_delivers_everything(transport: str) -> None:
    """The root of a broadcast returns once its kernel holds the data, and
    closes. Frequent heartbeats (a short PYTFCOMM_PEER_TIMEOUT) make it likely
    that the peer's bytes are unread at that moment: a close then reset the
    connection and cut the broadcast short on the receiver in 9 to 12 of 40
    jobs. The close now waits until the peer's kernel has every byte."""
    ports: list[int] = []
    while len(ports) < 25:
        port = free_port()
        if port not in ports:
            ports.append(port)
    env = {"PYTFCOMM_PEER_TIMEOUT": "0.3"}
    results = run_ranks(
        2, "stream_workers:close_right_after_broadcast", transport, ports, env=env, timeout=240
    )
    for r, res in enumerate(results):
        assert res["failures"] == [] and res["bad"] == 0, (r, res)
