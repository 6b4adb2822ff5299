"""Horovod's process sets in pytfcomm.horovod.tensorflow: every collective restricted
to even or odd ranks (sub-communicators), Horovod's errors, dynamic add/remove."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("n", [3, 4])
def test_process_sets(ranks, n: int, mode: str) -> None:
    out = ranks(n, "horovod_psets_workers:collectives", mode, timeout=300)
    evens = list(range(0, n, 2))
    for r, o in enumerate(out):
        group = [q for q in range(n) if q % 2 == r % 2]
        assert o["ids"] == [1, 2]
        assert o["set"] == [len(group), group.index(r), True, False, None]
        assert o["ops"] == [len(group), 1, 0]
        assert o["objects"] == group
        assert o["bcast_obj"] == {"r": group[-1]}
        assert o["var"] == [float(group[0])] * 3
        if r in evens:
            assert o["tape"] == pytest.approx(2.0 * sum(evens) / len(evens))
        else:
            assert o["tape"] == pytest.approx(2.0 * r)
        assert o["off_set"].startswith("InvalidArgumentError") and "not in" in o["off_set"]
        assert o["root_off_set"].startswith("InvalidArgumentError"), o["root_off_set"]
        assert o["fake"].startswith("ValueError") and "not registered" in o["fake"]
        assert o["dup"].startswith("ValueError") and "duplicate" in o["dup"]
        assert o["fake_size_op"].startswith("ValueError")
        assert o["pair_id"] == 3
        if r in (0, 1):
            assert o["pair_sum"] == 1.0
        assert o["removed"] is True and o["removed_again"] is False
        assert o["pair_after"] == [None, None]
        assert o["global_after"] == float(n)
        assert o["ids_after_shutdown"] == [None, None]
