"""The first step rides behind the record (docs/negotiation.md): in the steady
state, a recursive- or halving-doubling all-reduce over TCP sends its first
message right behind its negotiation record, and its partner uses it once the
round decides that collective alone, or drops it when the round decides
otherwise. Results stay exact and every rank raises alike."""

from __future__ import annotations

import pytest
from _harness import run_ranks

KIB = 1024
# Turns it on (off by default).
ON = {"PYTFCOMM_TRANSPORT": "tcp", "PYTFCOMM_AHEAD_BYTES": str(1 << 20)}
# Elements (float32): recursive doubling (48 KiB, 64 KiB) and halving-doubling
# (256 KiB, 2 MiB: first halves of 128 KiB and 1 MiB).
COUNTS = [12 * KIB, 16 * KIB, 64 * KIB, 512 * KIB]


def _check_steady(results: list[dict], calls: int) -> None:
    for res in results:
        assert res["failures"] == [], res["failures"]
        # Every call of the steady state sent its first message ahead, and
        # every partner's was used.
        assert (res["sent"], res["taken"]) == (calls, calls), res


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_steady_allreduces_send_their_first_step_ahead_and_stay_exact(in_place: bool) -> None:
    results = run_ranks(4, "ahead_workers:steady", COUNTS, 6, in_place, env=ON, timeout=180)
    assert {c: results[0]["picked"][c] for c in COUNTS} == {
        12 * KIB: "recursive_doubling",
        16 * KIB: "recursive_doubling",
        64 * KIB: "halving_doubling",
        512 * KIB: "halving_doubling",
    }
    _check_steady(results, 6 * len(COUNTS))


def test_eight_ranks_three_halvings() -> None:
    results = run_ranks(
        8, "ahead_workers:steady", [16 * KIB, 64 * KIB], 3, False, env=ON, timeout=240
    )
    _check_steady(results, 6)


@pytest.mark.parametrize("count", [12 * KIB, 64 * KIB], ids=["recursive", "halving"])
def test_threads_names_mismatches_and_late_ranks_drop_what_went_ahead(count: int) -> None:
    """Rounds that decide otherwise (two threads' calls, a mismatch, a late
    rank) run as usual and drop what went ahead: exact results, the mismatch
    raised on every rank, nothing left behind that breaks a later round."""
    results = run_ranks(4, "ahead_workers:mixed", count, 6, env=ON, timeout=240)
    for res in results:
        assert res["failures"] == [], res["failures"]
        assert res["mismatches"] == 12, res  # both kinds, every rank, every time
        assert res["taken"] > 0, res
    # Some went ahead in rounds that decided otherwise, and were dropped.
    assert any(res["sent"] > res["taken"] for res in results), results


def test_off_by_zero_and_through_shared_memory() -> None:
    off = run_ranks(
        4,
        "ahead_workers:steady",
        [16 * KIB, 64 * KIB],
        3,
        False,
        env={"PYTFCOMM_TRANSPORT": "tcp", "PYTFCOMM_AHEAD_BYTES": "0"},
    )
    shm = run_ranks(
        4,
        "ahead_workers:steady",
        [16 * KIB, 64 * KIB],
        3,
        False,
        env={"PYTFCOMM_TRANSPORT": "shm", "PYTFCOMM_AHEAD_BYTES": str(1 << 20)},
    )
    for res in off + shm:
        assert res["failures"] == [], res["failures"]
        assert (res["sent"], res["taken"]) == (0, 0), (
            res
        )  # records in the areas: nothing to ride behind


def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured slower on loopback (docs/negotiation.md): only a limit turns it on."""
    monkeypatch.delenv("PYTFCOMM_AHEAD_BYTES", raising=False)
    for env in ({}, {"PYTFCOMM_AHEAD_BYTES": "off"}):
        results = run_ranks(
            4,
            "ahead_workers:steady",
            [16 * KIB],
            3,
            False,
            env={"PYTFCOMM_TRANSPORT": "tcp", **env},
        )
        for res in results:
            assert res["failures"] == [], res["failures"]
            assert (res["sent"], res["taken"]) == (0, 0), res


def test_a_limit_below_the_first_message_keeps_it_in_the_data_phase() -> None:
    results = run_ranks(
        4,
        "ahead_workers:steady",
        [16 * KIB, 64 * KIB],
        3,
        False,
        env={"PYTFCOMM_TRANSPORT": "tcp", "PYTFCOMM_AHEAD_BYTES": str(100 * KIB)},
    )
    # 64 KiB whole (recursive doubling) fits, 128 KiB (halving-doubling's half) does not.
    _check_steady(results, 3)


def test_two_ranks_record_and_first_step_on_one_connection() -> None:
    """At 2 ranks the record and the first message go to the same peer, one behind the
    other (in-round inputs off, so that small all-reduces run recursive doubling)."""
    env = {**ON, "PYTFCOMM_ONESHOT_BYTES": "0"}
    results = run_ranks(2, "ahead_workers:steady", [1, 1024, 16 * KIB], 5, True, env=env)
    _check_steady(results, 15)
