"""CUDA tensors over the CUDA driver stand-in's device memory (tests only).

A pure-Python (ctypes) tensor type that speaks DLPack as CuPy and PyTorch
do, so pytfcomm's Python API can be driven on the stand-in
(tests/gpu/standin/cuda) without either library::

    fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])  # the file pytfcomm dlopen()s
    x = fake_cuda.from_numpy(np.arange(4, dtype=np.float32), device=0)
    out = fake_cuda.empty_like(x)
    comm.allreduce(x, out=out)
    out.numpy()

The library must be the one pytfcomm loads (same path), so that both share
one loaded copy and so one device-memory registry. The tensors' own work
(allocation, copies) runs on each device's legacy default stream, in the
device's primary context, which this module retains once and never releases.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

try:  # bfloat16 when ml_dtypes is importable
    import ml_dtypes

    bfloat16: np.dtype | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    bfloat16 = None

KDLCUDA = 2
CUDA_SUCCESS = 0
CU_EVENT_DISABLE_TIMING = 2
_LEGACY_STREAMS = (1, 2)  # DLPack: legacy default, per-thread default

_c = ctypes
_lib: ctypes.CDLL | None = None
_path: str | None = None
_ctx: dict[int, ctypes.c_void_p] = {}
_lock = threading.Lock()


class CudaError(RuntimeError):
    """A stand-in driver call failed; ``code`` is the CUresult."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what} failed: {error_name(code)} ({code})")
        self.code = code


# ---- the driver ----------------------------------------------------------

_PROTOS: dict[str, list[Any]] = {
    "cuInit": [_c.c_uint],
    "cuGetErrorName": [_c.c_int, _c.POINTER(_c.c_char_p)],
    "cuDevicePrimaryCtxRetain": [_c.POINTER(_c.c_void_p), _c.c_int],
    "cuCtxSetCurrent": [_c.c_void_p],
    "cuMemAlloc_v2": [_c.POINTER(_c.c_uint64), _c.c_size_t],
    "cuMemFree_v2": [_c.c_uint64],
    "cuMemcpyHtoD_v2": [_c.c_uint64, _c.c_void_p, _c.c_size_t],
    "cuMemcpyDtoH_v2": [_c.c_void_p, _c.c_uint64, _c.c_size_t],
    "cuMemcpyDtoDAsync_v2": [_c.c_uint64, _c.c_uint64, _c.c_size_t, _c.c_void_p],
    "cuStreamSynchronize": [_c.c_void_p],
    "cuEventCreate": [_c.POINTER(_c.c_void_p), _c.c_uint],
    "cuEventRecord": [_c.c_void_p, _c.c_void_p],
    "cuEventDestroy_v2": [_c.c_void_p],
    "cuStreamWaitEvent": [_c.c_void_p, _c.c_void_p, _c.c_uint],
    "cuStreamCreate": [_c.POINTER(_c.c_void_p), _c.c_uint],
}
CU_STREAM_NON_BLOCKING = 1


def load(path: str) -> ctypes.CDLL:
    """Bind the stand-in driver at ``path`` (idempotent) and cuInit it."""
    global _lib, _path
    with _lock:
        if _lib is not None:
            if str(path) != _path:
                raise RuntimeError(f"fake_cuda already uses {_path}, not {path}")
            return _lib
        lib = ctypes.CDLL(str(path))
        for name, args in _PROTOS.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = _c.c_int
        r = lib.cuInit(0)
        if r != CUDA_SUCCESS:
            raise CudaError("cuInit", r)
        _lib, _path = lib, str(path)
        return lib


def driver() -> ctypes.CDLL:
    if _lib is None:
        raise RuntimeError("call fake_cuda.load(path) first")
    return _lib


def error_name(code: int) -> str:
    s = _c.c_char_p()
    if _lib is not None and _lib.cuGetErrorName(code, _c.byref(s)) == CUDA_SUCCESS and s.value:
        return s.value.decode()
    return "unknown CUresult"


