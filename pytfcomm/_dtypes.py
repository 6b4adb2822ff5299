"""Mapping between NumPy dtypes and the core's dtype and op codes."""

from __future__ import annotations

import numpy as np

from . import _core
from .errors import InvalidArgumentError

# The core's tables (csrc/common/dtype.h, algorithm.h), by name. A DType's
# name is its NumPy dtype's name (bfloat16: the ml_dtypes type TF uses), so
# the NumPy side of the mapping is np.dtype(name) for each.
_BY_NAME = {name: int(code) for name, code in _core.DType.__members__.items()}
OPS = {name: int(code) for name, code in _core.ReduceOp.__members__.items()}
ALGORITHMS = {name: int(code) for name, code in _core.Algorithm.__members__.items()}

SUPPORTED_DTYPES = tuple(_BY_NAME)


# dtype.name costs microseconds in NumPy 2; collectives of small arrays must
# not pay it on every call, so codes are cached per dtype object.
_CODE_CACHE: dict[np.dtype, int] = {}


def dtype_code(dtype: np.dtype) -> int:
    """The core's code for ``dtype``; bfloat16 is the ml_dtypes type TF uses."""
    code = _CODE_CACHE.get(dtype)
    if code is not None:
        return code
    dt = np.dtype(dtype)
    code = _BY_NAME.get(dt.name)
    if code is None or (dt.byteorder == ">" and dt.itemsize > 1):
        raise InvalidArgumentError(
            f"dtype {dt.name}{' (big-endian)' if dt.byteorder == '>' else ''} is not supported; "
            f"use one of {', '.join(SUPPORTED_DTYPES)} in native byte order"
        )
    _CODE_CACHE[dtype] = code
    if isinstance(dtype, np.dtype):
        _core.register_fast_dtype(dtype, code)  # the C++ fast path matches this object
    return code


for _name in _BY_NAME:
    try:
        dtype_code(np.dtype(_name))  # the built-in dtypes; bfloat16 once ml_dtypes is there
    except TypeError:
        pass


def op_code(op: str) -> int:
    """The core's code for a reduction name."""
    code = OPS.get(op) if isinstance(op, str) else None
    if code is not None:
        return code
    if not isinstance(op, str) or op.lower() not in OPS:
        raise InvalidArgumentError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    return OPS[op.lower()]


def algorithm_code(algorithm: str) -> int:
    """The core's code for an all-reduce algorithm name."""
    code = ALGORITHMS.get(algorithm) if isinstance(algorithm, str) else None
    if code is not None:
        return code
    if not isinstance(algorithm, str) or algorithm.lower() not in ALGORITHMS:
        raise InvalidArgumentError(
            f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}"
        )
    return ALGORITHMS[algorithm.lower()]
