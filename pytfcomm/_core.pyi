"""Type stubs of the native module ``pytfcomm._core`` (csrc/bindings/module.cc).

Arrays are validated by the Python layer (``pytfcomm/communicator.py``); these are the raw
entry points it calls. dtype/op/algorithm are the integer codes of the enums below
(``pytfcomm/_dtypes.py`` maps names to them).
Every collective releases the GIL while it runs.

tests/project/test_core_stub.py checks this file against the built module: every name, class
member and parameter name. Arguments the bindings leave unnamed (pybind11 calls them
``arg0``, ``arg1``, ... and takes them only by position) are positional-only here (``/``).
"""

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

__version__: str

class _Enum:
    """A pybind11 enum of a core code table: ``int(x)`` is the wire value."""

    __members__: ClassVar[dict[str, Any]]
    def __init__(self, value: int) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...

class DType(_Enum):
    """Element types (csrc/common/dtype.h); a name is NumPy's name."""

    float16: ClassVar[DType]
    bfloat16: ClassVar[DType]
    float32: ClassVar[DType]
    float64: ClassVar[DType]
    int8: ClassVar[DType]
    uint8: ClassVar[DType]
    int32: ClassVar[DType]
    int64: ClassVar[DType]
    bool: ClassVar[DType]

class ReduceOp(_Enum):
    """Reduction operators (csrc/common/dtype.h)."""

    sum: ClassVar[ReduceOp]
    mean: ClassVar[ReduceOp]
    min: ClassVar[ReduceOp]
    max: ClassVar[ReduceOp]
    prod: ClassVar[ReduceOp]

class Algorithm(_Enum):
    """All-reduce algorithms (csrc/common/algorithm.h)."""

    auto: ClassVar[Algorithm]
    ring: ClassVar[Algorithm]
    hierarchical: ClassVar[Algorithm]
    recursive_doubling: ClassVar[Algorithm]
    oneshot: ClassVar[Algorithm]
    halving_doubling: ClassVar[Algorithm]

class AsyncHandle:
    """A queued all-reduce (``Communicator.allreduce_async``)."""

    def done(self) -> bool: ...
    def wait(self, timeout: float = -1.0) -> bool:
        """True once finished (raises its error); False if ``timeout`` (>= 0) passed first."""