def check(r: int, what: str) -> None:
    if r != CUDA_SUCCESS:
        raise CudaError(what, r)


def use(device: int) -> ctypes.c_void_p:
    """Make ``device``'s primary context current on this thread; returns it."""
    lib = driver()
    with _lock:
        ctx = _ctx.get(device)
        if ctx is None:
            ctx = _c.c_void_p()
            check(lib.cuDevicePrimaryCtxRetain(_c.byref(ctx), device), "cuDevicePrimaryCtxRetain")
            _ctx[device] = ctx
    check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


# ---- DLPack structs (dlpack.h) -------------------------------------------


class DLDevice(_c.Structure):
    _fields_ = (("device_type", _c.c_int32), ("device_id", _c.c_int32))


class DLDataType(_c.Structure):
    _fields_ = (("code", _c.c_uint8), ("bits", _c.c_uint8), ("lanes", _c.c_uint16))


class DLTensor(_c.Structure):
    _fields_ = (
        ("data", _c.c_void_p),
        ("device", DLDevice),
        ("ndim", _c.c_int32),
        ("dtype", DLDataType),
        ("shape", _c.POINTER(_c.c_int64)),
        ("strides", _c.POINTER(_c.c_int64)),
        ("byte_offset", _c.c_uint64),
    )


class DLManagedTensor(_c.Structure):
    pass


_Deleter = _c.CFUNCTYPE(None, _c.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", _c.c_void_p),
    ("deleter", _Deleter),
]

_CapsuleDestructor = _c.CFUNCTYPE(None, _c.c_void_p)


def _capi(name: str, restype: Any, *argtypes: Any) -> Any:
    # A prototype of its own (ctypes.pythonapi.NAME is one shared object).
    return _c.PYFUNCTYPE(restype, *argtypes)((name, _c.pythonapi))


# Raw-pointer versions for the capsule destructor (the capsule is being
# freed: no Python reference to it may be taken there).
_raw_is_valid = _capi("PyCapsule_IsValid", _c.c_int, _c.c_void_p, _c.c_char_p)
_raw_get_pointer = _capi("PyCapsule_GetPointer", _c.c_void_p, _c.c_void_p, _c.c_char_p)
_capsule_new = _capi("PyCapsule_New", _c.py_object, _c.c_void_p, _c.c_char_p, _CapsuleDestructor)
_is_valid = _capi("PyCapsule_IsValid", _c.c_int, _c.py_object, _c.c_char_p)
_get_pointer = _capi("PyCapsule_GetPointer", _c.c_void_p, _c.py_object, _c.c_char_p)
_set_name = _capi("PyCapsule_SetName", _c.c_int, _c.py_object, _c.c_char_p)

_DLTENSOR = b"dltensor"
_USED = b"used_dltensor"  # module-level: PyCapsule_SetName keeps the pointer

# Exported tensors by DLManagedTensor address: what must live until the
# consumer's deleter call (the struct, its shape array, the Tensor).
_exports: dict[int, tuple[Any, ...]] = {}


@_Deleter
def _deleter(m: Any) -> None:
    _exports.pop(_c.addressof(m.contents), None)


@_CapsuleDestructor
def _capsule_destructor(cap: int) -> None:
    # Unconsumed (still "dltensor"): the producer frees it, per DLPack.
    if _raw_is_valid(cap, _DLTENSOR):
        ptr = _raw_get_pointer(cap, _DLTENSOR)
        if ptr:
            _deleter(_c.cast(ptr, _c.POINTER(DLManagedTensor)))


def _dl_dtype(dt: np.dtype) -> tuple[int, int]:
    if bfloat16 is not None and dt == bfloat16:
        return 4, 16
    codes = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
    if dt.kind not in codes:
        raise TypeError(f"no DLPack dtype for {dt}")
    return codes[dt.kind], dt.itemsize * 8


