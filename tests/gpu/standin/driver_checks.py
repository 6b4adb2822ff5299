"""Checks of the CUDA driver stand-in, each run in a fresh process by
tests/gpu/test_standin_driver.py (the stand-in reads its environment once, at
cuInit): ``python driver_checks.py NAME LIBCUDA [ARG...]``. A check returns
normally or raises AssertionError."""

from __future__ import annotations

import ctypes as c
import os
import sys
import time
from typing import Any

import fake_cuda as fc
import numpy as np

SUCCESS, INVALID_VALUE, NO_DEVICE, INVALID_IMAGE = 0, 1, 100, 200
INVALID_CONTEXT, INVALID_HANDLE, NOT_FOUND, NOT_READY, ILLEGAL_ADDRESS = 201, 400, 500, 600, 700
NON_BLOCKING = 1

L: Any = None  # the library


def setup(lib: str) -> Any:
    global L
    L = c.CDLL(lib)
    L.cuMemcpyHtoDAsync_v2.argtypes = [c.c_uint64, c.c_void_p, c.c_size_t, c.c_void_p]
    L.cuMemcpyDtoHAsync_v2.argtypes = [c.c_void_p, c.c_uint64, c.c_size_t, c.c_void_p]
    L.cuMemcpyDtoDAsync_v2.argtypes = [c.c_uint64, c.c_uint64, c.c_size_t, c.c_void_p]
    L.cuStreamQuery.argtypes = [c.c_void_p]
    L.cuStreamSynchronize.argtypes = [c.c_void_p]
    L.cuStreamDestroy_v2.argtypes = [c.c_void_p]
    L.cuEventRecord.argtypes = [c.c_void_p, c.c_void_p]
    L.cuEventQuery.argtypes = [c.c_void_p]
    L.cuStreamWaitEvent.argtypes = [c.c_void_p, c.c_void_p, c.c_uint]
    L.cuPointerGetAttribute.argtypes = [c.c_void_p, c.c_int, c.c_uint64]
    L.ptcsi_is_device_range.argtypes = [c.c_uint64, c.c_size_t]
    L.cuMemFree_v2.argtypes = [c.c_uint64]
    L.cuMemcpyDtoH_v2.argtypes = [c.c_void_p, c.c_uint64, c.c_size_t]
    L.cuLaunchKernel.argtypes = [c.c_void_p] + [c.c_uint] * 7 + [c.c_void_p] * 3
    fc.load(lib)
    fc.use(0)
    return L


def ok(r: int, what: str = "") -> None:
    assert r == SUCCESS, f"{what}: CUresult {r}"


def stream(flags: int = NON_BLOCKING) -> c.c_void_p:
    s = c.c_void_p()
    ok(L.cuStreamCreate(c.byref(s), flags), "cuStreamCreate")
    return s


def event() -> c.c_void_p:
    e = c.c_void_p()
    ok(L.cuEventCreate(c.byref(e), 2), "cuEventCreate")
    return e


def pinned(n: int) -> np.ndarray:
    p = c.c_void_p()
    ok(L.cuMemHostAlloc(c.byref(p), c.c_size_t(n), 1), "cuMemHostAlloc")
    return np.ctypeslib.as_array(c.cast(p, c.POINTER(c.c_uint8)), (n,))


