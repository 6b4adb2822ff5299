"""Horovod's process-level API on a pytfcomm Communicator (no TensorFlow here).

``init`` joins the job through :func:`pytfcomm.init` (``pytfcomm-run``,
Slurm, MPI or TF_CONFIG variables) and makes the communicator the default of
pytfcomm's TF ops; the rank queries read it. Build queries answer for
pytfcomm: no MPI, no Gloo, no ROCm/CCL/DDL; NCCL and CUDA as built.
"""

from __future__ import annotations

from collections import deque
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
    """Horovod's process set: a group of ranks whose collectives run among themselves.

    ``ProcessSet([0, 2])`` names the group; ``hvd.init(process_sets=[...])`` or
    ``hvd.add_process_set`` registers it (on every rank, in the same order),
    which gives it a ``process_set_id`` and, on its members, a pytfcomm
    sub-communicator (:meth:`pytfcomm.Communicator.split`). Collectives take
    ``process_set=``; roots are global ranks, as in Horovod.
    """

    def __init__(self, ranks_or_comm: Sequence[int] | Any = None) -> None:
        self.process_set_id: int | None = None
        self.ranks: list[int] | None = None
        self._comm: Any = None  # the sub-communicator, on members once registered
        if ranks_or_comm is not None:
            if isinstance(ranks_or_comm, (str, bytes)) or not isinstance(ranks_or_comm, Sequence):
                raise NotImplementedError(
                    "ProcessSet(mpi_communicator): pytfcomm has no MPI; give a list of ranks"
                )
            if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks_or_comm):
                raise ValueError("ProcessSet should be initialized with a list of process ranks")
            self.ranks = sorted(ranks_or_comm)

    def _is_global(self) -> bool:
        return self.process_set_id == 0

    def _invalidate(self) -> None:
        self.process_set_id = None
        self._comm = None

    def size(self) -> int | None:
        """Number of processes in the set (None until registered)."""
        if self._is_global():
            return size()
        if self.process_set_id is None or self.ranks is None:
            return None
        return len(self.ranks)

    def rank(self) -> int | None:
        """This process's rank within the set (None until registered, or off the set)."""
        if self._is_global():
            return rank()
        if self.process_set_id is None or self.ranks is None or rank() not in self.ranks:
            return None
        return self.ranks.index(rank())

    def included(self) -> bool | None:
        """Whether this process belongs to the set (None when it has no ranks yet)."""
        if self._is_global():
            return True
        return None if self.ranks is None else rank() in self.ranks

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcessSet) and self.process_set_id == other.process_set_id

    def __hash__(self) -> int:
        return hash(self.process_set_id)

    def __repr__(self) -> str:
        # Horovod's text; pytfcomm has no MPI communicators, so mpi_comm is always None.
        return (
            f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"
        )


global_process_set = ProcessSet()
global_process_set.process_set_id = 0

# Registered non-global sets by id, the ids of removed sets (given again first, oldest
# first, as Horovod's process-set table does), and the next new id; the same on every
# rank because registration and removal are collective and in the same order everywhere.
_sets: dict[int, ProcessSet] = {}
_free_ids: deque[int] = deque()
_next_id = 1


class NotAMemberError(ValueError):
    """A collective on a process set that does not include this rank."""


def _registered(process_set: Any) -> ProcessSet:
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"process_set must be an hvd.ProcessSet, got {process_set!r}")
    ps = _sets.get(process_set.process_set_id or -1)
    if ps is None or ps.ranks != process_set.ranks:
        raise ValueError(
            f"{process_set} is not registered: pass it to hvd.init(process_sets=[...]) or "
            "hvd.add_process_set() on every rank first"
        )
    return ps


def process_set_communicator(process_set: Any) -> Any:
    """The communicator ``process_set``'s collectives run on: the job's for the global
    set, its sub-communicator for a registered one. ValueError for an unregistered
    set; :class:`NotAMemberError` when this rank is not in it."""
    comm = _require()
    if process_set is None or process_set is global_process_set:
        return comm
    if isinstance(process_set, ProcessSet) and process_set.process_set_id == 0:
        return comm
    ps = _registered(process_set)
    if ps._comm is None:
        raise NotAMemberError(
            f"rank {rank()} is not in {ps}: only its members may run collectives on it"
        )
    return ps._comm


def process_set_includes_me(process_set: Any) -> bool:
    """Whether this rank is in ``process_set`` (ValueError when it is not registered)."""
    _require()
    if process_set is None or process_set is global_process_set:
        return True
    if isinstance(process_set, ProcessSet) and process_set.process_set_id == 0:
        return True
    return _registered(process_set)._comm is not None


def check_process_set(process_set: Any) -> None:
    """Raise unless ``process_set`` can run collectives on this rank."""
    process_set_communicator(process_set)


def set_root(comm: Any, root_rank: int) -> int:
    """The rank within ``comm`` of global rank ``root_rank`` (Horovod's roots are global)."""
    group = getattr(comm, "parent_ranks", None)
    if group is None:
        return int(root_rank)
    if int(root_rank) not in group:
        raise NotAMemberError(f"root rank {root_rank} is not in the process set {group}")
    return group.index(int(root_rank))


