"""Functions run inside each rank by the GPU tests (tests/_harness.py puts this
directory on PYTHONPATH). Tensors are CuPy arrays or PyTorch tensors on a real
GPU, or fake_cuda tensors (tests/gpu/standin/fake_cuda.py) over the CPU
stand-in's device memory when PYTFCOMM_TEST_GPU_LIB=fake. pytfcomm allocates
results only for CuPy and PyTorch, so the fake path always passes ``out=``;
the real path also runs with ``out=None``."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from typing import Any

import numpy as np

import pytfcomm

OPS = ["sum", "mean", "min", "max", "prod"]
_DEVICE = 0  # this rank's GPU (setup())


@functools.lru_cache(maxsize=1)
def _lib() -> str:
    want = os.environ.get("PYTFCOMM_TEST_GPU_LIB", "")
    if want == "fake":
        import fake_cuda

        fake_cuda.load(os.environ["PYTFCOMM_CUDA_DRIVER"])
        return "fake"
    for name in [want] if want else ["cupy", "torch"]:
        try:
            __import__(name)
            return name
        except ImportError:
            continue
    raise RuntimeError("neither CuPy nor PyTorch is importable")


def dtypes() -> list[str]:
    """The dtypes this rank's tensor library can hold (bfloat16: not CuPy's)."""
    names = ["float16", "float32", "float64", "int32", "int64", "uint8", "bool"]
    if _lib() == "torch" or (_lib() == "fake" and _bfloat16() is not None):
        names.insert(1, "bfloat16")
    return names


def _bfloat16() -> Any:
    try:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


def setup(rank: int) -> None:
    """Pick this rank's GPU: ranks share the stand-in's PTCSI_GPUS GPUs round-robin;
    on a real machine every rank uses GPU 0 (of CUDA_VISIBLE_DEVICES)."""
    global _DEVICE
    _DEVICE = rank % int(os.environ.get("PTCSI_GPUS", "1")) if _lib() == "fake" else 0


def _np_dtype(name: str) -> np.dtype:
    return _bfloat16() if name == "bfloat16" else np.dtype(name)


def to_gpu(a: np.ndarray) -> Any:
    """A CUDA tensor holding a copy of ``a`` on this rank's GPU."""
    a = np.ascontiguousarray(a)
    if _lib() == "fake":
        import fake_cuda

        return fake_cuda.from_numpy(a, _DEVICE)
    if _lib() == "cupy":
        import cupy

        with cupy.cuda.Device(_DEVICE):
            return cupy.asarray(a)
    import torch

    if a.dtype == _bfloat16():
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).to(f"cuda:{_DEVICE}")
    return torch.from_numpy(a).to(f"cuda:{_DEVICE}")


def to_cpu(t: Any) -> np.ndarray:
    """A NumPy copy of a CUDA tensor."""
    if _lib() == "fake":
        return t.numpy()
    if _lib() == "cupy":
        return t.get()
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(_bfloat16())
    return t.cpu().numpy()