def wait_for(fn: Any, want: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while (r := fn()) == NOT_READY and time.monotonic() < deadline:
        time.sleep(0.001)
    assert r == want, f"got {r}, want {want}"


# ---- checks -------------------------------------------------------------


def order(_: list[str]) -> None:
    """Asynchronous completion and in-order execution (PTCSI_CUDA_DELAY_US set)."""
    s = stream()
    dev = fc.empty(64, np.uint8)
    src, dst = pinned(64), pinned(256)
    src[:] = 1
    ok(L.cuMemcpyHtoDAsync_v2(dev.ptr, src.ctypes.data, 64, s))
    assert L.cuStreamQuery(s) == NOT_READY, "the copy completed before the call returned"
    for k in range(3):  # read back, then overwrite: each read sees the write before it
        ok(L.cuMemcpyDtoHAsync_v2(dst.ctypes.data + 64 * k, dev.ptr, 64, s))
        src2 = pinned(64)
        src2[:] = k + 2
        ok(L.cuMemcpyHtoDAsync_v2(dev.ptr, src2.ctypes.data, 64, s))
    ok(L.cuMemcpyDtoHAsync_v2(dst.ctypes.data + 192, dev.ptr, 64, s))
    e = event()
    ok(L.cuEventRecord(e, s))
    assert L.cuEventQuery(e) == NOT_READY
    wait_for(lambda: L.cuEventQuery(e), SUCCESS)
    assert L.cuStreamQuery(s) == SUCCESS
    assert list(dst.reshape(4, 64)[:, 0]) == [1, 2, 3, 4], dst.reshape(4, 64)[:, 0]
    assert (dst.reshape(4, 64) == dst.reshape(4, 64)[:, :1]).all()
    ok(L.cuStreamDestroy_v2(s))
    assert L.cuStreamQuery(s) == INVALID_HANDLE
    assert L.cuEventQuery(e) == SUCCESS  # events outlive their stream


def cross_stream(_: list[str]) -> None:
    """cuStreamWaitEvent orders another stream; legacy / blocking implicit sync."""
    a, b = stream(), stream()
    dev = fc.empty(16, np.uint8)
    src, dst = pinned(16), pinned(16)
    for k in range(1, 4):  # three delayed writes on a; the last one leaves 3
        s = pinned(16)
        s[:] = k
        ok(L.cuMemcpyHtoDAsync_v2(dev.ptr, s.ctypes.data, 16, a))
    e = event()
    ok(L.cuEventRecord(e, a))
    ok(L.cuStreamWaitEvent(b, e, 0))
    ok(L.cuMemcpyDtoHAsync_v2(dst.ctypes.data, dev.ptr, 16, b))
    assert L.cuStreamQuery(b) == NOT_READY
    ok(L.cuStreamSynchronize(b))
    assert L.cuEventQuery(e) == SUCCESS, "b ran before the event it waits for"
    assert (dst == 3).all(), dst
    # A never-recorded event: complete, and waiting on it is a no-op.
    e2 = event()
    assert L.cuEventQuery(e2) == SUCCESS
    ok(L.cuStreamWaitEvent(b, e2, 0))
    ok(L.cuStreamSynchronize(b))
    # A blocking stream and the legacy stream synchronise implicitly: the
    # synchronous copy (legacy) sees the delayed write of the blocking stream.
    blocking = stream(0)
    src[:] = 9
    ok(L.cuMemcpyHtoDAsync_v2(dev.ptr, src.ctypes.data, 16, blocking))
    assert (dev.numpy() == 9).all()
    # ... a non-blocking one does not (its copies are still pending here).
    src[:] = 5
    slow = fc.empty(16, np.uint8)
    for _ in range(5):  # ~100 ms of work on b that a waits for, then a writes 5
        ok(L.cuMemcpyHtoDAsync_v2(slow.ptr, src.ctypes.data, 16, b))
    e3 = event()
    ok(L.cuEventRecord(e3, b))
    ok(L.cuStreamWaitEvent(a, e3, 0))
    ok(L.cuMemcpyHtoDAsync_v2(dev.ptr, src.ctypes.data, 16, a))
    assert (dev.numpy() == 9).all(), "the legacy stream waited for a non-blocking stream"
    ok(L.cuStreamSynchronize(a))
    assert (dev.numpy() == 5).all()


def fail_copy(_: list[str]) -> None:
    """PTCSI_CUDA_FAIL_COPY=3: the third async copy fails, sticky on its stream only."""
    s, other = stream(), stream()
    dev = fc.empty(8, np.uint8)
    h = pinned(8)
    ok(L.cuMemcpyHtoDAsync_v2(dev.ptr, h.ctypes.data, 8, s))  # 1
    ok(L.cuMemcpyDtoHAsync_v2(h.ctypes.data, dev.ptr, 8, s))  # 2
    before = event()
    ok(L.cuEventRecord(before, s))
    ok(L.cuMemcpyDtoDAsync_v2(dev.ptr, dev.ptr, 8, s))  # 3: fails when it runs
    after = event()
    ok(L.cuEventRecord(after, s))
    assert L.cuStreamSynchronize(s) == ILLEGAL_ADDRESS
    assert L.cuStreamQuery(s) == ILLEGAL_ADDRESS
    assert L.cuEventQuery(before) == SUCCESS
    assert L.cuEventQuery(after) == ILLEGAL_ADDRESS
    ok(L.cuMemcpyHtoDAsync_v2(dev.ptr, h.ctypes.data, 8, s))  # enqueued, then dropped
    later = event()
    ok(L.cuEventRecord(later, s))
    wait_for(lambda: L.cuEventQuery(later), ILLEGAL_ADDRESS)
    ok(L.cuMemcpyDtoHAsync_v2(h.ctypes.data, dev.ptr, 8, other))  # 5: fine elsewhere
    ok(L.cuStreamSynchronize(other))


def bad_range(_: list[str]) -> None:
    """Device ranges outside live allocations fault; pointer attributes."""
    s = stream()
    t = fc.empty(1024, np.uint8)
    h = pinned(2048)
    ordinal = c.c_int(-1)
    ok(L.cuPointerGetAttribute(c.byref(ordinal), 9, t.ptr + 1023))  # DEVICE_ORDINAL
    assert ordinal.value == 0
    assert L.cuPointerGetAttribute(c.byref(ordinal), 9, t.ptr + 1024) == INVALID_VALUE
    assert L.cuPointerGetAttribute(c.byref(ordinal), 9, h.ctypes.data) == INVALID_VALUE
    t1 = fc.empty(4, np.uint8, device=1)
    ok(L.cuPointerGetAttribute(c.byref(ordinal), 9, t1.ptr))
    assert ordinal.value == 1
    assert L.ptcsi_is_device_range(t.ptr, 1024) == 1
    assert L.ptcsi_is_device_range(t.ptr + 1, 1024) == 0
    assert L.ptcsi_is_device_range(h.ctypes.data, 1) == 0
    ok(L.cuMemcpyDtoHAsync_v2(h.ctypes.data, t.ptr + 1000, 100, s))  # returns at once
    assert L.cuStreamSynchronize(s) == ILLEGAL_ADDRESS
    s2 = stream()
    stale = t.ptr
    del t  # freed
    ok(L.cuMemcpyHtoDAsync_v2(stale, h.ctypes.data, 16, s2))
    assert L.cuStreamSynchronize(s2) == ILLEGAL_ADDRESS
    # Synchronous copies check at the call, as the real driver does.
    assert L.cuMemcpyDtoH_v2(h.ctypes.data, stale, 16) == INVALID_VALUE


def _trunc_div(x: int, d: int, bits: int, signed: bool) -> int:
    q = abs(x) // abs(d)
    q = -q if (x < 0) != (d < 0) else q
    q &= (1 << bits) - 1
    return q - (1 << bits) if signed and q >= 1 << (bits - 1) else q


def _reference(a: np.ndarray, d: int, name: str) -> np.ndarray:
    if name in ("f16", "bf16"):
        return (a.astype(np.float32) / np.float32(d)).astype(a.dtype)
    if name in ("f32", "f64"):
        return a / a.dtype.type(d)
    bits = a.dtype.itemsize * 8
    dd = d if name in ("i32", "i64") else int(np.int64(d).astype(np.int32))  # D = int
    vals = [_trunc_div(int(x), dd, bits, a.dtype.kind == "i") for x in a]
    return np.array(vals, dtype=a.dtype)


def kernels(args: list[str]) -> None:
    """Every kernel of kernels.cu against NumPy, from pytfcomm's fatbin."""
    image = open(args[0], "rb").read()
    buf = c.create_string_buffer(image, len(image))
    mod = c.c_void_p()
    ok(L.cuModuleLoadData(c.byref(mod), buf), "cuModuleLoadData")
    assert L.cuModuleLoadData(c.byref(c.c_void_p()), c.c_void_p()) == INVALID_VALUE
    assert L.cuModuleLoadData(c.byref(c.c_void_p()), b"not a fatbin at all") == INVALID_IMAGE
    f = c.c_void_p()
    assert L.cuModuleGetFunction(c.byref(f), mod, b"ptc_divide_f128") == NOT_FOUND
    s = stream()
    rng = np.random.default_rng(7)
    types = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i8": np.int8}
    types.update({"u8": np.uint8, "i32": np.int32, "i64": np.int64})
    if fc.bfloat16 is not None:
        types["bf16"] = fc.bfloat16
    n = 4096
    for name, dt in types.items():
        ok(L.cuModuleGetFunction(c.byref(f), mod, f"ptc_divide_{name}".encode()), name)
        dt = np.dtype(dt)
        for d in (1, 2, 3, 7, 12, -3, -1):
            if dt.kind == "f" or name == "bf16":
                a = (rng.standard_normal(n) * rng.choice([1e-6, 1e-3, 1.0, 300.0], n)).astype(dt)
                a[:4] = [0.0, -0.0, np.inf, -np.inf]
            else:
                info = np.iinfo(dt)
                a = rng.integers(info.min, info.max, n, endpoint=True, dtype=dt)
                a[:2] = [info.min, info.max]
            t = fc.from_numpy(a)
            p, cnt, div = c.c_uint64(t.ptr), c.c_uint64(n), c.c_int64(d)
            params = (c.c_void_p * 3)(*[c.addressof(v) for v in (p, cnt, div)])
            ok(L.cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, s, params, None), name)
            div.value, cnt.value = 1, 0  # the launch copied the values already
            ok(L.cuStreamSynchronize(s))
            got, want = t.numpy(), _reference(a, d, name)
            same = got.view(f"u{dt.itemsize}") == want.view(f"u{dt.itemsize}")
            assert same.all(), (
                f"{name} / {d}: {a[~same][:4]} -> {got[~same][:4]} not {want[~same][:4]}"
            )
    ok(L.cuModuleGetFunction(c.byref(f), mod, b"ptc_bool_normalize"))
    a = rng.integers(0, 256, 1000, dtype=np.uint8)
    a[:3] = [0, 1, 255]
    t = fc.from_numpy(a)
    p, cnt = c.c_uint64(t.ptr), c.c_uint64(1000)
    params = (c.c_void_p * 2)(c.addressof(p), c.addressof(cnt))
    ok(L.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, params, None))
    ok(L.cuStreamSynchronize(s))
    assert (t.numpy() == (a != 0)).all()
    # A kernel over a range past the allocation faults, sticky on its stream.
    cnt.value = 1001
    ok(L.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, params, None))
    assert L.cuStreamSynchronize(s) == ILLEGAL_ADDRESS
    assert L.cuLaunchKernel(f, 0, 1, 1, 256, 1, 1, 0, stream(), params, None) == INVALID_VALUE


