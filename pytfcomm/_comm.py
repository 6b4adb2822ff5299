"""The :class:`Communicator` class: one job's ranks and the NumPy collectives between them.

Users reach it through :func:`pytfcomm.init` and ``pytfcomm.communicator``; argument
checks live in ``_args``, joining a job in ``_init``, the job secret in ``_secret``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import numpy as np

from . import _cluster, _core, _dlpack
from ._args import (
    check_input,
    check_name,
    check_out,
    check_out_rows,
    check_rank,
    check_splits,
    timeout_s,
)
from ._dtypes import algorithm_code, dtype_code, op_code
from ._fusion import AllreduceHandle, as_array_list, check_fusion_bytes, list_tag
from ._rows import padded_blocks, reduce_scatter_rows
from ._split import split as _split_group
from .errors import InvalidArgumentError

__all__ = ["Communicator", "shape_tag"]

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


def shape_tag(shape: tuple[int, ...]) -> int:
    """A 32-bit digest of a shape, carried with collectives to catch shape mismatches."""
    tag = _SHAPE_TAGS.get(shape) if type(shape) is tuple else None
    if tag is None:
        tag = _shape_tag(tuple(int(d) for d in shape))
        if type(shape) is tuple and len(_SHAPE_TAGS) < 4096:
            _SHAPE_TAGS[shape] = tag  # the training loop's few shapes, as given
    return tag


# shape_tag's memo of the tuples callers pass (DLPack shapes: tuples of ints).
_SHAPE_TAGS: dict[tuple, int] = {}


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
        check_rank(rank, self.size, "rank")
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
            shape = tuple(x.shape)
            return _dlpack.collective(
                self, "allreduce", x, out, shape, args, kw, timeout_s(timeout), shape_tag(shape)
            )
        x = check_input(x)
        code = op_code(op)
        alg = algorithm_code(algorithm)
        out = _output_like(x) if out is None else check_out(out, x.shape, x.dtype, x)
        self._core.allreduce(
            x,
            out,
            dtype_code(x.dtype),
            code,
            alg,
            timeout_s(timeout),
            _shape_tag(x.shape),
            check_name(name),
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
        xs = [check_input(x, f"arrays[{i}]") for i, x in enumerate(arrays)]
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
            outs = [check_out(o, x.shape, x.dtype, x) for o, x in zip(outs, xs, strict=True)]
        self._core.allreduce_many(
            xs,
            outs,
            [dtype_code(x.dtype) for x in xs],
            code,
            alg,
            timeout_s(timeout),
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
        x = check_input(x)
        code = op_code(op)
        alg = algorithm_code(algorithm)
        out = _output_like(x) if out is None else check_out(out, x.shape, x.dtype, x)
        core = self._core.allreduce_async(
            x, out, dtype_code(x.dtype), code, alg, timeout_s(timeout), _shape_tag(x.shape)
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
            check_rank(root, self.size, "root")
            kw = {"root": root, "timeout": timeout}
            return _dlpack.collective(
                self,
                "broadcast",
                x,
                out,
                tuple(x.shape),
                (int(root),),
                kw,
                timeout_s(timeout),
                shape_tag(tuple(x.shape)),
            )
        x = check_input(x)
        check_rank(root, self.size, "root")
        if out is None:
            out = x.copy()
        else:
            out = check_out(out, x.shape, x.dtype, x)
            if out is not x and self.rank == root:
                np.copyto(out, x)
        self._core.broadcast(
            out,
            dtype_code(out.dtype),
            int(root),
            timeout_s(timeout),
            shape_tag(out.shape),
            check_name(name),
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
                timeout_s(timeout),
                shape_tag(tuple(x.shape)),
            )
        x = check_input(x)
        if x.ndim == 0:
            raise InvalidArgumentError("allgather needs an array with at least one dimension")
        code = dtype_code(x.dtype)
        row = x.shape[1:]
        row_elems = _row_elems(row)
        # The dtype and the row's shape must agree across ranks; the digest has both.
        tag = _shape_tag((code, x.ndim, *row))
        if out is not None:
            out = check_out_rows(out, x)
        if row_elems == 0:
            # Rows of no bytes: gather one byte per row, so that the counts are rows.
            _, counts = self._core.allgatherv(
                np.zeros(x.shape[0], np.uint8),
                dtype_code(np.dtype(np.uint8)),
                timeout_s(timeout),
                tag,
                check_name(name),
            )
            shape = (int(counts.sum()), *row)
            if out is None:
                return np.empty(shape, x.dtype)
            if out.shape != shape:
                raise InvalidArgumentError(f"out has shape {out.shape} but the result has {shape}")
            return out
        if out is not None:
            _, counts = self._core.allgatherv(
                x, code, timeout_s(timeout), tag, check_name(name), out, True
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
        data, _ = self._core.allgatherv(x, code, timeout_s(timeout), tag, check_name(name), guess)
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
        x = check_input(x)
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
            split_rows = check_splits(splits, self.size, rows)
        code = dtype_code(x.dtype)
        row = x.shape[1:]
        row_elems = _row_elems(row)
        tag = _shape_tag((code, x.ndim, *row))
        dtype = x.dtype
        if row_elems == 0:
            # Rows of no bytes: send one byte per row so that the counts are rows.
            x, code, row_elems = np.zeros(rows, np.uint8), dtype_code(np.dtype(np.uint8)), 1
        data, counts = self._core.alltoallv(
            x, split_rows * row_elems, code, timeout_s(timeout), tag, check_name(name)
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
                timeout_s(timeout),
                shape_tag(tuple(x.shape)),
            )
        x = check_input(x)
        code = op_code(op)
        if x.ndim == 0:
            raise InvalidArgumentError("reduce_scatter needs an array with at least one dimension")
        shares = reduce_scatter_rows(x.shape[0], self.size)
        row = x.shape[1:]
        shape = (shares[self.rank], *row)
        out = (
            _new_output(shape, x.dtype)
            if out is None
            else check_out(out, shape, x.dtype, x, in_place=False)
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
            timeout_s(timeout),
            shape_tag(x.shape),
            check_name(name),
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
        return _split_group(self, ranks, timeout)

    def barrier(self, timeout: float | None = None, name: str | None = None) -> None:
        """Return once every rank has entered the barrier (``name``: see :meth:`allreduce`)."""
        self._core.barrier(timeout_s(timeout), check_name(name))

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
        return int(self._core.join(timeout_s(timeout)))

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