def process_set_by_id(process_set_id: int) -> ProcessSet:
    """The registered set with this id (0: the global one); ValueError otherwise."""
    _require()
    if process_set_id == 0:
        return global_process_set
    if process_set_id not in _sets:
        raise ValueError(f"no process set with id {process_set_id} is registered")
    return _sets[process_set_id]


def _register(ps: ProcessSet) -> ProcessSet:
    global _next_id
    comm = _require()
    if ps.ranks is None:
        raise ValueError("a process set needs a list of ranks")
    bad = [r for r in ps.ranks if not 0 <= r < comm.size]
    if bad or len(set(ps.ranks)) != len(ps.ranks) or not ps.ranks:
        raise ValueError(f"{ps}: ranks must be distinct ranks in [0, {comm.size})")
    if ps.ranks == list(range(comm.size)) or any(o.ranks == ps.ranks for o in _sets.values()):
        raise ValueError(f"Attempted to add a duplicate process set: {ps}")
    sub = comm.split(ps.ranks)
    if _free_ids:
        new_id = _free_ids.popleft()
    else:
        new_id, _next_id = _next_id, _next_id + 1
    ps.process_set_id, ps._comm = new_id, sub
    _sets[new_id] = ps
    return ps


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a process set after ``init`` and return it (Horovod's dynamic sets).

    Collective: every rank calls it with the same ranks, in the same order of
    calls. A set with the same ranks as a registered one (or every rank: the
    global set) raises ValueError, as in Horovod.
    """
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    return _register(ps)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister ``process_set`` and close its sub-communicator; False for the global
    set or a set that is not registered. Collective: every rank calls it (a barrier
    first, so no member closes while another still runs collectives on it)."""
    if process_set is global_process_set or process_set.process_set_id in (None, 0):
        return False
    comm = _require()
    ps = _sets.get(process_set.process_set_id or -1)
    if ps is None:
        return False
    comm.barrier(name="pytfcomm.horovod.remove_process_set")
    del _sets[ps.process_set_id or -1]
    _free_ids.append(ps.process_set_id or -1)
    if ps._comm is not None:
        ps._comm.close()
    ps._invalidate()
    process_set._invalidate()
    return True


def _drop_process_sets() -> None:
    global _next_id
    for ps in list(_sets.values()):
        if ps._comm is not None:
            ps._comm.close()
        ps._invalidate()
    _sets.clear()
    _free_ids.clear()
    _next_id = 1
    global_process_set.ranks = None


def _get_process_set_ids_and_ranks() -> dict[int, list[int]]:
    """``{process_set_id: ranks}`` of every registered set, the global one (0) included
    (Horovod's internal view, which its process-set tests read)."""
    _require()
    out = {0: list(range(size()))}
    out.update({i: list(ps.ranks or []) for i, ps in sorted(_sets.items())})
    return out


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

    ``comm`` (an mpi4py communicator or a list of ranks in Horovod) raises
    NotImplementedError: pytfcomm runs over every rank of the job that
    ``pytfcomm-run`` (or srun/mpirun/TF_CONFIG) set up. ``process_sets``: a
    ProcessSet or list of them, registered in order (see :func:`add_process_set`);
    a set equal to an earlier one is invalidated (its id stays None), as in Horovod.
    """
    global _comm, _owned, _topology
    if comm is not None:
        raise NotImplementedError(
            "hvd.init(comm=...): pytfcomm.horovod joins the job from its environment "
            "(pytfcomm-run, srun, mpirun or TF_CONFIG); call hvd.init() without comm"
        )
    sets = [] if process_sets is None else process_sets
    sets = list(sets) if isinstance(sets, (list, tuple)) else [sets]
    for ps in sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError(f"hvd.init(process_sets=...): {ps!r} is not an hvd.ProcessSet")
    if _comm is not None and not _comm.closed:
        _init_process_sets(sets)
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
    global_process_set.ranks = list(range(_comm.size))
    _init_process_sets(sets)
    try:
        from ..tf import collectives
    except ImportError:  # TensorFlow not installed: the NumPy side still works
        return
    collectives.set_default_communicator(_comm)


def _init_process_sets(sets: list[ProcessSet]) -> None:
    for ps in sets:
        if ps is global_process_set or ps.process_set_id is not None:
            continue
        if ps.ranks == list(range(size())) or any(o.ranks == ps.ranks for o in _sets.values()):
            ps._invalidate()  # a clone of a registered set (Horovod does the same)
            continue
        _register(ps)


def shutdown() -> None:
    """Leave the job: close the communicator ``init`` made (``init`` may be called again).

    A communicator the script made itself with :func:`pytfcomm.init` stays open.
    """
    global _comm
    if _comm is None:
        return
    _drop_process_sets()
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
    """Start (or resume) the timeline at run time (Horovod's ``start_timeline``).

    pytfcomm writes one Chrome-trace file per rank: ``file_path`` with
    ``.rank<N>`` before the extension (or ``%r`` replaced by the rank), which
    ``python -m pytfcomm timeline merge`` joins into one (docs/timeline.md).
    Call it on every rank. ``mark_cycles`` is accepted (pytfcomm has no
    background cycles to mark; every collective is an event).
    """
    _require().start_timeline(file_path)


def stop_timeline() -> None:
    """Stop the timeline (Horovod's ``stop_timeline``); its files are complete."""
    _require().stop_timeline()


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