def visible(args: list[str]) -> None:
    """CUDA_VISIBLE_DEVICES / PTCSI_GPUS: args = expected names (or 'none')."""
    lib = c.CDLL(sys.argv[2])
    r = lib.cuInit(0)
    if args == ["none"]:
        assert r == NO_DEVICE, r
        return
    ok(r, "cuInit")
    n = c.c_int()
    ok(lib.cuDeviceGetCount(c.byref(n)))
    names = []
    for i in range(n.value):
        buf = c.create_string_buffer(64)
        ok(lib.cuDeviceGetName(buf, 64, i))
        names.append(buf.value.decode().rsplit(" ", 1)[1])
    assert names == args, (names, args)
    assert lib.cuDeviceGetName(c.create_string_buffer(64), 64, n.value) == 101  # invalid device


def dlpack(_: list[str]) -> None:
    """fake_cuda's DLPack export: capsule fields, lifetime, stream handoff."""
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = fc.from_numpy(a, device=1)
    assert t.__dlpack_device__() == (2, 1) and t.nbytes == 48 and t.shape == (3, 4)
    cap = t.__dlpack__(stream=None)
    get = c.pythonapi.PyCapsule_GetPointer
    get.argtypes, get.restype = [c.py_object, c.c_char_p], c.c_void_p
    m = fc.DLManagedTensor.from_address(get(cap, b"dltensor"))
    dl = m.dl_tensor
    assert dl.data == t.ptr and (dl.device.device_type, dl.device.device_id) == (2, 1)
    assert dl.ndim == 2 and [dl.shape[0], dl.shape[1]] == [3, 4] and not dl.strides
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (0, 32, 1) and dl.byte_offset == 0
    assert m.deleter
    assert len(fc._exports) == 1
    del cap  # never consumed: the capsule's destructor calls the deleter
    assert len(fc._exports) == 0
    # Consumed: renamed to used_dltensor, the consumer calls the deleter.
    u = fc.from_dlpack(t.__dlpack__())
    assert u.ptr == t.ptr and u.dtype == np.int32 and (u.numpy() == a).all()
    del u
    assert len(fc._exports) == 0
    try:
        fc.from_dlpack(np.zeros(3))
        raise AssertionError("a host tensor was accepted")
    except BufferError:
        pass
    k = t.__dlpack__(copy=True)
    assert fc.DLManagedTensor.from_address(get(k, b"dltensor")).dl_tensor.data != t.ptr
    del k
    # stream=S: S waits for the producer's pending legacy-stream work.
    fc.use(1)
    s = stream()
    big = fc.empty(1 << 16, np.uint8, device=1)
    h = pinned(1 << 16)
    h[:] = 7
    ok(L.cuMemcpyHtoDAsync_v2(big.ptr, h.ctypes.data, 1 << 16, None))  # legacy, delayed
    big.__dlpack__(stream=s.value)
    out = pinned(1 << 16)
    ok(L.cuMemcpyDtoHAsync_v2(out.ctypes.data, big.ptr, 1 << 16, s))
    ok(L.cuStreamSynchronize(s))
    assert (out == 7).all(), "the consumer stream did not wait for the producer"