def empty(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    return to_gpu(np.zeros(shape, dtype))


def call(comm: Any, name: str, x: Any, shape: tuple[int, ...], *args: Any, **kw: Any) -> Any:
    """``comm.<name>(x, *args, **kw)``, with ``out=`` a new tensor of ``shape`` on the
    fake path (pytfcomm cannot allocate fake_cuda tensors); checks out is returned."""
    if _lib() != "fake" or "out" in kw:
        return getattr(comm, name)(x, *args, **kw)
    out = empty(shape, x.dtype)
    got = getattr(comm, name)(x, *args, out=out, **kw)
    if got is not out:
        raise AssertionError(f"{name}(out=...) did not return out")
    return got


def make(dtype: str, op: str, count: int, rank: int) -> np.ndarray:
    """Inputs that reduce exactly (no overflow, no rounding) for every op."""
    rng = np.random.default_rng(1000 + rank)
    if dtype == "bool":
        return rng.integers(0, 2, count).astype(bool)
    hi = 3 if op == "prod" else 50
    lo = 1 if op == "prod" else (0 if dtype == "uint8" else -50)
    if dtype == "uint8" and op == "sum":
        hi = 60  # 3 ranks x 59 < 256
    return rng.integers(lo, hi, count).astype(_np_dtype(dtype))


def reference(inputs: list[np.ndarray], op: str) -> np.ndarray:
    """What pytfcomm's CPU path computes (mean: sum then one division, ints truncate)."""
    dt = inputs[0].dtype
    if dt == _bfloat16():
        return reference([a.astype(np.float32) for a in inputs], op).astype(dt)
    stack = np.stack(inputs)
    if dt == np.bool_:
        return stack.any(0) if op in ("sum", "max") else stack.all(0)
    if op == "sum":
        return stack.sum(0, dtype=dt)
    if op == "prod":
        return stack.prod(0, dtype=dt)
    if op == "min":
        return stack.min(0)
    if op == "max":
        return stack.max(0)
    s = stack.sum(0, dtype=np.float64)
    if np.issubdtype(dt, np.integer):
        return np.trunc(s / len(inputs)).astype(dt)
    return (s / len(inputs)).astype(dt)


def same(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.dtype == _bfloat16() or np.issubdtype(want.dtype, np.floating):
        tol = 1e-2 if want.dtype.itemsize == 2 else 1e-6
        return bool(np.allclose(got.astype(np.float64), want.astype(np.float64), tol, tol))
    return bool(np.array_equal(got, want))


def collectives(
    rank: int, size: int, addr: str, transport: str | None, counts: list[int], opts: dict
) -> dict:
    """Every collective on GPU tensors against the NumPy reference; returns failures.

    opts: ``dtypes`` / ``ops`` / ``algorithms`` (all-reduce matrix; default all),
    ``big_counts`` (counts run for float32 and int64 sum only), ``in_place`` (also
    ``out=x``), ``no_out`` (the real path: also let pytfcomm allocate).
    """
    setup(rank)
    failures: list[str] = []
    names = opts.get("dtypes") or dtypes()
    ops = opts.get("ops") or OPS
    algs = opts.get("algorithms") or ["auto"]

    def check(what: str, got: Any, want: np.ndarray) -> None:
        g = to_cpu(got)
        if not same(g, want):
            failures.append(f"{what}: got {g.ravel()[:5]}.. want {want.ravel()[:5]}..")

    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport) as comm:
        matrix = [(c, d, o) for c in counts for d in names for o in ops]
        matrix += [(c, d, "sum") for c in opts.get("big_counts", []) for d in ("float32", "int64")]
        for count, dtype, op in matrix:
            if dtype == "bool" and op == "mean":
                continue
            xs = [make(dtype, op, count, r) for r in range(size)]
            want = reference(xs, op)
            for alg in algs:
                what = f"allreduce {dtype} {op} {alg} n={count}"
                x = to_gpu(xs[rank])
                check(what, call(comm, "allreduce", x, x.shape, op, algorithm=alg), want)
                if opts.get("in_place"):
                    y = comm.allreduce(x, op, out=x, algorithm=alg)
                    if y is not x:
                        failures.append(f"{what}: out=x did not return x")
                    check(f"{what} in place", x, want)
        for count in [*counts, *opts.get("big_counts", [])]:
            xs = [np.arange(count, dtype=np.float32) + 1000 * r for r in range(size)]
            for root in range(size):
                x = to_gpu(xs[rank])
                check(
                    f"broadcast root={root} n={count}",
                    call(comm, "broadcast", x, x.shape, root),
                    xs[root],
                )
            x = to_gpu(xs[rank])
            shape = (count * size,)
            check(f"allgather n={count}", call(comm, "allgather", x, shape), np.concatenate(xs))
            big = [(np.arange(count * size) % 1000 * (r + 1)).astype(np.int32) for r in range(size)]
            for op in ("sum", "max"):
                got = call(comm, "reduce_scatter", to_gpu(big[rank]), (count,), op)
                part = reference(big, op)[rank * count : (rank + 1) * count]
                check(f"reduce_scatter {op} n={count}", got, part)
        if opts.get("no_out") and _lib() != "fake":
            x = to_gpu(np.arange(10, dtype=np.float32) * (rank + 1))
            want = np.arange(10, dtype=np.float32) * sum(range(1, size + 1))
            check("allreduce out=None", comm.allreduce(x), want)
        backend = comm._gpu.last_backend() if comm._gpu is not None else ""
    return {"failures": failures, "backend": backend, "nccl_mode": nccl_mode()}


class _ProducerStream:
    """The library's current stream while entered: a new non-blocking stream
    ("side") or the default one ("default"); ``copy(dst, src)`` enqueues
    dst[...] = src on it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.ctx: Any = contextlib.nullcontext()

    def __enter__(self) -> _ProducerStream:
        lib = _lib()
        if lib == "fake":
            import fake_cuda

            self.s = fake_cuda.new_stream(_DEVICE) if self.kind == "side" else 0
            fake_cuda.set_current_stream(_DEVICE, self.s)
        elif lib == "cupy":
            import cupy

            s = (
                cupy.cuda.Stream(non_blocking=True)
                if self.kind == "side"
                else cupy.cuda.Stream.null
            )
            self.ctx = s
        elif self.kind == "side":
            import torch

            self.ctx = torch.cuda.stream(torch.cuda.Stream(device=_DEVICE))
        self.ctx.__enter__()
        return self

    def copy(self, dst: Any, src: Any, junk: Any) -> None:
        """dst = junk four times, then dst = src: the value lands last (about 100 ms
        after the call on the stand-in), later than the collective's own first step."""
        for value in (junk, junk, junk, junk, src):
            if _lib() == "fake":
                import fake_cuda

                fake_cuda.copy_async(dst, value, self.s)
            else:
                dst[...] = value  # on the current stream

    def __exit__(self, *exc: object) -> None:
        if _lib() == "fake":
            import fake_cuda

            fake_cuda.set_current_stream(_DEVICE, 0)
        self.ctx.__exit__(*exc)


def pending_producer_work(rank: int, size: int, addr: str, stream: str, count: int) -> dict:
    """The input's values are still being written on the producer's current stream
    (``stream``: "side" or "default"; each stand-in stream operation is delayed) when
    the collective starts: every result must include them (all-reduce out of place and
    in place, broadcast, all-gather): ``__dlpack__(stream=)`` orders the producer's
    work before pytfcomm's stream."""
    setup(rank)
    failures: list[str] = []
    want_sum = np.full(count, sum(range(1, size + 1)), np.float32)
    mine = np.full(count, rank + 1, np.float32)
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm, _ProducerStream(stream) as side:
        src = to_gpu(mine)
        junk = to_gpu(np.full(count, -7, np.float32))
        for i in range(2):
            x = to_gpu(np.zeros(count, np.float32))
            side.copy(x, src, junk)
            got = to_cpu(comm.allreduce(x, out=empty((count,), np.float32)))
            if not same(got, want_sum):
                failures.append(f"allreduce {i}: got {got[:3]}.. want {want_sum[:3]}..")
            x = to_gpu(np.zeros(count, np.float32))
            side.copy(x, src, junk)
            comm.allreduce(x, out=x)
            if not same(to_cpu(x), want_sum):
                failures.append(f"allreduce in place {i}: got {to_cpu(x)[:3]}..")
            x = to_gpu(np.zeros(count, np.float32))
            side.copy(x, src, junk)
            got = to_cpu(comm.broadcast(x, size - 1, out=empty((count,), np.float32)))
            if not same(got, np.full(count, size, np.float32)):
                failures.append(f"broadcast {i}: got {got[:3]}..")
            x = to_gpu(np.zeros(count, np.float32))
            side.copy(x, src, junk)
            got = to_cpu(comm.allgather(x, out=empty((count * size,), np.float32)))
            want = np.repeat(np.arange(1, size + 1, dtype=np.float32), count)
            if not same(got, want):
                failures.append(f"allgather {i}: got {got[::count]}.. want {want[::count]}..")
        backend = comm._gpu.last_backend()
    return {"failures": failures, "backend": backend}


def big_allreduce(rank: int, size: int, addr: str, count: int) -> dict:
    """One large float32 all-reduce (and broadcast) against NumPy; seconds taken."""
    setup(rank)
    xs = [(np.arange(count) % 1013).astype(np.float32) * (r + 1) for r in range(size)]
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        t0 = time.monotonic()
        x = to_gpu(xs[rank])
        got = to_cpu(call(comm, "allreduce", x, x.shape))
        took = time.monotonic() - t0
        ok = same(got, sum(xs))
        got = to_cpu(call(comm, "broadcast", x, x.shape, size - 1))
        ok_bcast = same(got, xs[size - 1])
        backend = comm._gpu.last_backend()
    return {"ok": ok, "broadcast_ok": ok_bcast, "seconds": took, "backend": backend}


def mismatch(rank: int, size: int, addr: str, transport: str | None, what: str = "count") -> str:
    """The last rank disagrees on ``what`` (count, empty, dtype, op, root, kind): every rank
    must raise MismatchError. Returns the class and message."""
    setup(rank)
    odd = rank == size - 1
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=20) as comm:
        x = to_gpu(np.ones(100, np.float32))
        call(comm, "allreduce", x, x.shape)  # the GPU path is set up and works
        try:
            if what == "count":
                y = to_gpu(np.ones(100 + odd, np.float32))
                call(comm, "allreduce", y, y.shape)
            elif what == "empty":  # no elements here: nothing to stage, still checked
                y = to_gpu(np.ones(0 if odd else 100, np.float32))
                call(comm, "allreduce", y, y.shape)
            elif what == "dtype":
                y = to_gpu(np.ones(100, np.float64 if odd else np.float32))
                call(comm, "allreduce", y, y.shape)
            elif what == "op":
                call(comm, "allreduce", x, x.shape, "max" if odd else "sum")
            elif what == "root":
                call(comm, "broadcast", x, x.shape, 1 if odd else 0)
            elif what == "kind":
                if odd:
                    call(comm, "allgather", x, (100 * size,))
                else:
                    call(comm, "allreduce", x, x.shape)
            else:
                raise ValueError(what)
        except pytfcomm.CommError as e:
            return f"{type(e).__name__}: {e}"
        return "no error"


