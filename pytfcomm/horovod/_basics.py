"""Horovod's process-level API on a pytfcomm Communicator (no TensorFlow here).

``init`` joins the job through :func:`pytfcomm.init` (``pytfcomm-run``,
Slurm, MPI or TF_CONFIG variables) and makes the communicator the default of
pytfcomm's TF ops; the rank queries read it. Build queries answer for
pytfcomm: no MPI, no Gloo, no ROCm/CCL/DDL; NCCL and CUDA as built.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "Adasum",
    "Average",
    "Max",
    "Min",
    "ProcessSet",
    "Product",
    "Sum",
    "add_process_set",
    "ccl_built",
    "check_num_rank_power_of_2",
    "communicator",
    "cross_rank",
    "cross_size",
    "cuda_built",
    "ddl_built",
    "global_process_set",
    "gloo_built",
    "gloo_enabled",
    "handle_average_backwards_compatibility",
    "init",
    "is_homogeneous",
    "is_initialized",
    "local_rank",
    "local_size",
    "mpi_built",
    "mpi_enabled",
    "mpi_threads_supported",
    "nccl_built",
    "rank",
    "remove_process_set",
    "rocm_built",
    "shutdown",
    "size",
    "start_timeline",
    "stop_timeline",
]

# Horovod's reduction op constants (the values of its C++ ReduceOp enum).
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."

_comm: Any = None
_owned = False  # whether init() made _comm (shutdown closes only those)
_topology: dict[str, Any] = {}


def _require() -> Any:
    if _comm is None or _comm.closed:
        raise ValueError(NOT_INITIALIZED)
    return _comm


def communicator() -> Any:
    """The pytfcomm Communicator behind this API (raises ValueError before ``init``)."""
    return _require()


class ProcessSet:
    """Horovod's process set. pytfcomm supports only the global one for now.

    ``ProcessSet(ranks)`` can be built, but passing one that is not the
    global set to a collective, or to ``init``/``add_process_set``, raises
    NotImplementedError: pytfcomm's engine runs every collective over all
    ranks of the job (start a separate ``pytfcomm.init`` job per group instead).
    """

    def __init__(self, ranks_or_comm: Sequence[int] | Any = None) -> None:
        self.process_set_id: int | None = None
        self.ranks: list[int] | None = None
        if ranks_or_comm is not None:
            if not isinstance(ranks_or_comm, Sequence):
                raise NotImplementedError(
                    "ProcessSet(mpi_communicator): pytfcomm has no MPI; give a list of ranks"
                )
            self.ranks = sorted(int(r) for r in ranks_or_comm)

    def _is_global(self) -> bool:
        return self.process_set_id == 0

    def size(self) -> int | None:
        """Number of processes in the set (None before ``init`` registered it)."""
        if self._is_global():
            return size()
        return None if self.ranks is None else len(self.ranks)

    def rank(self) -> int | None:
        """This process's rank within the set (None when not a member)."""
        if self._is_global():
            return rank()
        if self.ranks is None or rank() not in self.ranks:
            return None
        return self.ranks.index(rank())

    def included(self) -> bool | None:
        """Whether this process belongs to the set."""
        if self._is_global():
            return True
        return None if self.ranks is None else rank() in self.ranks

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id

    def __hash__(self) -> int:
        return hash(self.process_set_id)

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet()
global_process_set.process_set_id = 0

_PROCESS_SET_MSG = (
    "pytfcomm.horovod supports only the global process set for now: every pytfcomm "
    "collective runs over all ranks of the job. Use hvd.global_process_set (the default), "
    "or start one pytfcomm job per group of ranks."
)


