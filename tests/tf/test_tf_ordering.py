"""TF collectives meet across workers whatever order each worker issues them in:
several threads, tf.compat.v1 graphs, tf.cond, tf.while_loop, Keras 3 mixed
precision and steps_per_execution (docs/negotiation.md). Each case on 2 and 3
workers; results are checked value by value, so a mix-up cannot pass."""

from __future__ import annotations

import numpy as np
import pytest
from _harness import free_port

pytest.importorskip("tensorflow")

WORKERS = [2, 3]
ENV = {"PYTFCOMM_TIMEOUT": "60"}


@pytest.mark.parametrize("n", WORKERS)
def test_two_functions_in_two_threads(ranks, n):
    outs = ranks(n, "tf_order_workers:two_functions_concurrently", 60, timeout=300, env=ENV)
    for r, o in enumerate(outs):
        assert o["n_wrong"] == 0, (r, o["wrong"])


@pytest.mark.parametrize("threads", [4, 1])
@pytest.mark.parametrize("n", WORKERS)
def test_graph_ops_issued_in_opposite_orders(ranks, n, threads):
    outs = ranks(n, "tf_order_workers:graph_reversed", threads, timeout=300, env=ENV)
    for r, o in enumerate(outs):
        assert o["ok"], (r, o["results"])


@pytest.mark.parametrize("n", WORKERS)
def test_cond_and_while_loop(ranks, n):
    outs = ranks(n, "tf_order_workers:cond_and_while", 12, timeout=300, env=ENV)
    for r, o in enumerate(outs):
        assert o["wrong"] == [], (r, o["wrong"])


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("n", WORKERS)
def test_reduce_scatter_and_alltoall_in_control_flow(ranks, n, transport):
    """Both in a tf.cond, in 4 parallel iterations of a tf.while_loop (2 MiB per
    rank past the one-shot size, and small), and in a v1 graph in opposite orders."""
    env = {**ENV, "PYTFCOMM_TRANSPORT": transport}
    outs = ranks(n, "tf_order_workers:scatter_in_control_flow", 4, 1 << 17, timeout=300, env=env)
    for r, o in enumerate(outs):
        assert o["n_wrong"] == 0, (r, o["wrong"])


@pytest.mark.parametrize("case", ["mixed_float16", "steps_per_execution"])
@pytest.mark.parametrize("n", WORKERS)
def test_keras_fit(ranks, n, case):
    """These ran 1-9 steps, then failed with "ranks disagree" or hung."""
    tf_ports = [free_port() for _ in range(n)]
    outs = ranks(n, "tf_order_workers:keras_fit", tf_ports, case, timeout=400, env=ENV)
    for o in outs:
        assert o["finite"], o
        # Every worker ends with the same weights.
        np.testing.assert_array_equal(o["checksum"], outs[0]["checksum"])
    if case == "mixed_float16":
        assert outs[0]["optimizer"] == "LossScaleOptimizer", outs[0]
    assert outs[0]["loss"][-1] < outs[0]["loss"][0], outs[0]["loss"]


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("n", [16, 300_000], ids=["small", "large"])
def test_one_function_from_two_threads_is_refused(ranks, n, transport):
    """The same tf.function called from two threads at once: its second execution
    gets InvalidArgumentError saying what to do, the first still gets the right sum,
    and the op's next execution pairs rightly on both workers."""
    r0, r1 = ranks(
        2, "tf_order_workers:one_function_from_two_threads", transport, n, timeout=300, env=ENV
    )
    assert r0["waiting"], r0
    assert len(r0["errors"]) == 1, r0
    err = r0["errors"][0]
    assert err.startswith("InvalidArgumentError"), r0
    assert "another execution of it still waits" in err, r0
    assert "give each thread its own tf.function" in err, r0
    assert r0["sums"] == {"warm": 3.0, "a": 11.0, "after": 3.0}, r0
    assert r1 == {"sums": {"warm": 3.0, "a": 11.0, "after": 3.0}, "errors": [], "waiting": True}
