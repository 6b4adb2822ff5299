"""The NumPy-facing communicator: ``pytfcomm.init()`` and its collectives."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import numpy as np

from . import _cluster, _core, _dlpack, _owned_file
from ._dtypes import algorithm_code, dtype_code, op_code
from ._fusion import AllreduceHandle, as_array_list, check_fusion_bytes, list_tag
from ._rows import padded_blocks, reduce_scatter_rows
from .errors import ConfigError, InvalidArgumentError

__all__ = ["Communicator", "default_communicator", "init"]

# The communicator the last init() returned, used by the TensorFlow layer
# when no communicator is passed explicitly.
_default: Communicator | None = None


def _timeout(value: float | None) -> float:
    if value is None:
        return -1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError(f"timeout must be a positive number of seconds, got {value!r}")
    return float(value)


# Results of this many bytes or more, when the caller passes no ``out=``, go in buffers
# from the output cache the TF ops use (PYTFCOMM_TF_BUFFER_CACHE), kept mapped between
# calls: glibc maps a new buffer of 32 MiB or more for every call and unmaps it on free,
# and the page faults of writing it cost about as much as the all-reduce itself
# (bindings/output_arrays.cc). Below 1 MiB, NumPy's allocation is as fast and cheaper to call.
# The core's own results (unequal all-gathers, alltoall) use the same bound, kCachedOutputBytes.
_CACHED_OUTPUT_BYTES = 1 << 20


def _new_output(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array for a collective's result."""
    dtype = np.dtype(dtype)
    if dtype.itemsize * math.prod(shape) >= _CACHED_OUTPUT_BYTES:
        return _core.cached_empty(shape, dtype)
    return np.empty(shape, dtype)


def _output_like(x: np.ndarray) -> np.ndarray:
    """What ``np.empty_like(x)`` gives, from the output cache when ``x`` is C-contiguous.

    Small arrays (the fast path's business) pay one comparison over ``np.empty_like``.
    """
    if x.nbytes >= _CACHED_OUTPUT_BYTES and x.flags.c_contiguous:
        return _core.cached_empty(x.shape, x.dtype)
    return np.empty_like(x)


def _check_input(x: object, what: str = "input") -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{what} must be a numpy.ndarray, got {type(x).__name__}; wrap it with np.asarray()"
        )
    dtype_code(x.dtype)
    if not x.flags.c_contiguous:
        raise InvalidArgumentError(
            f"{what} is not C-contiguous (a strided view or a transpose?); pass "
            "np.ascontiguousarray(x) -- pytfcomm works on the array's memory without copying"
        )
    return x


def _check_out(
    out: object,
    like_shape: tuple[int, ...],
    dtype: np.dtype,
    x: np.ndarray | None = None,
    *,
    in_place: bool = True,
) -> np.ndarray:
    out = _check_input(out, "out")
    if out.dtype != dtype:
        raise InvalidArgumentError(f"out has dtype {out.dtype} but the result is {dtype}")
    if out.shape != like_shape:
        raise InvalidArgumentError(f"out has shape {out.shape} but the result has {like_shape}")
    if not out.flags.writeable:
        raise InvalidArgumentError("out is read-only; pass a writable array")
    if x is not None:
        _check_overlap(x, out, in_place)
    return out


def _check_overlap(x: np.ndarray, out: np.ndarray, in_place: bool) -> None:
    """Raise when ``out`` overlaps the input without being the very same memory.

    Both are C-contiguous, so their byte ranges overlap exactly when their memory
    does. Writing results while inputs are still being read would corrupt both.
    """
    # Bounds only (no exact solve): 0.5 µs, where reading both addresses
    # costs 4-5 µs, which over 200 tensors of allreduce_many added 1 ms.
    if x.nbytes == 0 or out.nbytes == 0 or not np.may_share_memory(x, out):
        return
    a = x.__array_interface__["data"][0]
    b = out.__array_interface__["data"][0]
    if in_place and a == b and x.nbytes == out.nbytes:
        return
    how = "the same memory as" if a == b and x.nbytes == out.nbytes else "memory overlapping"
    raise InvalidArgumentError(
        f"out uses {how} the input (its first byte is {b - a:+d} bytes from the input's); "
        + ("pass out=x to work in place, or " if in_place else "")
        + "pass an array of its own"
    )


def _check_name(name: str | None) -> str:
    if name is None:
        return ""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"name must be a non-empty str, got {name!r}")
    return name


def shape_tag(shape: tuple[int, ...]) -> int:
    """A 32-bit digest of a shape, carried with collectives to catch shape mismatches."""
    return _shape_tag(tuple(int(d) for d in shape))


@functools.lru_cache(maxsize=4096)
def _shape_tag(shape: tuple[int, ...]) -> int:
    # The core's digest, which its fast path computes too. Cached: a training
    # loop reduces the same few shapes over and over.
    return _core.shape_digest(shape)


def _row_elems(row: tuple[int, ...]) -> int:
    n = 1
    for d in row:
        n *= int(d)
    return n


