"""Communicator.split: groups of ranks with their own communicator, over TCP and
shared memory; misuse raises on every rank and leaves the parent usable."""

from __future__ import annotations

import pytest
from _harness import run_ranks


@pytest.fixture(autouse=True, params=["tcp", "shm"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", request.param)
    return request.param


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("elems", [5, 1 << 20])  # one-shot and ring sizes
def test_groups_run_their_own_collectives(n: int, elems: int) -> None:
    out = run_ranks(n, "split_workers:groups", elems, timeout=240)
    for r, o in enumerate(out):
        group = [q for q in range(n) if q % 2 == r % 2]
        assert o["other_is_none"] is True
        assert o["sub"] == [group.index(r), len(group), group]
        assert o["group_sum"] == sum(q + 1 for q in group)
        assert o["all_sum"] == sum(q + 1 for q in range(n))
        assert o["bcast"] == float(group[-1])  # root is the group's last member
        assert o["gather"] == [q for q in group for _ in range(q + 1)]
        assert o["group_sum2"] == 2 * sum(q + 1 for q in group)
        assert o["solo"] == 1.0 and o["solo_others_none"] is True
        assert o["after_close"] == n
        assert o["group_closed"].startswith("CommClosedError"), o["group_closed"]


def test_misuse_raises_on_every_rank() -> None:
    out = run_ranks(3, "split_workers:disagree", timeout=120)
    for o in out:
        assert o["disagree"].startswith("MismatchError") and "same ranks" in o["disagree"]
        assert o["bad_rank"].startswith("InvalidArgumentError") and "not in [0, 3)" in o["bad_rank"]
        assert o["empty"].startswith("InvalidArgumentError")
        assert o["twice"].startswith("InvalidArgumentError")
        assert o["not_list"].startswith("InvalidArgumentError")
        assert o["after"] == 3.0 and o["whole"] == 3.0