def one_rank_missing(rank: int, size: int, addr: str, transport: str | None) -> str:
    """The last rank never joins the second all-reduce: the others must time out, not hang."""
    setup(rank)
    with pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=5) as comm:
        x = to_gpu(np.ones(1 << 20, np.float32))
        call(comm, "allreduce", x, x.shape)  # NCCL (or staging) is set up and works
        if rank == size - 1:
            time.sleep(9)  # past the others' 5 s deadline
            return "slept"
        t0 = time.monotonic()
        try:
            call(comm, "allreduce", x, x.shape)
        except (pytfcomm.CommTimeoutError, pytfcomm.PeerLostError) as e:
            return f"{type(e).__name__} after {time.monotonic() - t0:.1f}s: {e}"
        return "no error"


def nccl_mode() -> str:
    """How this process's NCCL communicators wait: "blocking" or "nonblocking"."""
    import pytfcomm._core as core

    return str(core.gpu_info().get("nccl_mode", "-"))


def failing(rank: int, size: int, addr: str, timeout: float, calls: int = 3) -> dict:
    """Up to ``calls`` all-reduces (a fault knob makes one fail); the first error's
    class, message and the seconds that call took; then whether the communicator
    refuses further GPU calls (it must not hang)."""
    setup(rank)
    res: dict = {"outcome": "no error", "took": 0.0, "after": ""}
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=timeout) as comm:
        x = to_gpu(np.ones(1 << 16, np.float32))
        for i in range(calls):
            t0 = time.monotonic()
            try:
                call(comm, "allreduce", x, x.shape)
            except pytfcomm.CommError as e:
                res.update(outcome=f"{type(e).__name__}: {e}", took=time.monotonic() - t0, call=i)
                break
        if res["outcome"] != "no error":
            t0 = time.monotonic()
            try:
                call(comm, "allreduce", x, x.shape)
                res["after"] = "no error"
            except pytfcomm.CommError as e:
                res["after"] = f"{type(e).__name__}: {e}"
            res["after_took"] = time.monotonic() - t0
    res["nccl_mode"] = nccl_mode()
    return res


