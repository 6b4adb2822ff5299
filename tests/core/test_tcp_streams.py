"""Multi-stream TCP (PYTFCOMM_TCP_STREAMS): several connections per pair of
ranks on different hosts, bytes dealt round-robin in stripes. Hosts are
simulated on 127.0.0.1 with PYTFCOMM_HOST_ID (the netns test crosses a real
veth link with it too)."""

from __future__ import annotations

import pytest
from _harness import check_matrix, run_ranks


def two_hosts(n: int) -> list[dict]:
    return [{"PYTFCOMM_HOST_ID": f"host{r * 2 // n}"} for r in range(n)]


@pytest.mark.parametrize("streams", ["1", "3"])
def test_every_collective_exact_over_striped_connections(streams: str) -> None:
    # 4 KiB stripes: every message larger than that crosses connections.
    env = {"PYTFCOMM_TCP_STREAMS": streams, "PYTFCOMM_TCP_STRIPE_BYTES": "4096"}
    results = run_ranks(
        4,
        "stream_workers:matrix_and_sockets",
        [0, 1, 1000, 40_001],
        env=env,
        per_rank_env=two_hosts(4),
        timeout=240,
    )
    check_matrix(results)
    for r, res in enumerate(results):
        assert res["big_ok"], r
        # Two remote peers with `streams` connections each, one local peer's
        # liveness socket (shared memory).
        assert res["sockets"] == 2 * int(streams) + 1, (r, res["sockets"])


def test_ranks_that_ask_for_different_counts_use_the_smaller() -> None:
    envs = [dict(e, PYTFCOMM_TCP_STREAMS=str(2 + 2 * (r % 2))) for r, e in enumerate(two_hosts(4))]
    results = run_ranks(
        4,
        "stream_workers:matrix_and_sockets",
        [5, 70_001],
        per_rank_env=envs,
        timeout=240,
    )
    check_matrix(results)
    # Pairs (0,2), (0,3), (1,2) use 2 connections, (1,3) uses 4.
    assert [r["sockets"] for r in results] == [5, 7, 5, 7]


def test_extra_connections_are_authenticated_with_the_job_secret() -> None:
    env = {"PYTFCOMM_TCP_STREAMS": "2", "PYTFCOMM_SECRET": "s3cret-for-the-stream-test"}
    results = run_ranks(
        2,
        "stream_workers:matrix_and_sockets",
        [5, 70_001],
        env=env,
        per_rank_env=two_hosts(2),
        timeout=240,
    )
    check_matrix(results)
    assert [r["sockets"] for r in results] == [2, 2]


def test_killed_peer_is_named_with_streams() -> None:
    env = {"PYTFCOMM_TCP_STREAMS": "3", "PYTFCOMM_TCP_STRIPE_BYTES": "65536"}
    outcomes = run_ranks(
        3,
        "stream_workers:killed_mid_transfer",
        env=env,
        per_rank_env=[{"PYTFCOMM_HOST_ID": f"host{r}"} for r in range(3)],
        timeout=90,
        allow_failure=True,
    )
    assert not outcomes[2][0]
    for ok, res in outcomes[:2]:
        assert ok, res
        assert res["type"] == "PeerLostError", res
        assert res["seconds"] < 10, res


@pytest.mark.parametrize("value", ["0", "17", "two"])
def test_bad_stream_counts_are_config_errors(value: str) -> None:
    results = run_ranks(
        2,
        "stream_workers:init_only",
        env={"PYTFCOMM_TCP_STREAMS": value},
        per_rank_env=two_hosts(2),
        timeout=60,
    )
    for res in results:
        assert res["type"] == "ConfigError", res
        assert "PYTFCOMM_TCP_STREAMS" in res["message"], res


@pytest.mark.parametrize("env", [{}, {"PYTFCOMM_TCP_STREAMS": "auto"}])
def test_auto_uses_four_connections_per_pair_of_hosts_in_small_jobs(env: dict) -> None:
    results = run_ranks(
        4,
        "stream_workers:matrix_and_sockets",
        [5],
        env=env,
        per_rank_env=two_hosts(4),
        timeout=240,
    )
    check_matrix(results)
    assert [r["sockets"] for r in results] == [2 * 4 + 1] * 4