class Communicator:
    def __init__(
        self,
        rank: int,
        size: int,
        root_host: str,
        root_port: int,
        bind_host: str = "",
        host_id: str = "",
        connect_timeout: float = -1.0,
        timeout: float = -1.0,
        secret: str = "",
        transport: str = "",
        stall_warning: float = -1.0,
    ) -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def local_rank(self) -> int: ...
    @property
    def local_size(self) -> int: ...
    @property
    def num_hosts(self) -> int: ...
    @property
    def root_port(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def handle(self) -> int: ...
    @property
    def timeline_path(self) -> str:
        """This rank's timeline file, or '' when off."""
    def start_timeline(self, pattern: str) -> str: ...
    def stop_timeline(self) -> None: ...
    @property
    def failure(self) -> str:
        """Why an error closed the communicator ('' otherwise)."""
    def host_of(self, rank: int, /) -> str: ...
    def last_algorithm(self) -> str: ...
    def first_steps_ahead(self) -> tuple[int, int]: ...
    def stream_states(self) -> int: ...
    def choose_allreduce(self, bytes: int, /) -> str: ...
    def allreduce(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        dtype: int,
        op: int,
        algorithm: int,
        timeout: float,
        shape_tag: int = 0,
        name: str = "",
    ) -> None:
        """``name``: the key that matches this call across ranks (docs/negotiation.md);
        '' = the calling thread's name and call count."""
    def allreduce_fast(self, x: object, out: object, op: object, algorithm: object, /) -> bool:
        """All-reduce of the common NumPy call (native dtype, C-contiguous, names as given);
        False, having done nothing, for any other call."""
    def allreduce_many(
        self,
        srcs: list[np.ndarray],
        dsts: list[np.ndarray],
        dtypes: list[int],
        op: int,
        algorithm: int,
        timeout: float,
        tag: int = 0,
        fusion_bytes: int = 0,
        direct_bytes: int = 0,
    ) -> None:
        """Fused all-reduce of every srcs[i] into dsts[i]; 0 thresholds = PYTFCOMM_FUSION_*."""
    def allreduce_async(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        dtype: int,
        op: int,
        algorithm: int,
        timeout: float,
        tag: int = 0,
    ) -> AsyncHandle: ...
    def broadcast(
        self,
        buf: np.ndarray,
        dtype: int,
        root: int,
        timeout: float,
        shape_tag: int = 0,
        name: str = "",
    ) -> None: ...
    def allgather(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        dtype: int,
        timeout: float,
        shape_tag: int = 0,
        name: str = "",
    ) -> None: ...
    def allgatherv(
        self,
        src: np.ndarray,
        dtype: int,
        timeout: float,
        shape_tag: int = 0,
        name: str = "",
        dst: np.ndarray | None = None,
        dst_only: bool = False,
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """(result bytes, or None when it went into ``dst``; element count per rank)."""
    def alltoallv(
        self,
        src: np.ndarray,
        splits: np.ndarray,
        dtype: int,
        timeout: float,
        shape_tag: int = 0,
        name: str = "",
    ) -> tuple[np.ndarray, np.ndarray]: ...
    def reduce_scatter(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        dtype: int,
        op: int,
        timeout: float,
        shape_tag: int = 0,
        name: str = "",
    ) -> None: ...
    def barrier(self, timeout: float, name: str = "") -> None: ...
    def join(self, timeout: float) -> int: ...
    def close(self) -> None: ...

# cuda-only: begin
# What follows exists as written only in CUDA builds (build_info()["cuda"] is True;
# csrc/bindings/gpu_bindings.cc). A build without CUDA keeps the name GpuCommunicator,
# as a function that raises ConfigError, so tests/project/test_core_stub.py checks the members
# and parameters of this section only in CUDA builds.
class GpuCommunicator:
    """Collectives on CUDA DLPack tensors (NCCL or staging); only in CUDA builds.

    In a build without CUDA, calling ``GpuCommunicator(comm)`` raises
    :class:`pytfcomm.ConfigError` saying so.
    """

    def __init__(self, comm: Communicator, /) -> None: ...
    def allreduce(
        self,
        src: Any,
        dst: Any,
        op: int,
        algorithm: int,
        backend: int,
        timeout: float,
        shape_tag: int = 0,
    ) -> None: ...
    def broadcast(
        self, src: Any, dst: Any, root: int, backend: int, timeout: float, shape_tag: int = 0
    ) -> None: ...
    def allgather(
        self, src: Any, dst: Any, size: int, backend: int, timeout: float, shape_tag: int = 0
    ) -> None: ...
    def reduce_scatter(
        self,
        src: Any,
        dst: Any,
        op: int,
        size: int,
        backend: int,
        timeout: float,
        shape_tag: int = 0,
    ) -> None: ...
    def last_backend(self) -> str: ...
    def close(self) -> None: ...

# cuda-only: end

def build_info() -> dict[str, Any]: ...
def params() -> list[tuple[str, str]]: ...
def param_table() -> list[dict[str, str | None]]:
    """Every PYTFCOMM_* variable the core reads (common/param_table.def): name, env, type,
    default, range, read ('init' or 'first use'), doc, value (None when not valid) and error."""

def gpu_info(nccl_candidates: list[str] = ...) -> dict[str, Any]: ...
def set_nccl_candidates(paths: list[str], /) -> None: ...
def register_fast_dtype(descr: np.dtype, code: int, /) -> None:
    """Let allreduce_fast take arrays of this dtype object (codes as in _dtypes.py)."""

def cached_empty(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array from the output-buffer cache, handed back when freed."""

def output_cache_stats() -> dict[str, int]:
    """The output-buffer cache: ``hits``, ``misses``, ``idle_bytes``, ``in_use_bytes``."""

def watch_sigint() -> bool:
    """Put pytfcomm's SIGINT handler in front of Python's, once per process: Ctrl-C then
    stops collectives that TF ops wait for (docs/reliability.md). True when installed now."""

def unattended_waits() -> int:
    """How many collectives submitted by TF ops are pending in this process."""

def shape_digest(shape: Sequence[int]) -> int:
    """zlib.crc32(repr(tuple(shape)).encode()): a collective's shape tag (also the fast path's)."""

def shapes_digest(shapes: Sequence[Sequence[int]]) -> int:
    """zlib.crc32(repr([tuple(s) for s in shapes]).encode()): a fused list's shape tag."""

def error_table() -> list[tuple[str, str, str]]:
    """(ErrorKind enumerator, pytfcomm.errors class, TF status) of every error kind."""
