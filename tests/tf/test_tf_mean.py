"""MEAN through pytfcomm's strategy means what it means in TF (issue 14 item 4).

TF divides the sum (in the value's dtype) by the number of replicas with
``/``: the MEAN of integers is a float (float64 for int32/int64), and a
float16 sum that overflows stays ``inf``. The engine's own mean keeps the
dtype (an integer mean truncates) and divides before rounding; through the
strategy every path (``strategy.reduce``, ``extended.reduce_to``,
``batch_reduce_to``, ``ReplicaContext.all_reduce``) must give TF's answer on
every worker. The NumPy API keeps the engine's rule (docs/tensorflow.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from mean_workers import replica_values

pytest.importorskip("tensorflow")

PATHS = ("reduce", "reduce_to", "batch", "replica")


def _tf_mean(name: str, replicas: int) -> np.ndarray:
    vals = [replica_values(r)[name] for r in range(replicas)]
    total = vals[0]
    for v in vals[1:]:
        with np.errstate(over="ignore"):
            total = total + v  # in the dtype, replica order
    if name.startswith("int"):
        return total / replicas  # float64, like tf.truediv
    with np.errstate(over="ignore"):
        return total / total.dtype.type(replicas)


@pytest.mark.parametrize(("workers", "ndev"), [(2, 1), (3, 1), (2, 2)])
def test_mean_matches_tf(ranks, workers, ndev):
    outs = ranks(workers, "mean_workers:mean", ndev, timeout=180)
    replicas = workers * ndev
    for r, o in enumerate(outs):
        for name in replica_values(0):
            want = _tf_mean(name, replicas)
            want_dtype = "float64" if name.startswith("int") else name
            for path in PATHS:
                dtype, got = o[f"{path}/{name}"]
                assert dtype == want_dtype, (r, path, name, dtype)
                for g in got if isinstance(got, list) else [got]:
                    np.testing.assert_allclose(
                        g, want, rtol=1e-6, err_msg=f"worker {r} {path} {name}"
                    )
        assert np.isinf(o["reduce/float16"][1][0]), "a float16 sum that overflows is inf in TF"
