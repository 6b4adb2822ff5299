"""Joining a job: :func:`init` resolves the cluster (environment or arguments),
checks the secret and makes the :class:`~pytfcomm.communicator.Communicator`.

It also remembers the last communicator made (:func:`default_communicator`,
:func:`last_communicator`), which the TensorFlow layer uses when none is passed.
"""

from __future__ import annotations

from . import _cluster, _core, _dlpack
from ._args import timeout_s
from ._comm import Communicator
from ._elastic_client import admit_joiner
from ._job_check import check_job_agreement, describe
from ._secret import job_secret
from .errors import ConfigError, InvalidArgumentError

__all__ = ["default_communicator", "init", "last_communicator"]

# The communicator the last init() returned, used by the TensorFlow layer
# when no communicator is passed explicitly.
_default: Communicator | None = None
_TRANSPORTS = ("auto", "tcp", "shm")


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
    PYTFCOMM_SIZE / PYTFCOMM_ADDR, TF_CONFIG, torchrun-style RANK / WORLD_SIZE,
    Slurm (``srun``) or MPI
    (``mpirun``) variables, else a single-process job (see docs/launching.md).
    Once connected, every rank checks that all read the same size, source and launcher
    job, each rank once (ConfigError on every rank otherwise, naming what each read).
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

    In a process ``pytfcomm-run --elastic --host-discovery-script`` started to join a
    running job, it first waits (up to ``connect_timeout``) until the ranks admit it at
    a commit point, then joins with the rank, size and address the launcher gives
    (docs/elastic.md); :class:`MembershipError` when that does not happen in time.

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
    if rank is None and size is None and addr is None:
        # A joiner of pytfcomm-run --elastic: its rank, size and address come from the
        # launcher once the ranks admit it (waits up to connect_timeout).
        admit_joiner(secret, connect_timeout)
    spec = _cluster.resolve(rank, size, addr)
    secret_ = job_secret(secret, spec, connect_timeout)
    host, port = spec.rendezvous
    # Every GPU path of this process (DLPack calls, TF's GPU kernels) loads NCCL
    # once, first come: name the nvidia-nccl wheel's library before any can.
    _core.set_nccl_candidates(_dlpack.nccl_candidates())
    try:
        core = _core.Communicator(
            spec.rank,
            spec.size,
            host,
            port,
            spec.bind_host,
            spec.host_id,
            timeout_s(connect_timeout),
            timeout_s(timeout),
            secret_,
            transport=transport or "",
            stall_warning=stall,
        )
    except ConfigError as exc:  # rank 0 refused a size or rank: say what this rank read
        raise ConfigError(f"{exc} [this process: {describe(spec)}]") from None
    global _default
    # An explicit host transport asks for GPU tensors to be staged over it.
    gpu_backend = _dlpack.BACKEND_STAGED if transport in ("tcp", "shm") else _dlpack.BACKEND_AUTO
    comm = Communicator(core, spec, gpu_backend, timeout_s(timeout))
    try:
        check_job_agreement(comm, spec, connect_timeout)
    except BaseException:
        comm.close()
        raise
    _default = comm
    _default._join_args = {
        "secret": secret_,
        "transport": transport or "",
        "connect_timeout": timeout_s(connect_timeout),
        "timeout": timeout_s(timeout),
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