def lost_rank(rank: int, size: int, addr: str, timeout: float, join: bool) -> dict:
    """The last rank dies (os._exit) 1 s after the others entered the second
    all-reduce, while they wait inside it; with ``join`` it is inside that
    collective too (PTCSI_NCCL_HANG_AT=2 keeps it from reaching NCCL's barrier).
    The survivors' error and the seconds it took."""
    setup(rank)
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=timeout) as comm:
        x = to_gpu(np.ones(1 << 16, np.float32))
        call(comm, "allreduce", x, x.shape)
        if rank == size - 1:
            threading.Timer(1.0, os._exit, args=(17,)).start()
            if not join:
                time.sleep(30)
        t0 = time.monotonic()
        try:
            call(comm, "allreduce", x, x.shape)
        except pytfcomm.CommError as e:
            return {"outcome": f"{type(e).__name__}: {e}", "took": time.monotonic() - t0}
        return {"outcome": "no error", "took": time.monotonic() - t0}


def _full(count: int, value: int, dtype: str) -> Any:
    """A CUDA tensor of ``count`` elements equal to ``value``, made on the GPU (no host copy)."""
    if _lib() == "cupy":
        import cupy

        with cupy.cuda.Device(_DEVICE):
            return cupy.full(count, value, dtype=dtype)
    import torch

    return torch.full((count,), value, dtype=getattr(torch, dtype), device=f"cuda:{_DEVICE}")


