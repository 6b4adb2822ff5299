"""TF ops whose workers disagree (count, dtype, shape, op, broadcast root, all-gather
rows or dtype, a fused list in another order) fail on every worker with
tf.errors.FailedPreconditionError (kMismatch's TF status, docs/errors.md), and the next
ops on the same communicator work: one session survives all of them, as with Horovod."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")


@pytest.mark.parametrize(
    ("n_ranks", "n", "transport"),
    [(2, 64, "auto"), (3, 64, "tcp"), (2, 1 << 20, "shm"), (3, 1 << 20, "auto")],
    ids=["2-oneshot-auto", "3-oneshot-tcp", "2-large-shm", "3-large-auto"],
)
def test_tf_mismatches_leave_the_communicator_usable(ranks, n_ranks, n, transport):
    outs = ranks(n_ranks, "tf_mismatch_workers:session", n, transport, timeout=150)
    for r, o in enumerate(outs):
        for case, res in o.items():
            assert res["type"] == "FailedPreconditionError", (r, case, res)
            assert "disagree" in res["message"], (r, case, res)
            assert not res["closed"], (r, case, res)
            assert res["after"] is None, (r, case, res)