def _check_splits(splits: object, size: int, rows: int) -> np.ndarray:
    """``splits`` as an int64 array of ``size`` entries, each >= 0, adding up to ``rows``."""
    try:
        arr = np.asarray(splits)
    except Exception as e:
        raise InvalidArgumentError(f"splits must be a sequence of ints, got {splits!r}") from e
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise InvalidArgumentError(f"splits must be a 1-D sequence of ints, got {splits!r}")
    if arr.size != size:
        raise InvalidArgumentError(
            f"splits needs one entry per rank ({size}), got {arr.size}: {arr.tolist()}"
        )
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise InvalidArgumentError(f"splits must be >= 0, got {arr.tolist()}")
    if int(arr.sum()) != rows:
        raise InvalidArgumentError(
            f"splits add up to {int(arr.sum())} rows but the input has {rows}: {arr.tolist()}"
        )
    return arr


class Communicator:
    """The ranks of one job, connected, and the collectives between them.

    Create one with :func:`pytfcomm.init`. Collectives are matched across ranks per
    thread: the n-th collective a thread named ``X`` calls pairs with the n-th
    collective of the thread named ``X`` on every other rank (threads of an SPMD program
    get the same names everywhere: ``MainThread``, ``Thread-1``, ...), or, with
    ``name=``, the n-th call under that name on any thread. So several threads may use
    one communicator at once, in any order relative to each other; two threads of one
    name, or two threads passing one ``name=``, in calls at the same time get
    :class:`pytfcomm.InvalidArgumentError` (which call would pair with which elsewhere
    would depend on timing). Every rank must make the same call (kind, dtype, shape, op,
    root) for each key; otherwise every rank raises :class:`pytfcomm.MismatchError`
    before any data moves and the communicator stays usable (docs/negotiation.md). All
    calls block until this rank's part is done and release the GIL meanwhile; Ctrl-C
    interrupts a wait (the communicator is then closed, and its peers told). After a
    lost or silent peer or a failed transfer the communicator is closed on every rank. A
    communicator belongs to the process that created it: a forked child must call
    :func:`init` for its own.
    """

    def __init__(
        self,
        core: _core.Communicator,
        spec: _cluster.ClusterSpec,
        gpu_backend: int = 0,
        timeout_s: float = -1.0,
    ) -> None:
        self._core = core
        self.spec = spec
        self._gpu_backend = gpu_backend  # how GPU tensors move (_dlpack.BACKEND_*)
        self._gpu: Any = None  # _core.GpuCommunicator, made on the first GPU tensor
        # init(timeout=): the GPU calls need it spelled out (the core's GPU
        # communicator falls back to PYTFCOMM_TIMEOUT, not to this); -1: none.
        self._timeout_s = timeout_s
        # How this communicator's ranks joined (secret, transport, deadlines): what
        # split() gives the groups it makes. Set by init() and split().
        self._join_args: dict[str, Any] = {
            "secret": "",
            "transport": "",
            "connect_timeout": -1.0,
            "timeout": timeout_s,
            "stall_warning": -1.0,
        }
        self.parent_ranks: list[int] | None = None

    # -- identity -----------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's rank, in ``[0, size)``."""
        return self._core.rank

    @property
    def size(self) -> int:
        """Number of ranks in the job."""
        return self._core.size

    @property
    def local_rank(self) -> int:
        """Index of this rank among the ranks on the same host."""
        return self._core.local_rank

    @property
    def local_size(self) -> int:
        """Number of ranks on this host."""
        return self._core.local_size

    @property
    def num_hosts(self) -> int:
        """Number of distinct hosts in the job."""
        return self._core.num_hosts

    @property
    def timeline_path(self) -> str:
        """This rank's timeline file (``PYTFCOMM_TIMELINE`` or :meth:`start_timeline`,
        docs/timeline.md), or ``""`` while off."""
        return self._core.timeline_path

    def start_timeline(self, path: str) -> str:
        """Start (or resume) this rank's timeline at run time; returns its file.

        ``path`` is a pattern as ``PYTFCOMM_TIMELINE``'s: ``"%r"`` becomes the rank,
        else ``.rank<N>`` goes before the extension. Another file than the current
        one is created anew; the same one is appended to. Local to this rank (call it
        on every rank for a whole-job timeline). :class:`ConfigError` when the file
        cannot be written.
        """
        if not isinstance(path, str) or not path:
            raise InvalidArgumentError(f"start_timeline needs a file path, got {path!r}")
        return str(self._core.start_timeline(path))

    def stop_timeline(self) -> None:
        """Stop the timeline: its file is complete JSON, later events are dropped."""
        self._core.stop_timeline()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran or an error closed the communicator."""
        return self._core.closed

    def host_of(self, rank: int) -> str:
        """The host that rank ``rank``'s peers connect to, without a port.

        That is the bind host the job's configuration gave that rank (an address or a
        name, e.g. from TF_CONFIG or PYTFCOMM_BIND_HOST), else the local address its
        route to rank 0 leaves from, e.g. ``"10.0.0.2"``. Raises
        :class:`InvalidArgumentError` unless ``0 <= rank < size``.
        """
        self._check_rank(rank, "rank")
        return self._core.host_of(int(rank))

    # -- for pytfcomm's own layers (internal, but kept stable) --------------------------
    @property
    def native_handle(self) -> int:
        """The process-wide integer through which pytfcomm's TF op library finds this
        communicator (the ``comm_handle`` attribute of its ops; never 0).

        Reading it registers the communicator with the op library's registry, which
        holds it weakly: keep the :class:`Communicator` alive while ops may use the
        handle. Internal but supported: for ``pytfcomm.tf`` and extensions built
        against the same native core; no use in NumPy code.
        """
        return int(self._core.handle)

    @property
    def gpu_backend(self) -> int:
        """How CUDA tensors move: ``pytfcomm._dlpack.BACKEND_AUTO`` (NCCL when every rank
        has it, else staging), ``BACKEND_NCCL`` or ``BACKEND_STAGED``, as ``init()`` chose
        from its ``transport`` argument. Internal but supported (``pytfcomm._dlpack``)."""
        return self._gpu_backend

    def gpu_communicator(self) -> _core.GpuCommunicator:
        """The native core's communicator for CUDA DLPack tensors, created on first use.

        It shares this communicator's ranks and connections; :meth:`close` closes it
        too. Its collectives take the integer codes of ``pytfcomm._dtypes`` and
        :attr:`gpu_backend`. Raises :class:`ConfigError` in a build without CUDA.
        Internal but supported: ``pytfcomm._dlpack`` reaches the GPU through it.
        """
        if self._gpu is None:
            _core.set_nccl_candidates(_dlpack.nccl_candidates())
            self._gpu = _core.GpuCommunicator(self._core)
        return self._gpu

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"<pytfcomm.Communicator rank {self.rank}/{self.size} local "
            f"{self.local_rank}/{self.local_size} {state}>"
        )

    # -- collectives -----------------------------------------------------------------
    def allreduce(
        self,
        x: np.ndarray,
        op: str = "sum",
        *,
        out: np.ndarray | None = None,
        algorithm: str = "auto",
        timeout: float | None = None,
        name: str | None = None,
    ) -> np.ndarray:
        """Reduce ``x`` element-wise over all ranks; every rank gets the result.

        ``op`` is ``"sum"``, ``"mean"`` (integers truncate toward zero),
        ``"min"``, ``"max"`` or ``"prod"``. ``out`` receives the result without
        allocating (``out=x`` works in place); without it, a result of 1 MiB or more
        lives in a buffer of the output cache (``PYTFCOMM_TF_BUFFER_CACHE``), which
        takes the memory back for the next result when the array is freed.
        ``algorithm`` is ``"auto"``, ``"ring"``, ``"hierarchical"``, ``"recursive_doubling"``,
        ``"halving_doubling"`` (the ring's bytes in 2 log2(size) pairwise
        exchanges) or ``"oneshot"`` (up to PYTFCOMM_ONESHOT_BYTES: every rank's
        input travels with the negotiation and every rank reduces them all). Every rank
        gets bitwise-identical results. DLPack tensors (CuPy, PyTorch) work too:
        CUDA ones through NCCL or staging (docs/gpu.md). ``name``: match this call
        across ranks by name instead of by the calling thread's call count.
        """
        if type(x) is np.ndarray and timeout is None and name is None:
            # The common call takes a C++ fast path (bindings/fast_allreduce.cc):
            # small all-reduces are bound by the wrapper's own cost. False means
            # "not that call"; the full path below checks everything and explains.
            if out is None:
                # _output_like(x) without the call: small all-reduces feel 0.1 us.
                if x.nbytes >= _CACHED_OUTPUT_BYTES and x.flags.c_contiguous:
                    out = _core.cached_empty(x.shape, x.dtype)
                else:
                    out = np.empty_like(x)
            if self._core.allreduce_fast(x, out, op, algorithm):
                return out
        if _dlpack.is_dlpack(x):
            kw = {"op": op, "algorithm": algorithm, "timeout": timeout}
            args = (op_code(op), algorithm_code(algorithm))
            tag = shape_tag(tuple(x.shape))
            return _dlpack.collective(
                self, "allreduce", x, out, tuple(x.shape), args, kw, _timeout(timeout), tag
            )
        x = _check_input(x)
        code = op_code(op)
        alg = algorithm_code(algorithm)
        out = _output_like(x) if out is None else _check_out(out, x.shape, x.dtype, x)
        self._core.allreduce(
            x,
            out,
            dtype_code(x.dtype),
            code,
            alg,
            _timeout(timeout),
            _shape_tag(x.shape),
            _check_name(name),
        )
        return out

    def allreduce_many(
        self,
        arrays: Sequence[np.ndarray],
        op: str = "sum",
        *,
        out: Sequence[np.ndarray] | None = None,
        algorithm: str = "auto",
        timeout: float | None = None,
        fusion_bytes: int | None = None,
    ) -> list[np.ndarray]:
        """All-reduce every array of ``arrays`` with one ``op``, fused into few collectives.

        Returns one result per input, in order (``out[i]`` receives the result
        of ``arrays[i]``; ``out=arrays`` works in place). Arrays may mix dtypes
        and sizes; small arrays of one dtype are packed into fusion buffers of
        up to ``fusion_bytes`` (default ``PYTFCOMM_FUSION_BYTES``) and reduced
        together, so 200 small gradients cost about as much as one large one.
        Every rank must pass the same list (same order, shapes and dtypes):
        otherwise every rank raises :class:`pytfcomm.MismatchError`. Results are
        bitwise identical on every rank. The GIL is released while it runs.
        """
        arrays = as_array_list(arrays, "arrays")
        xs = [_check_input(x, f"arrays[{i}]") for i, x in enumerate(arrays)]
        code = op_code(op)
        alg = algorithm_code(algorithm)
        if out is None:
            outs = [_output_like(x) for x in xs]
        else:
            outs = as_array_list(out, "out")
            if len(outs) != len(xs):
                raise InvalidArgumentError(
                    f"out has {len(outs)} arrays but arrays has {len(xs)}; "
                    "pass one output per input"
                )
            outs = [_check_out(o, x.shape, x.dtype, x) for o, x in zip(outs, xs, strict=True)]
        self._core.allreduce_many(
            xs,
            outs,
            [dtype_code(x.dtype) for x in xs],
            code,
            alg,
            _timeout(timeout),
            list_tag(xs),
            check_fusion_bytes(fusion_bytes),
        )
        return outs

    def allreduce_async(
        self,
        x: np.ndarray,
        op: str = "sum",
        *,
        out: np.ndarray | None = None,
        algorithm: str = "auto",
        timeout: float | None = None,
    ) -> AllreduceHandle:
        """Queue an all-reduce of ``x`` and return at once; ``handle.wait()`` gives the result.

        All-reduces submitted close together (within ``PYTFCOMM_FUSION_CYCLE_MS``,
        or until ``PYTFCOMM_FUSION_BYTES`` are queued, or until a ``wait()``) are
        fused as in :meth:`allreduce_many`. Every rank must submit the same
        all-reduces in the same order; leave ``x`` and ``out`` alone until the
        handle is done, and do not run other collectives on this communicator
        while handles are pending.
        """
        x = _check_input(x)
        code = op_code(op)
        alg = algorithm_code(algorithm)
        out = _output_like(x) if out is None else _check_out(out, x.shape, x.dtype, x)
        core = self._core.allreduce_async(
            x, out, dtype_code(x.dtype), code, alg, _timeout(timeout), _shape_tag(x.shape)
        )
        return AllreduceHandle(core, out)

    def broadcast(
        self,
        x: np.ndarray,
        root: int = 0,
        *,
        out: np.ndarray | None = None,
        timeout: float | None = None,
        name: str | None = None,
    ) -> np.ndarray:
        """Every rank gets rank ``root``'s ``x`` (same shape and dtype on every rank)."""
        if _dlpack.is_dlpack(x):
            self._check_root(root)
            kw = {"root": root, "timeout": timeout}
            return _dlpack.collective(
                self,
                "broadcast",
                x,
                out,
                tuple(x.shape),
                (int(root),),
                kw,
                _timeout(timeout),
                shape_tag(tuple(x.shape)),
            )
        x = _check_input(x)
        self._check_root(root)
        if out is None:
            out = x.copy()
        else:
            out = _check_out(out, x.shape, x.dtype, x)
            if out is not x and self.rank == root:
                np.copyto(out, x)
        self._core.broadcast(
            out,
            dtype_code(out.dtype),
            int(root),
            _timeout(timeout),
            shape_tag(out.shape),
            _check_name(name),
        )
        return out

    def allgather(
        self,
        x: np.ndarray,
        *,
        out: np.ndarray | None = None,
        timeout: float | None = None,
        name: str | None = None,
    ) -> np.ndarray:
        """Concatenate every rank's ``x`` along axis 0, in rank order.

        ``x.shape[0]`` may differ per rank (Horovod's ``allgather``,
        ``MPI_Allgatherv``, zero rows included); the dtype and the other dimensions may
        not (:class:`pytfcomm.MismatchError` on every rank). Every rank's row count
        travels in the negotiation the call makes anyway, so equal counts cost what they
        always did (and run the equal all-gather). ``out``, when given, must have the
        result's shape (``size`` times ``x.shape[0]`` rows when the counts are equal);
        otherwise this rank raises :class:`pytfcomm.InvalidArgumentError` after the
        others got their result. DLPack (GPU) tensors: equal counts only.
        """
        if _dlpack.is_dlpack(x):
            if len(x.shape) == 0:
                raise InvalidArgumentError("allgather needs an array with at least one dimension")
            shape = (int(x.shape[0]) * self.size, *x.shape[1:])
            return _dlpack.collective(
                self,
                "allgather",
                x,
                out,
                shape,
                (self.size,),
                {"timeout": timeout},
                _timeout(timeout),
                shape_tag(tuple(x.shape)),
            )
        x = _check_input(x)
        if x.ndim == 0:
            raise InvalidArgumentError("allgather needs an array with at least one dimension")
        code = dtype_code(x.dtype)
        row = x.shape[1:]
        row_elems = _row_elems(row)
        # The dtype and the row's shape must agree across ranks; the digest has both.
        tag = _shape_tag((code, x.ndim, *row))
        if out is not None:
            out = _check_input(out, "out")
            if out.dtype != x.dtype or out.shape[1:] != row or out.ndim != x.ndim:
                raise InvalidArgumentError(
                    f"out has dtype {out.dtype} and shape {out.shape}, but the result is "
                    f"{x.dtype} with rows of shape {row}"
                )
            if not out.flags.writeable:
                raise InvalidArgumentError("out is read-only; pass a writable array")
            _check_overlap(x, out, in_place=False)
        if row_elems == 0:
            # Rows of no bytes: gather one byte per row, so that the counts are rows.
            _, counts = self._core.allgatherv(
                np.zeros(x.shape[0], np.uint8),
                dtype_code(np.dtype(np.uint8)),
                _timeout(timeout),
                tag,
                _check_name(name),
            )
            shape = (int(counts.sum()), *row)
            if out is None:
                return np.empty(shape, x.dtype)
            if out.shape != shape:
                raise InvalidArgumentError(f"out has shape {out.shape} but the result has {shape}")
            return out
        if out is not None:
            _, counts = self._core.allgatherv(
                x, code, _timeout(timeout), tag, _check_name(name), out, True
            )
            if int(counts.sum()) != out.size:
                raise InvalidArgumentError(
                    f"out has {out.shape[0]} rows but the gathered result has "
                    f"{int(counts.sum()) // row_elems} (rows per rank: "
                    f"{(counts // row_elems).tolist()}); out was left as it was"
                )
            return out
        # Allocated here for equal counts (the common case); unequal ones get a buffer
        # the core allocates once it knows the sum.
        guess = _new_output((x.shape[0] * self.size, *row), x.dtype)
        data, _ = self._core.allgatherv(x, code, _timeout(timeout), tag, _check_name(name), guess)
        if data is None:
            return guess
        return data.view(x.dtype).reshape((-1, *row))

    def allgatherv(
        self,
        x: np.ndarray,
        *,
        timeout: float | None = None,
        name: str | None = None,
    ) -> np.ndarray:
        """:meth:`allgather` (which takes a different ``x.shape[0]`` per rank); kept for
        callers of the name ``MPI_Allgatherv``. NumPy arrays only."""
        if _dlpack.is_dlpack(x):
            raise InvalidArgumentError(
                "allgatherv takes NumPy arrays; for DLPack tensors pad every rank's rows to "
                "the largest count and use allgather"
            )
        return self.allgather(x, timeout=timeout, name=name)

    def alltoall(
        self,
        x: np.ndarray,
        splits: Sequence[int] | np.ndarray | None = None,
        *,
        timeout: float | None = None,
        name: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Send ``splits[i]`` rows of ``x`` (consecutive, in rank order) to rank ``i``.

        Returns ``(received, received_splits)``: the rows every rank sent this one,
        concatenated in rank order, and how many came from each rank (an ``int64``
        array of ``size`` entries) -- Horovod's ``alltoall``. ``splits=None`` splits
        ``x`` into ``size`` equal parts (``x.shape[0]`` must be divisible by
        ``size``). Splits of the wrong length, negative or not adding up to
        ``x.shape[0]`` raise :class:`pytfcomm.InvalidArgumentError` on this rank before
        anything moves; ranks that disagree on the dtype or the shape of a row get
        :class:`pytfcomm.MismatchError` on every rank. Pairwise exchange: in step k
        every rank sends to rank + k and receives from rank - k. NumPy arrays only.
        """
        if _dlpack.is_dlpack(x):
            raise InvalidArgumentError("alltoall takes NumPy arrays (no DLPack tensors yet)")
        x = _check_input(x)
        if x.ndim == 0:
            raise InvalidArgumentError("alltoall needs an array with at least one dimension")
        rows = x.shape[0]
        if splits is None:
            if rows % self.size:
                raise InvalidArgumentError(
                    f"alltoall without splits needs axis 0 divisible by the number of ranks "
                    f"({self.size}), got shape {x.shape}; pass splits="
                )
            split_rows = np.full(self.size, rows // self.size, np.int64)
        else:
            split_rows = _check_splits(splits, self.size, rows)
        code = dtype_code(x.dtype)
        row = x.shape[1:]
        row_elems = _row_elems(row)
        tag = _shape_tag((code, x.ndim, *row))
        dtype = x.dtype
        if row_elems == 0:
            # Rows of no bytes: send one byte per row so that the counts are rows.
            x, code, row_elems = np.zeros(rows, np.uint8), dtype_code(np.dtype(np.uint8)), 1
        data, counts = self._core.alltoallv(
            x, split_rows * row_elems, code, _timeout(timeout), tag, _check_name(name)
        )
        received = (counts // row_elems).astype(np.int64)
        if x.dtype != dtype:
            return np.empty((int(received.sum()), *row), dtype), received
        return data.view(dtype).reshape((-1, *row)), received

    def reduce_scatter(
        self,
        x: np.ndarray,
        op: str = "sum",
        *,
        out: np.ndarray | None = None,
        timeout: float | None = None,
        name: str | None = None,
    ) -> np.ndarray:
        """Reduce ``x`` over all ranks; rank r gets its share of the rows (axis 0).

        ``x.shape[0]`` rows split by Horovod's rule (as ``pytfcomm.tf.reduce_scatter``):
        ``rows // size`` each, the first ``rows % size`` ranks one more, in rank
        order. Every rank passes the same shape and dtype (else
        :class:`pytfcomm.MismatchError` on every rank). Rows that do not divide
        evenly cost one copy of ``x`` into equal padded blocks. DLPack tensors (GPU)
        need ``x.shape[0]`` divisible by ``size``."""
        if _dlpack.is_dlpack(x):
            if len(x.shape) == 0 or x.shape[0] % self.size:
                raise InvalidArgumentError(
                    f"reduce_scatter of a DLPack tensor needs axis 0 divisible by the "
                    f"number of ranks ({self.size}), got shape {tuple(x.shape)}; pad it, "
                    f"or pass a NumPy array (any number of rows)"
                )
            shape = (int(x.shape[0]) // self.size, *x.shape[1:])
            kw = {"op": op, "timeout": timeout}
            return _dlpack.collective(
                self,
                "reduce_scatter",
                x,
                out,
                shape,
                (op_code(op), self.size),
                kw,
                _timeout(timeout),
                shape_tag(tuple(x.shape)),
            )
        x = _check_input(x)
        code = op_code(op)
        if x.ndim == 0:
            raise InvalidArgumentError("reduce_scatter needs an array with at least one dimension")
        shares = reduce_scatter_rows(x.shape[0], self.size)
        row = x.shape[1:]
        shape = (shares[self.rank], *row)
        out = (
            _new_output(shape, x.dtype)
            if out is None
            else _check_out(out, shape, x.dtype, x, in_place=False)
        )
        part, whole = out, x
        if x.shape[0] % self.size:
            block = shares[0]
            whole = _new_output((block * self.size, *row), x.dtype)
            padded_blocks(x, shares, whole)
            if shares[self.rank] != block:
                part = np.empty((block, *row), x.dtype)
        self._core.reduce_scatter(
            whole,
            part,
            dtype_code(x.dtype),
            code,
            _timeout(timeout),
            shape_tag(x.shape),
            _check_name(name),
        )
        if part is not out:
            out[...] = part[: shares[self.rank]]
        return out

    def split(self, ranks: Sequence[int], *, timeout: float | None = None) -> Communicator | None:
        """A communicator for the group ``ranks`` (ranks of this one); None off the group.

        Collective over *every* rank of this communicator, members or not, all
        with the same ``ranks`` (in any order; otherwise :class:`MismatchError`
        on every rank). Members get a new :class:`Communicator` whose rank is the
        position in ``sorted(ranks)`` and whose :attr:`parent_ranks` maps it back;
        it has its own connections (same secret, transport and deadlines as this
        one), so its collectives never pair with this communicator's or another
        group's. Close it when done; closing this one does not close it. If any
        member fails to join (within the connect timeout), every rank raises
        :class:`CommError` and no group exists.
        """
        from ._split import split

        return split(self, ranks, timeout)

    def barrier(self, timeout: float | None = None, name: str | None = None) -> None:
        """Return once every rank has entered the barrier (``name``: see :meth:`allreduce`)."""
        self._core.barrier(_timeout(timeout), _check_name(name))

    def join(self, timeout: float | None = None) -> int:
        """Say this rank has no more collectives to run (Horovod's ``join``); returns
        the rank that joined last (the same on every rank; ties: the highest).

        Until every rank has joined, this rank takes part in the collectives the
        others still run, with nothing of its own: all-reduces and reduce-scatters
        get zeros from it for ``"sum"`` and ``"mean"`` (a mean still divides by
        :attr:`size`, as Horovod's) and the identity for ``"min"``, ``"max"`` and
        ``"prod"``; all-gathers with a different first dimension per rank and
        all-to-alls get no rows; broadcasts and barriers run as usual. What cannot
        run so raises :class:`MismatchError` on the ranks that asked (nothing moves):
        an all-gather of equal shapes, a broadcast whose root joined, a GPU
        collective. Waits at most ``timeout`` (default: the communicator's) for the
        last rank; a rank that joined may call collectives again once join returns.
        """
        return int(self._core.join(_timeout(timeout)))

    def close(self) -> None:
        """Close every connection. Idempotent; later collectives raise CommClosedError."""
        if self._gpu is not None:
            self._gpu.close()
        self._core.close()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- helpers -------------------------------------------------------------------------
    def _check_root(self, root: int) -> None:
        self._check_rank(root, "root")

    def _check_rank(self, rank: int, what: str) -> None:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise TypeError(f"{what} must be an int, got {type(rank).__name__}")
        if not 0 <= rank < self.size:
            raise InvalidArgumentError(f"{what} must be a rank in [0, {self.size}), got {rank}")


_MIN_SECRET = 16
_TRANSPORTS = ("auto", "tcp", "shm")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


_SECRET_HINT = (
    "set PYTFCOMM_SECRET to the same long random value on every rank (pytfcomm-run does "
    "this for you; in a Slurm batch script, export PYTFCOMM_SECRET=$(python -c 'import "
    "secrets; print(secrets.token_hex(32))') before srun), or PYTFCOMM_SECRET_FILE to a "
    "file that holds it, readable by you alone, e.g. on a shared filesystem"
)
_MAX_SECRET_FILE = 4096


def _secret_file(path: str) -> str:
    """The job secret held in ``path`` (PYTFCOMM_SECRET_FILE), surrounding whitespace dropped.

    The file must be a regular file of this user's that neither group nor others may
    access (``_owned_file``): a secret that other users can read or set protects nothing.
    """
    what = f"PYTFCOMM_SECRET_FILE={path!r}"
    fix = (
        "point it at a file of your own, mode 600, that holds the job secret and exists on "
        "every rank's host (a shared filesystem), or unset it and set PYTFCOMM_SECRET"
    )
    fd = _owned_file.open_owned(path, what, fix, no_access=True)
    try:
        data = _owned_file.read_bounded(fd, _MAX_SECRET_FILE)
    finally:
        os.close(fd)
    if len(data) > _MAX_SECRET_FILE:
        raise ConfigError(f"{what} is over {_MAX_SECRET_FILE} bytes: is it the secret's file?")
    try:
        secret = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{what} is not UTF-8 text: write the secret as text") from None
    if not secret:
        raise ConfigError(f"{what} is empty: write the job secret into it")
    return secret


def _job_secret(explicit: str | None, spec: _cluster.ClusterSpec) -> str:
    """The job secret (``secret=``, else PYTFCOMM_SECRET, else PYTFCOMM_SECRET_FILE's
    content), checked; "" when none.

    A job whose addresses are not all loopback must have one, unless
    PYTFCOMM_INSECURE=1 says the network is trusted (see docs/security.md).
    """
    source = "init(secret=...)"
    secret = explicit
    if secret is None:
        source, secret = "PYTFCOMM_SECRET", os.environ.get("PYTFCOMM_SECRET", "")
        path = os.environ.get("PYTFCOMM_SECRET_FILE", "").strip()
        if not secret and path:
            source, secret = f"the secret in PYTFCOMM_SECRET_FILE={path!r}", _secret_file(path)
    if not isinstance(secret, str):
        raise InvalidArgumentError(f"secret must be a str, got {type(secret).__name__}")
    if secret and len(secret) < _MIN_SECRET:
        raise ConfigError(
            f"{source} is too short ({len(secret)} characters; at least {_MIN_SECRET}): "
            "use a long random value, e.g. python -c 'import secrets; "
            "print(secrets.token_hex(32))', the same on every rank"
        )
    insecure = os.environ.get("PYTFCOMM_INSECURE", "").strip().lower()
    if insecure not in _TRUE + _FALSE:
        raise ConfigError(
            f"PYTFCOMM_INSECURE={insecure!r} is not valid: use 1 to allow a job across "
            "non-loopback addresses without a secret, or 0 / unset"
        )
    if not secret and not spec.all_loopback and insecure not in _TRUE:
        raise ConfigError(
            f"this job spans non-loopback addresses (rank 0 at {spec.addr}) but has no job "
            f"secret: {_SECRET_HINT}; or set PYTFCOMM_INSECURE=1 to run unauthenticated on "
            "a network you trust (docs/security.md)"
        )
    return secret


def _int_arg(name: str, value: object, low: int, high: int, what: str) -> None:
    """An ``init()`` integer argument: an int (not a bool) in ``low..high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"init({name}={value!r}): {name} must be an int")
    if not low <= value <= high:
        raise InvalidArgumentError(
            f"init({name}={_cluster._int_text(value)}) is out of range: {what}"
        )


def _check_job_args(rank: object, size: object, addr: object) -> None:
    """``init()``'s rank/size/addr, checked before anything reaches the core.

    Nothing given means "read the environment" (checked by _cluster, ConfigError).
    """
    if rank is None and size is None and addr is None:
        return
    missing = [n for n, v in (("rank", rank), ("size", size), ("addr", addr)) if v is None]
    if missing and missing != ["addr"]:
        raise InvalidArgumentError(
            f"init() needs rank, size and addr together; missing: {', '.join(missing)} "
            "(addr may be left out only when size=1), or none of them to read the job "
            "from the environment (docs/launching.md)"
        )
    limit = _cluster.MAX_SIZE
    _int_arg("size", size, 1, limit, f"the job size must be in 1..{limit}")
    assert isinstance(size, int)
    _int_arg("rank", rank, 0, size - 1, f"the rank must satisfy 0 <= rank < size={size}")
    if addr is None:
        if size != 1:
            raise InvalidArgumentError(
                f"init(rank={rank}, size={size}) needs addr, rank 0's rendezvous "
                '"host:port" (the same on every rank), e.g. addr="10.0.0.1:29500"'
            )
        return
    if not isinstance(addr, str):
        raise InvalidArgumentError(
            f'init(addr={addr!r}): addr must be a string "host:port", e.g. "10.0.0.1:29500"'
        )
    try:
        _, port = _cluster.parse_addr(addr, what="init(addr)")
    except ConfigError as exc:
        raise InvalidArgumentError(str(exc)) from None
    if not (1 <= port <= 65535 or (port == 0 and size == 1)):
        raise InvalidArgumentError(
            f"init(addr={addr!r}): port {port} is out of range: use a port in 1..65535 "
            "(0 only for a single-process job)"
        )


def init(
    rank: int | None = None,
    size: int | None = None,
    addr: str | None = None,
    *,
    timeout: float | None = None,
    connect_timeout: float | None = None,
    secret: str | None = None,
    transport: str | None = None,
    stall_warning: float | None = None,
) -> Communicator:
    """Join a job and return its :class:`Communicator`.

    With no arguments, the job is read from the environment: PYTFCOMM_RANK /
    PYTFCOMM_SIZE / PYTFCOMM_ADDR, TF_CONFIG, Slurm (``srun``) or MPI
    (``mpirun``) variables, else a single-process job (see docs/launching.md).
    Explicitly: ``init(rank=0, size=4, addr="127.0.0.1:29500")``, where
    ``addr`` is rank 0's rendezvous address. Blocks until every rank joined
    (``connect_timeout``, default PYTFCOMM_CONNECT_TIMEOUT or 120 s);
    ``timeout`` is the default deadline of each collective (PYTFCOMM_TIMEOUT,
    600 s). ``secret`` (default PYTFCOMM_SECRET, else the content of the file
    PYTFCOMM_SECRET_FILE names) authenticates every
    connection of the job; it is required when the job spans non-loopback
    addresses (docs/security.md). ``transport`` (default PYTFCOMM_TRANSPORT or
    ``"auto"``): ``"auto"`` uses shared memory between ranks of one host and
    TCP between hosts, ``"tcp"`` only TCP, ``"shm"`` only shared memory (every
    rank on one host). ``stall_warning`` (default PYTFCOMM_STALL_WARNING or 60 s;
    0 turns it off): after this many seconds stalled in a collective, log which
    ranks hold it back (docs/reliability.md).

    Raises :class:`InvalidArgumentError` for unusable arguments (``size`` in
    1..32767, ``0 <= rank < size``, a port in 1..65535) and :class:`ConfigError`
    for an unusable environment, naming the variable and the valid range.
    """
    if transport is not None and transport not in _TRANSPORTS:
        raise InvalidArgumentError(
            f"transport must be one of {', '.join(_TRANSPORTS)}, got {transport!r}"
        )
    if stall_warning is None:
        stall = -1.0
    elif (
        isinstance(stall_warning, bool)
        or not isinstance(stall_warning, (int, float))
        or not stall_warning >= 0
    ):
        raise InvalidArgumentError(
            f"stall_warning must be a number of seconds >= 0 (0: off), got {stall_warning!r}"
        )
    else:
        stall = float(stall_warning)
    _check_job_args(rank, size, addr)
    spec = _cluster.resolve(rank, size, addr)
    job_secret = _job_secret(secret, spec)
    host, port = spec.rendezvous
    # Every GPU path of this process (DLPack calls, TF's GPU kernels) loads NCCL
    # once, first come: name the nvidia-nccl wheel's library before any can.
    _core.set_nccl_candidates(_dlpack.nccl_candidates())
    core = _core.Communicator(
        spec.rank,
        spec.size,
        host,
        port,
        spec.bind_host,
        spec.host_id,
        _timeout(connect_timeout),
        _timeout(timeout),
        job_secret,
        transport=transport or "",
        stall_warning=stall,
    )
    global _default
    # An explicit host transport asks for GPU tensors to be staged over it.
    gpu_backend = _dlpack.BACKEND_STAGED if transport in ("tcp", "shm") else _dlpack.BACKEND_AUTO
    _default = Communicator(core, spec, gpu_backend, _timeout(timeout))
    _default._join_args = {
        "secret": job_secret,
        "transport": transport or "",
        "connect_timeout": _timeout(connect_timeout),
        "timeout": _timeout(timeout),
        "stall_warning": stall,
    }
    return _default


def default_communicator() -> Communicator | None:
    """The communicator the last :func:`init` created, unless it was closed since."""
    if _default is None or _default.closed:
        return None
    return _default


def last_communicator() -> Communicator | None:
    """The communicator the last :func:`init` created, closed or not; None before any init.

    The TensorFlow layer uses it to tell "this process never joined a job"
    (run locally) from "this process's job is closed" (raise CommClosedError).
    """
    return _default
