"""One rank skips a collective (an exception on that rank only, before it calls): the
others' call times out, and then the ranks' calls on that thread carry different
numbers. Each rank's next call there fails at once with MismatchError ("out of
step"), and the calls after it pair again on every rank (docs/negotiation.md "Out of
step"). Before, every later call of the thread timed out on every rank, one after
another, for the rest of the process.
"""

from __future__ import annotations

import pytest
from _harness import run_ranks

SKIPPER = 1  # out_of_step_workers.SKIPPER
ENV = {"PYTFCOMM_TIMEOUT": "5"}


def _check_out_of_step(r: int, got: dict) -> None:
    assert got["type"] in ("MismatchError", "FailedPreconditionError"), (r, got)
    assert "out of step" in got["message"] and "still usable" in got["message"], (r, got)


def _check_skipped(r: int, got: dict) -> None:
    if r == SKIPPER:
        assert got["type"] == "ValueError", (r, got)
    else:  # no partner: its deadline
        assert got["type"] in ("CommTimeoutError", "DeadlineExceededError"), (r, got)


@pytest.mark.parametrize(("n_ranks", "transport"), [(2, "auto"), (3, "tcp")])
def test_numpy_calls_pair_again_after_a_rank_skipped_one(n_ranks: int, transport: str) -> None:
    results = run_ranks(n_ranks, "out_of_step_workers:numpy_skip", transport, timeout=150, env=ENV)
    for r, res in enumerate(results):
        assert res["warm"]["value"] == [float(n_ranks)] * 4, (r, res)
        _check_skipped(r, res["skipped"])
        _check_out_of_step(r, res["next"])
        for i, got in enumerate(res["after"]):
            want = float(n_ranks * i + n_ranks * (n_ranks - 1) // 2)
            assert got["type"] is None and got["value"] == [want] * 4, (r, i, got)
    # Every rank is told where each rank stands.
    msg = results[0]["next"]["message"]
    assert f"rank {SKIPPER} 'allreduce #1 of MainThread'" in msg, msg
    assert "'allreduce #2 of MainThread'" in msg, msg


def test_tf_eager_ops_pair_again_after_a_rank_skipped_one() -> None:
    n = 2
    results = run_ranks(n, "out_of_step_workers:tf_eager_skip", timeout=150, env=ENV)
    for r, res in enumerate(results):
        assert res["warm"]["value"] == [float(n)] * 4, (r, res)
        _check_skipped(r, res["skipped"])
        _check_out_of_step(r, res["next"])
        a, b, c = res["after"]
        assert a["type"] is None and a["value"] == [1.0] * 4, (r, a)
        assert b["type"] is None and b["value"] == [3.0] * 4, (r, b)
        assert c["type"] is None and c["value"] == [0.0, 1.0], (r, c)  # row j from rank j


def test_one_session_suite_goes_on_after_an_asymmetric_failure() -> None:
    n = 2
    results = run_ranks(n, "out_of_step_workers:session", timeout=150, env=ENV)
    for r, res in enumerate(results):
        tests = res["tests"]
        assert [t["type"] for t in tests[:2]] == [None, None], (r, tests)
        _check_skipped(r, tests[2])
        _check_out_of_step(r, tests[3])
        # Every later test passes on every rank.
        assert [t["type"] for t in tests[4:]] == [None] * 3, (r, tests[4:])
        for t in (tests[0], tests[1], *tests[4:]):
            assert t["value"] == [1.0] * 3, (r, tests)
