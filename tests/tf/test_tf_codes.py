"""The TF ops take the core's names: every algorithm the core has (oneshot too), and an
unknown one is an InvalidArgument error that names the valid ones."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
from tf_setup import devices, tf_with_devices

tf = tf_with_devices()
import pytfcomm.tf as ptf  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def replicas():
    out = []
    for i, d in enumerate(devices(2)):
        with tf.device(d):
            out.append(tf.constant([1.0, float(i)]))
    return out


@pytest.mark.parametrize(
    "algorithm",
    ["auto", "ring", "hierarchical", "recursive_doubling", "oneshot", "halving_doubling"],
)
def test_every_core_algorithm_is_accepted(algorithm: str) -> None:
    out = ptf.allreduce(replicas(), algorithm=algorithm)
    np.testing.assert_array_equal(out[1].numpy(), [2.0, 1.0])


def test_an_unknown_algorithm_names_the_valid_ones() -> None:
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="oneshot"):
        ptf.allreduce(replicas(), algorithm="butterfly")
