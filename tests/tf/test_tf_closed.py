"""TF entry points after the job's communicator closed raise; they never run locally (issue 13).

Before, a closed communicator counted as "no communicator": ``allreduce`` of
1 on rank 0 and 2 on rank 1 returned 1 and 2, and Horovod-style training went
on unsynchronised. Now every TF-facing call raises ``CommClosedError`` where
it is built (eagerly, or when a ``tf.function`` is traced), and a graph built
before the close fails when it runs (``tf.errors.FailedPreconditionError``
from the kernel, which finds the closed communicator by its handle).
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

ENTRY_POINTS = [
    "allreduce",
    "allgather",
    "broadcast",
    "reduce_scatter",
    "reduce_scatter_list",
    "alltoall",
    "allreduce_gradients",
    "gradient_tape",
    "keras_optimizer",
    "broadcast_variables",
    "average_gradients",
    "cross_device_ops",
    "strategy_reduce",
]


def _says_closed(outcome: dict) -> bool:
    return (
        outcome["raised"] in ("CommClosedError", "FailedPreconditionError")
        and "closed" in outcome["message"].lower()
    )


def _check(res: dict) -> None:
    before, after = res["before"], res["after"]
    for name in ENTRY_POINTS:
        for form in ("eager", "traced"):
            assert before[f"{form}:{name}"]["raised"] is None, (name, form, before)
    assert after["closed"]
    wrong = {k: v for k, v in after.items() if ":" in k and not _says_closed(v)}
    assert not wrong, f"calls that did not raise a 'closed' error: {wrong}"
    expected = {f"{f}:{n}" for n in ENTRY_POINTS for f in ("eager", "traced")}
    expected |= {"eager:new_strategy", "traced_after_drop:allreduce"}
    assert expected <= set(after), sorted(expected - set(after))


def test_after_close(ranks):
    for res in ranks(2, "closed_workers:after_close", "close", timeout=240):
        _check(res)


def test_after_a_deadline_closed_it(ranks):
    outs = ranks(2, "closed_workers:after_close", "deadline", timeout=240)
    # Rank 0 times out; rank 1, which comes 3 s late, has heard of it by then
    # (its background thread took the abort in): closed, and why.
    assert outs[0]["after"]["closed_by"]["raised"] == "CommTimeoutError", outs[0]
    late = outs[1]["after"]["closed_by"]
    assert late["raised"] in ("CommTimeoutError", "CommClosedError"), late
    assert "timed out" in late["message"], late
    for res in outs:
        _check(res)


def test_after_a_lost_peer_closed_it(ranks):
    outs = ranks(
        2,
        "closed_workers:after_close",
        "peer_exit",
        timeout=240,
        allow_failure=True,
        env={"PYTFCOMM_TIMEOUT": "30"},
    )
    ok, res = outs[0]
    assert ok, res
    assert res["after"]["closed_by"]["raised"] == "PeerLostError", res["after"]["closed_by"]
    _check(res)


def test_single_process_still_runs_locally(ranks):
    (out,) = ranks(1, "closed_workers:single_process", timeout=120)
    assert out == {"none": [2.0] * 3, "closed_size1": [2.0] * 3, "gradients": [[2.0] * 3]}