def check_process_set(process_set: Any) -> None:
    """Raise NotImplementedError for any process set but the global one."""
    if process_set is None or process_set is global_process_set:
        return
    if isinstance(process_set, ProcessSet) and process_set.process_set_id == 0:
        return
    if isinstance(process_set, ProcessSet) and process_set.ranks is not None and _comm is not None:
        if process_set.ranks == list(range(size())):
            return  # all ranks: the global set under another name
    raise NotImplementedError(_PROCESS_SET_MSG)


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Horovod's ``add_process_set``: only a set of every rank (the global one) is accepted."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    _require()
    if ps.ranks is not None and ps.ranks == list(range(size())):
        return global_process_set
    raise NotImplementedError(_PROCESS_SET_MSG)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Horovod's ``remove_process_set``: the global set cannot be removed (returns False)."""
    if process_set is global_process_set:
        return False
    raise NotImplementedError(_PROCESS_SET_MSG)


def _compute_topology(comm: Any) -> dict[str, Any]:
    n = comm.size
    if comm.num_hosts <= 1:
        return {"cross_rank": 0, "cross_size": 1, "homogeneous": True}
    hosts = [comm.host_of(r) for r in range(n)]
    order: dict[str, int] = {}
    local_ranks = []
    for h in hosts:
        local_ranks.append(order.get(h, 0))
        order[h] = order.get(h, 0) + 1
    if len(order) != comm.num_hosts or local_ranks[comm.rank] != comm.local_rank:
        # Hosts named differently than the core groups them: assume block placement.
        ls = comm.local_size
        return {"cross_rank": comm.rank // ls, "cross_size": n // ls, "homogeneous": n % ls == 0}
    mine = local_ranks[comm.rank]
    peers = [r for r in range(n) if local_ranks[r] == mine]
    return {
        "cross_rank": peers.index(comm.rank),
        "cross_size": len(peers),
        "homogeneous": len(set(order.values())) == 1,
    }


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Join the job (idempotent): :func:`pytfcomm.init` from the environment, or the
    communicator an earlier ``pytfcomm.init()`` of this process made.

    ``comm`` (an mpi4py communicator or a list of ranks in Horovod) and
    non-global ``process_sets`` raise NotImplementedError: pytfcomm runs over
    every rank of the job that ``pytfcomm-run`` (or srun/mpirun/TF_CONFIG) set up.
    """
    global _comm, _owned, _topology
    if comm is not None:
        raise NotImplementedError(
            "hvd.init(comm=...): pytfcomm.horovod joins the job from its environment "
            "(pytfcomm-run, srun, mpirun or TF_CONFIG); call hvd.init() without comm"
        )
    if process_sets not in (None, [], ()):
        sets = process_sets if isinstance(process_sets, (list, tuple)) else [process_sets]
        for ps in sets:
            if ps is not global_process_set:
                raise NotImplementedError(_PROCESS_SET_MSG)
    if _comm is not None and not _comm.closed:
        return
    from .. import communicator as comm_module

    existing = comm_module.default_communicator()
    if existing is not None:
        # The script joined the job with pytfcomm.init() already: a second
        # rendezvous would fail; share that communicator (shutdown leaves it open).
        _comm, _owned = existing, False
    else:
        _comm, _owned = comm_module.init(), True
    _topology = _compute_topology(_comm)
    try:
        from ..tf import collectives
    except ImportError:  # TensorFlow not installed: the NumPy side still works
        return
    collectives.set_default_communicator(_comm)


def shutdown() -> None:
    """Leave the job: close the communicator ``init`` made (``init`` may be called again).

    A communicator the script made itself with :func:`pytfcomm.init` stays open.
    """
    global _comm
    if _comm is None:
        return
    comm, _comm = _comm, None
    try:
        from ..tf import collectives

        if collectives.job_communicator() is comm:
            collectives.set_default_communicator(None)
    except ImportError:
        pass
    if _owned:
        comm.close()


def is_initialized() -> bool:
    """Whether ``init`` ran (and ``shutdown`` did not since)."""
    return _comm is not None and not _comm.closed


def size() -> int:
    """Number of processes in the job."""
    return _require().size


def rank() -> int:
    """This process's rank in ``[0, size())``."""
    return _require().rank


def local_size() -> int:
    """Number of processes on this host."""
    return _require().local_size


def local_rank() -> int:
    """This process's index among the processes of its host."""
    return _require().local_rank


def cross_size() -> int:
    """Number of hosts that have a process with this process's local rank."""
    _require()
    return int(_topology["cross_size"])


def cross_rank() -> int:
    """This host's index among the hosts that have a process with this local rank."""
    _require()
    return int(_topology["cross_rank"])


def is_homogeneous() -> bool:
    """Whether every host runs the same number of processes."""
    _require()
    return bool(_topology["homogeneous"])


def mpi_threads_supported() -> bool:
    """Horovod: whether MPI was initialised with MPI_THREAD_MULTIPLE. pytfcomm has no MPI."""
    _require()
    return False


def mpi_enabled() -> bool:
    """False: pytfcomm does not use MPI (it reads mpirun's variables to find its rank)."""
    return False


def mpi_built() -> bool:
    """False: pytfcomm is not built with MPI."""
    return False


def gloo_enabled() -> bool:
    """False: pytfcomm's own TCP/shared-memory transports stand where Gloo's would."""
    return False


def gloo_built() -> bool:
    """False: pytfcomm is not built with Gloo."""
    return False


def _build_info() -> dict[str, Any]:
    from .. import _core

    return dict(_core.build_info())


def cuda_built() -> bool:
    """Whether pytfcomm's core was built with CUDA support."""
    return bool(_build_info().get("cuda"))


def nccl_built() -> int:
    """Horovod returns the NCCL version it was built with, else 0; pytfcomm loads NCCL at
    run time when built with CUDA, so this is 1 for a CUDA build (NCCL usable if found), else 0.
    """
    info = _build_info()
    return 1 if (info.get("nccl") or info.get("cuda")) else 0


def rocm_built() -> bool:
    """False: pytfcomm has no ROCm support."""
    return False


def ccl_built() -> bool:
    """False: pytfcomm has no oneCCL support."""
    return False


def ddl_built() -> bool:
    """False: pytfcomm has no IBM DDL support."""
    return False


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Not supported: pytfcomm's timeline is chosen when the job starts.

    Set ``PYTFCOMM_TIMELINE=/path/prefix`` in the environment before
    ``hvd.init()`` (``pytfcomm-run -x PYTFCOMM_TIMELINE=...``); see docs/timeline.md.
    """
    _require()
    current = _comm.timeline_path if _comm is not None else ""
    raise NotImplementedError(
        "hvd.start_timeline: pytfcomm cannot start a timeline at run time; set "
        "PYTFCOMM_TIMELINE=<path prefix> in the environment before hvd.init() "
        f"(docs/timeline.md). This rank's timeline: {current or 'off'}"
    )


def stop_timeline() -> None:
    """Not supported: the PYTFCOMM_TIMELINE timeline runs until the job ends."""
    _require()
    raise NotImplementedError(
        "hvd.stop_timeline: pytfcomm's timeline (PYTFCOMM_TIMELINE, set before hvd.init()) "
        "runs until hvd.shutdown(); it cannot be stopped at run time (docs/timeline.md)"
    )


def handle_average_backwards_compatibility(op: Any, average: Any) -> int:
    """Horovod's rule for the deprecated ``average=`` argument: ``op`` wins; both is an error."""
    if op is not None:
        if average is not None:
            raise ValueError(
                "The op parameter supersedes average. Please provide only one of them."
            )
        return op
    if average is not None:
        import warnings

        warnings.warn(
            "Parameter `average` has been replaced with `op` and will be removed",
            DeprecationWarning,
            stacklevel=3,
        )
        return Average if average else Sum
    return Average


def check_num_rank_power_of_2(num_rank: int) -> bool:
    """Whether ``num_rank`` is a power of two."""
    return num_rank > 0 and (num_rank & (num_rank - 1)) == 0
