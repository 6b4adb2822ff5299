"""Order-independent matching (docs/negotiation.md): collectives meet by key, not by
the order ranks happen to call them in; misuse raises, it never mixes data up."""

from __future__ import annotations

import pytest
from _harness import run_ranks

TRANSPORTS = ["tcp", "shm"]
SIZES = {"small": 64, "large": 300_000}  # within a negotiation round / ring over frames


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_two_threads_on_one_communicator(transport: str, size: str) -> None:
    """Two threads per rank, 300 all-reduces each (fewer when large): every result
    is the sum of the same-named thread's calls (this gave 3001 instead of 2001 or
    4001 in 265 of 300 calls when matching went by arrival order)."""
    iters = 300 if size == "small" else 40
    results = run_ranks(
        2, "negotiation_workers:two_threads", SIZES[size], iters, transport, timeout=240
    )
    for r, res in enumerate(results):
        assert res["n_wrong"] == 0, (r, res["wrong"])


@pytest.mark.parametrize("n_ranks", [3, 5, 6])
@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_records_forwarded_over_tcp_at_any_job_size(n_ranks: int, size: str) -> None:
    """Over TCP each rank hears from ceil(log2 n) peers per round, most records
    forwarded in bundles (docs/negotiation.md); job sizes that are no power of two
    cut the last step short. Two threads per rank put records of several collectives
    in a round, in different orders: every result is still its own thread's sum."""
    iters = 60 if size == "small" else 6
    results = run_ranks(
        n_ranks, "negotiation_workers:two_threads", SIZES[size], iters, "tcp", timeout=240
    )
    for r, res in enumerate(results):
        assert res["n_wrong"] == 0, (r, res["wrong"])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_named_collectives_meet_in_any_order(transport: str) -> None:
    results = run_ranks(3, "negotiation_workers:named_out_of_order", transport, timeout=120)
    want = {nm: ord(nm) * 6.0 for nm in "abcd"}  # ranks contribute x1, x2, x3
    for r, res in enumerate(results):
        assert res["errors"] == [] and res["out"] == want, (r, res)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
@pytest.mark.parametrize("how", ["thread_name", "name"])
def test_two_threads_in_one_stream_are_refused(how: str, size: str, transport: str) -> None:
    """Two live threads named alike, or two threads passing one name=, would share
    one numbering, so their calls could pair with either thread's on the other
    rank: the second one in a call at the same time is refused with what to do,
    the first one is not disturbed, and the stream goes on in step."""
    r0, r1 = run_ranks(
        2, "negotiation_workers:same_stream_twice", how, transport, SIZES[size], timeout=120
    )
    assert len(r0["errors"]) == 1, r0
    err = r0["errors"][0]
    assert err.startswith("InvalidArgumentError"), r0
    if how == "thread_name":
        assert "two threads named 'twin'" in err and "threading.Thread(name=...)" in err, r0
    else:
        assert "two threads call collectives named 'grads'" in err, r0
        assert "give each thread's calls their own name" in err, r0
    assert r0["sums"] == [3.0] and r0["after"] == 2.0, r0
    assert r1 == {"errors": [], "sums": [3.0], "after": 2.0}, r1


def test_unmatched_collective_times_out_alone_and_the_communicator_stays_usable() -> None:
    results = run_ranks(3, "negotiation_workers:unmatched_then_usable", timeout=60)
    for r, res in enumerate(results):
        assert res["type"] == "CommTimeoutError", (r, res)
        assert "still usable" in res["message"], (r, res)
        assert 0.9 < res["seconds"] < 10, (r, res)
        assert res["after"] == 3.0, (r, res)
    # Rank 1 learns what the others asked for instead.
    assert "everyone-else" in results[1]["message"], results[1]
    assert "rank 0" in results[1]["message"] or "ranks 0" in results[1]["message"]


@pytest.mark.parametrize("n", [64, 1 << 20], ids=["small", "large"])
def test_overlapping_out_is_refused(n: int) -> None:
    """allreduce(b[:-8], out=b[8:]) left 1,048,550 wrong elements: now it raises,
    writes nothing, and exact in-place calls still work."""
    results = run_ranks(2, "negotiation_workers:overlapping_out", n, timeout=60)
    for r, res in enumerate(results):
        for what in ("allreduce", "broadcast", "allgather", "allreduce_many"):
            assert "overlapping" in res[what] and "of its own" in res[what], (r, what, res)
        core = res["core_allreduce_many"]
        assert "tensor 0" in core and "overlap" in core and "of its own" in core, (r, res)
        assert res["untouched"], (r, res)
        assert res["in_place_ok"], (r, res)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_forked_child_cannot_use_the_parents_communicator(transport: str) -> None:
    results = run_ranks(
        2,
        "negotiation_workers:fork_child_uses_parent_comm",
        timeout=60,
        env={"PYTFCOMM_TRANSPORT": transport},
    )
    child = results[0]["child"]
    assert len(child) == 8, child
    for name, msg in child.items():
        assert msg.startswith("CommClosedError") and "forked child" in msg, (name, msg)
    for r, res in enumerate(results):
        assert res["totals"] == [3.0] * 50, (r, res["totals"])
        assert res["big_ok"], r
