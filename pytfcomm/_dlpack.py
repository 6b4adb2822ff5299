"""DLPack tensors in the collectives (CuPy arrays, PyTorch tensors, ...).

CPU tensors go through the NumPy path as zero-copy views. CUDA tensors go to
the core's GPU communicator: NCCL when every rank has it, else staged
through pinned host memory over the communicator's own transport
(``init(transport="tcp"|"shm")`` or ``PYTFCOMM_GPU_TRANSPORT=staged`` ask for
staging; ``PYTFCOMM_GPU_TRANSPORT=nccl`` insists on NCCL). See docs/gpu.md.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from ._comm import Communicator

# DLPack device types (dlpack.h).
_CPU, _CUDA, _CUDA_HOST, _CUDA_MANAGED = 1, 2, 3, 13
# Backend codes of _core.GpuCommunicator (csrc/gpu/gpu_params.h).
BACKEND_AUTO, BACKEND_NCCL, BACKEND_STAGED = 0, 1, 2


def is_dlpack(x: object) -> bool:
    """True for a non-NumPy object that speaks DLPack (``__dlpack__`` + ``__dlpack_device__``)."""
    return (
        not isinstance(x, np.ndarray)
        and hasattr(x, "__dlpack__")
        and hasattr(x, "__dlpack_device__")
    )


def _device(x: Any, what: str) -> tuple[int, int]:
    try:
        kind, index = x.__dlpack_device__()
        return int(kind), int(index)
    except Exception as exc:
        raise InvalidArgumentError(f"{what}.__dlpack_device__() failed: {exc}") from exc


def _is_cuda(x: Any, what: str) -> bool:
    kind, _ = _device(x, what)
    if kind in (_CPU, _CUDA_HOST):
        return False
    if kind in (_CUDA, _CUDA_MANAGED):
        return True
    raise InvalidArgumentError(
        f"{what} is on DLPack device type {kind}; pytfcomm takes CPU and CUDA tensors only"
    )


def nccl_candidates() -> list[str]:
    """``libnccl.so.2`` of the nvidia-nccl-cu13 / -cu12 wheels importable here, in order."""
    found: list[str] = []
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec else []
    roots += [os.path.join(p, "nvidia", "nccl") for p in sys.path if p]
    for root in roots:
        lib = os.path.join(root, "lib", "libnccl.so.2")
        if os.path.isfile(lib) and lib not in found:
            found.append(lib)
    return found


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def _empty_like(x: Any, shape: tuple[int, ...]) -> Any:
    """A new CUDA tensor of ``shape`` from x's own library (PyTorch or CuPy)."""
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        import torch

        return torch.empty(shape, dtype=x.dtype, device=x.device)
    if mod == "cupy":
        import cupy

        with x.device:
            return cupy.empty(shape, dtype=x.dtype)
    raise InvalidArgumentError(
        f"cannot allocate a result like a {type(x).__module__}.{type(x).__name__} on the GPU; "
        "pass out= (any CUDA DLPack tensor of the result's shape and dtype)"
    )


def _like(x: Any, result: np.ndarray) -> Any:
    """``result`` as x's library type when that library has ``from_dlpack`` (zero copy)."""
    mod = sys.modules.get(type(x).__module__.split(".")[0])
    from_dlpack = getattr(mod, "from_dlpack", None)
    return from_dlpack(result) if callable(from_dlpack) else result


def _numpy_view(x: Any, what: str) -> np.ndarray:
    try:
        return np.from_dlpack(x)
    except Exception as exc:
        raise InvalidArgumentError(f"{what} could not be viewed through DLPack: {exc}") from exc


def collective(
    comm: Communicator,
    name: str,
    x: Any,
    out: Any,
    result_shape: tuple[int, ...],
    gpu_args: tuple[Any, ...],
    cpu_kwargs: dict[str, Any],
    timeout: float,
    tag: int,
) -> Any:
    """Run collective ``name`` on DLPack tensor ``x`` (and ``out``), on CPU or GPU."""
    if not _is_cuda(x, "input"):
        host_out = isinstance(out, np.ndarray) or (is_dlpack(out) and not _is_cuda(out, "out"))
        if out is not None and not host_out:
            raise InvalidArgumentError(
                "the input is in host memory: out must be a host (CPU) tensor too, not on a GPU"
            )
        xa = _numpy_view(x, "input")
        oa = None if out is None else _numpy_view(out, "out")
        result = getattr(comm, name)(xa, out=oa, **cpu_kwargs)
        return out if out is not None else _like(x, result)
    gpu = comm._gpu or comm.gpu_communicator()  # a build without CUDA says so here
    if out is None:
        out = _empty_like(x, result_shape)
    elif out is x and result_shape == tuple(x.shape):
        pass  # in place: x was checked just now (CUDA, the result's shape)
    else:
        if not is_dlpack(out) or not _is_cuda(out, "out"):
            raise InvalidArgumentError("the input is on a GPU: out must be a CUDA tensor too")
        if _shape(out) != result_shape:
            raise InvalidArgumentError(
                f"out has shape {_shape(out)} but the result has {result_shape}"
            )
    if timeout <= 0:  # no timeout= on the call: the communicator's (init(timeout=))
        timeout = getattr(comm, "_timeout_s", -1.0)
    getattr(gpu, name)(x, out, *gpu_args, comm.gpu_backend, timeout, tag)
    return out