def _np_dtype(code: int, bits: int) -> np.dtype:
    if code == 4 and bits == 16:
        if bfloat16 is None:
            raise TypeError("bfloat16 needs ml_dtypes")
        return bfloat16
    kinds = {0: "int", 1: "uint", 2: "float", 5: "complex"}
    if code == 6 and bits == 8:
        return np.dtype(bool)
    if code not in kinds:
        raise TypeError(f"unsupported DLPack dtype code {code}")
    return np.dtype(f"{kinds[code]}{bits}")


# ---- tensors -------------------------------------------------------------


class _Memory:
    """A device allocation, freed when the last tensor using it goes."""

    def __init__(self, device: int, nbytes: int) -> None:
        use(device)
        p = _c.c_uint64()
        check(driver().cuMemAlloc_v2(_c.byref(p), max(nbytes, 1)), "cuMemAlloc_v2")
        self.device, self.ptr = device, p.value

    def __del__(self) -> None:
        lib = _lib
        if lib is not None and self.ptr:
            try:
                use(self.device)
                lib.cuMemFree_v2(self.ptr)
            except Exception:  # interpreter shutdown
                pass
            self.ptr = 0


class _Imported:
    """A DLManagedTensor taken from a capsule; its deleter runs on release."""

    def __init__(self, addr: int) -> None:
        self.addr = addr

    def __del__(self) -> None:
        m = DLManagedTensor.from_address(self.addr)
        if m.deleter:
            m.deleter(_c.cast(self.addr, _c.POINTER(DLManagedTensor)))