def enqueue(_: list[str]) -> None:
    """ptcsi_stream_enqueue: order, release before completion, sticky errors."""
    work_t = c.CFUNCTYPE(c.c_int, c.c_void_p)
    release_t = c.CFUNCTYPE(None, c.c_void_p)
    log: list[str] = []

    def work(arg: int) -> int:
        log.append(f"run{arg}")
        return ILLEGAL_ADDRESS if arg == 3 else SUCCESS

    def release(arg: int) -> None:
        log.append(f"rel{arg}")

    wf, rf = work_t(work), release_t(release)
    L.ptcsi_stream_enqueue.argtypes = [c.c_void_p, work_t, c.c_void_p, release_t]
    s = stream()
    for k in (1, 2, 3, 4):
        ok(L.ptcsi_stream_enqueue(s, wf, k, rf))
    assert L.cuStreamQuery(s) == NOT_READY
    assert L.cuStreamSynchronize(s) == ILLEGAL_ADDRESS
    assert log == ["run1", "rel1", "run2", "rel2", "run3", "rel3", "rel4"], log
    assert L.ptcsi_stream_enqueue(c.c_void_p(12345), wf, 5, rf) == INVALID_HANDLE
    ok(L.ptcsi_stream_enqueue(None, wf, 6, rf))  # the legacy stream
    ok(L.cuStreamSynchronize(None))
    assert log[-2:] == ["run6", "rel6"] and "rel5" not in log, log


if __name__ == "__main__":
    name, lib, *rest = sys.argv[1:]
    if name != "visible":
        setup(lib)
    globals()[name](rest)
    sys.stdout.flush()
    os._exit(0)  # skip teardown: stream threads are detached, as in a real process