def _count_not_equal(t: Any, value: int) -> int:
    """How many elements of a CUDA tensor differ from ``value``, counted on the GPU."""
    return int((t != value).sum())


def huge_allreduce(rank: int, size: int, addr: str, count: int) -> dict:
    """A uint8 sum all-reduce of ``count`` bytes (past 2**31: element counts that do
    not fit an int32), result allocated by pytfcomm and in place; every element is
    checked on the GPU. Real GPUs only (CuPy or PyTorch)."""
    setup(rank)
    want = size * (size + 1) // 2
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=300) as comm:
        x = _full(count, rank + 1, "uint8")
        t0 = time.monotonic()
        y = comm.allreduce(x)
        took = time.monotonic() - t0
        wrong = _count_not_equal(y, want)
        del y
        comm.allreduce(x, out=x)
        wrong_in_place = _count_not_equal(x, want)
        backend = comm._gpu.last_backend()
    return {"wrong": wrong, "wrong_in_place": wrong_in_place, "seconds": took, "backend": backend}


def killed_in_stream(rank: int, size: int, addr: str, timeout: float) -> dict:
    """Back-to-back 64 MiB all-reduces; the last rank SIGKILLs itself 0.3 s after
    its 8th, at whatever point of a collective it is then (on a GPU mostly inside
    NCCL or the copy). Counting calls, not time from the start, leaves the
    survivors results to check however slow a loaded machine makes each call.
    Survivors return how many results were right and wrong (every 4th checked),
    the error and the seconds the failing call took, the NCCL mode and the
    verification counters; they must not hang."""
    setup(rank)
    count = 16 << 20
    want = float(size * (size + 1) // 2)
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=timeout) as comm:
        x = to_gpu(np.full(count, rank + 1, np.float32))
        out = empty((count,), np.dtype(np.float32))
        comm.allreduce(x, out=out)  # set up
        res: dict = {"right": 0, "wrong": 0, "outcome": "no error", "took": 0.0}
        end = time.monotonic() + 60
        i = 0
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                comm.allreduce(x, out=out)
            except pytfcomm.CommError as e:
                res.update(outcome=f"{type(e).__name__}: {e}", took=time.monotonic() - t0)
                break
            i += 1
            if rank == size - 1 and i == 8:
                threading.Timer(0.3, os.kill, args=(os.getpid(), signal.SIGKILL)).start()
            if rank != size - 1 and i % 4 == 0:
                ok = bool((to_cpu(out) == want).all())
                res["right" if ok else "wrong"] += 1
        res["nccl_mode"] = nccl_mode()
        res["verify"] = dict(comm._gpu.verify_stats())
        return res


def verify_cache(rank: int, size: int, addr: str, repeats: int, change: str) -> dict:
    """``repeats`` identical all-reduces, then one where the last rank's call differs
    (``change``: count, op, dtype, shape or "" for none), then one identical again; every result
    checked. Returns the verification counters after each phase and the changed
    call's outcome."""
    setup(rank)
    odd = rank == size - 1
    res: dict = {"wrong": 0}
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=20) as comm:
        want = float(size * (size + 1) // 2)

        def once(n: int = 1000, op: str = "sum", dtype: str = "float32", rows: int = 1) -> None:
            x = to_gpu(np.full(n, rank + 1, np.dtype(dtype)).reshape(rows, n // rows))
            got = to_cpu(call(comm, "allreduce", x, x.shape, op))
            expect = want if op == "sum" else float(size)
            res["wrong"] += int((got != expect).sum())

        for _ in range(repeats):
            once()
        res["after_repeats"] = dict(comm._gpu.verify_stats())
        res["changed"] = "no error"
        if change:
            try:
                if change == "count":
                    once(1000 + odd)
                elif change == "op":
                    once(op="max" if odd else "sum")
                elif change == "dtype":
                    once(dtype="float64" if odd else "float32")
                elif change == "shape":  # the same count: only the shape digest differs
                    once(rows=10 if odd else 1)
                else:
                    raise ValueError(change)
            except pytfcomm.CommError as e:
                res["changed"] = f"{type(e).__name__}: {e}"
        once()
        res["after_all"] = dict(comm._gpu.verify_stats())
    return res