class Tensor:
    """A C-contiguous tensor in stand-in device memory (kDLCUDA)."""

    def __init__(self, shape: Any, dtype: Any, device: int, ptr: int, owner: Any) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.device = int(device)
        self.ptr = int(ptr)
        self._owner = owner  # keeps the memory alive

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"fake_cuda.Tensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDLCUDA, self.device

    def __dlpack__(
        self,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """An unversioned "dltensor" capsule (max_version is accepted, not used)."""
        if dl_device is not None and tuple(dl_device) != (KDLCUDA, self.device):
            raise BufferError(f"cannot export cuda:{self.device} to DLPack device {dl_device}")
        src = self
        if copy:
            src = empty_like(self)
            use(self.device)
            if self.nbytes:
                check(
                    driver().cuMemcpyDtoDAsync_v2(src.ptr, self.ptr, self.nbytes, None),
                    "cuMemcpyDtoDAsync_v2",
                )
        src._order_before(stream)
        return src._capsule()

    def _order_before(self, stream: int | None) -> None:
        """Make the consumer's ``stream`` wait for our work, which is on the device's
        current stream (:func:`set_current_stream`), as PyTorch and CuPy do: nothing when
        ``stream`` is that stream (1: the legacy default one)."""
        if stream is None or stream == -1:
            return
        if stream == 0:
            raise ValueError("stream=0 is ambiguous for CUDA in DLPack; pass 1 for the default")
        mine = _current.get(self.device, 0)
        if (stream in _LEGACY_STREAMS) if mine == 0 else (stream == mine):
            return
        lib = driver()
        use(self.device)
        ev = _c.c_void_p()
        check(lib.cuEventCreate(_c.byref(ev), CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            check(lib.cuEventRecord(ev, _c.c_void_p(mine or None)), "cuEventRecord")
            check(lib.cuStreamWaitEvent(_c.c_void_p(stream), ev, 0), "cuStreamWaitEvent")
        finally:
            lib.cuEventDestroy_v2(ev)

    def _capsule(self) -> Any:
        ndim = len(self.shape)
        shape = (_c.c_int64 * max(ndim, 1))(*self.shape)
        m = DLManagedTensor()
        t = m.dl_tensor
        t.data = self.ptr
        t.device = DLDevice(KDLCUDA, self.device)
        t.ndim = ndim
        code, bits = _dl_dtype(self.dtype)
        t.dtype = DLDataType(code, bits, 1)
        t.shape = _c.cast(shape, _c.POINTER(_c.c_int64))
        t.strides = None  # compact row-major
        t.byte_offset = 0
        m.manager_ctx = None
        m.deleter = _deleter
        addr = _c.addressof(m)
        _exports[addr] = (m, shape, self)
        return _capsule_new(addr, _DLTENSOR, _capsule_destructor)

    def numpy(self) -> np.ndarray:
        """A host copy (synchronous, after the device's legacy-stream work)."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            use(self.device)
            check(
                driver().cuMemcpyDtoH_v2(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH_v2"
            )
        return out


# ---- streams: a current stream per device, as PyTorch and CuPy have ------

_current: dict[int, int] = {}  # device -> stream handle; absent or 0: the legacy default


def new_stream(device: int = 0) -> int:
    """A new non-blocking stream on ``device`` (never destroyed: tests only)."""
    use(device)
    s = _c.c_void_p()
    check(driver().cuStreamCreate(_c.byref(s), CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    return int(s.value or 0)


def set_current_stream(device: int, stream: int) -> None:
    """Make ``stream`` (0: the legacy default) the device's current stream."""
    _current[device] = int(stream)


def copy_async(dst: Tensor, src: Tensor, stream: int) -> None:
    """dst[...] = src, enqueued on ``stream`` (the producer's pending work)."""
    if dst.nbytes != src.nbytes or dst.device != src.device:
        raise ValueError("copy_async needs tensors of the same size on the same device")
    use(dst.device)
    check(
        driver().cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, src.nbytes, _c.c_void_p(stream or None)),
        "cuMemcpyDtoDAsync_v2",
    )


def empty(shape: Any, dtype: Any, device: int = 0) -> Tensor:
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(d) for d in shape)
    dtype = np.dtype(dtype)
    mem = _Memory(device, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    return Tensor(shape, dtype, device, mem.ptr, mem)


def empty_like(x: Tensor, shape: Any = None) -> Tensor:
    return empty(x.shape if shape is None else shape, x.dtype, x.device)


def from_numpy(a: np.ndarray, device: int = 0) -> Tensor:
    a = np.ascontiguousarray(a)
    t = empty(a.shape, a.dtype, device)
    if a.nbytes:
        use(device)
        check(driver().cuMemcpyHtoD_v2(t.ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD_v2")
    return t


def from_dlpack(x: Any) -> Tensor:
    """Wrap a kDLCUDA DLPack tensor (an object with __dlpack__, or a capsule)."""
    if hasattr(x, "__dlpack__"):
        kind, _ = x.__dlpack_device__()
        if kind != KDLCUDA:
            raise BufferError(f"fake_cuda takes CUDA tensors only, not DLPack device {kind}")
        cap = x.__dlpack__(stream=1)
    else:
        cap = x
    if not _is_valid(cap, _DLTENSOR):
        raise BufferError("not an unconsumed 'dltensor' capsule")
    addr = _get_pointer(cap, _DLTENSOR)
    t = DLManagedTensor.from_address(addr).dl_tensor
    if t.device.device_type != KDLCUDA:
        raise BufferError(f"fake_cuda takes CUDA tensors only, not DLPack device {t.device}")
    if t.dtype.lanes != 1:
        raise BufferError("vector dtypes are not supported")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    expect = 1
    for i in reversed(range(t.ndim)):
        if t.strides and shape[i] > 1 and t.strides[i] != expect:
            raise BufferError("fake_cuda takes C-contiguous tensors only")
        expect *= shape[i]
    dtype = _np_dtype(t.dtype.code, t.dtype.bits)
    _set_name(cap, _USED)  # consumed: the capsule no longer frees it, we do
    return Tensor(shape, dtype, t.device.device_id, (t.data or 0) + t.byte_offset, _Imported(addr))
