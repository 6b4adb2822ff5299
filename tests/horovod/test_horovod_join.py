"""hvd.join: ranks that run out of data join; the others' all-reduces (raw and in the
distributed tape) go on with their contributions only, eager and in tf.function."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")


@pytest.mark.parametrize(("n", "mode"), [(2, "function"), (3, "eager")])
def test_uneven_steps_then_join(ranks, n: int, mode: str) -> None:
    out = ranks(n, "horovod_join_workers:uneven", mode, timeout=300)
    for r, o in enumerate(out):
        assert o["last"] == n - 1 and o["all_last"] == [n - 1] * n
        # step s: the gradient is the sum of (q + 1) over the active ranks q >= s
        want = [float(sum(q + 1 for q in range(s, n))) for s in range(r + 1)]
        assert o["grads"] == want
        assert o["w"] == [-sum(want)] * 3
        assert o["last2"] in range(1, n) and o["last2"] == out[0]["last2"]
        if r > 0:
            what = o["bcast_root_joined"]
            assert what.startswith("FailedPreconditionError") and "joined" in what, what
            # Rank 0 joined: the others' rows, none from it.
            active = range(1, n)
            assert o["gather_joined"] == [[float(q)] * 2 for q in active for _ in range(2)]
            assert o["a2a_joined"] == [[[q + 1.0] * 2 for q in active], [0] + [1] * (n - 1)]
            assert o["rs_joined"] == [[float(sum(q + 1 for q in active))] * 2] * 2
            assert o["bcast_ok"] == float(n - 1)
