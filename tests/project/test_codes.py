"""The core's code tables, exported by ``pytfcomm._core`` as enums: one source for the
dtype, reduce-op and algorithm names and wire values of C++, TF and Python."""

from __future__ import annotations

import numpy as np
import pytest

import pytfcomm
from pytfcomm import _core, _dtypes

# Wire values: they travel in frame headers and negotiation records.
WIRE = {
    _core.DType: [
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int32",
        "int64",
        "bool",
    ],
    _core.ReduceOp: ["sum", "mean", "min", "max", "prod"],
    _core.Algorithm: [
        "auto",
        "ring",
        "hierarchical",
        "recursive_doubling",
        "oneshot",
        "halving_doubling",
    ],
}


@pytest.mark.parametrize("enum", list(WIRE), ids=lambda e: e.__name__)
def test_enums_keep_their_wire_values(enum) -> None:
    assert {n: int(v) for n, v in enum.__members__.items()} == {
        n: i for i, n in enumerate(WIRE[enum])
    }


def test_python_maps_are_the_core_tables() -> None:
    assert _dtypes.OPS == {n: int(v) for n, v in _core.ReduceOp.__members__.items()}
    assert _dtypes.ALGORITHMS == {n: int(v) for n, v in _core.Algorithm.__members__.items()}
    assert _dtypes.SUPPORTED_DTYPES == tuple(_core.DType.__members__)
    for name, code in _core.DType.__members__.items():
        if name != "bfloat16":  # ml_dtypes' when installed
            assert _dtypes.dtype_code(np.dtype(name)) == int(code)


@pytest.fixture(scope="module")
def solo():
    with pytfcomm.init(rank=0, size=1) as comm:
        yield comm


@pytest.mark.parametrize(
    ("args", "what"),
    [((99, 0, 0), "dtype"), ((258, 0, 0), "dtype"), ((2, 5, 0), "op"), ((2, 0, 6), "algorithm")],
)
def test_a_bad_code_names_the_valid_ones(solo, args: tuple[int, int, int], what: str) -> None:
    x = np.ones(4, np.float32)
    with pytest.raises(pytfcomm.InvalidArgumentError, match=f"bad {what} code .*one of: "):
        solo._core.allreduce(x, np.empty_like(x), *args, -1.0)
