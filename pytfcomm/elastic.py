"""Elastic jobs: survivors of a lost rank go on in the same processes (docs/elastic.md).

Under ``pytfcomm-run --elastic``, a rank whose collective raises
:class:`~pytfcomm.PeerLostError` (the recoverable error; a rank that was between
collectives when the job failed gets :class:`~pytfcomm.CommClosedError` from its next
call, and TF ops raise ``tf.errors``: :func:`recoverable` tells all of these apart from
other errors) calls :func:`reform`: it closes
the old communicator, asks the launcher for the next membership (every survivor gets
the same: new rank, size and rendezvous address), and joins a new communicator with
the same secret, transport and deadlines. The caller then rolls its state back to its
last commit and makes the ranks agree on it (a broadcast from rank 0)::

    comm = pytfcomm.init()
    step, w = 0, w0
    saved = (step, w.copy())
    while step < steps:
        try:
            w -= lr * comm.allreduce(grad(w, step)) / comm.size
            step += 1
            saved = (step, w.copy())                   # commit
        except pytfcomm.CommError as exc:
            if not pytfcomm.elastic.recoverable(exc):
                raise
            comm = pytfcomm.elastic.reform()           # same process, new ranks
            w = comm.broadcast(saved[1].copy(), root=0)  # rank 0's commit
            step = int(comm.broadcast(np.array([saved[0]]), root=0)[0])

``hvd.elastic.run`` does the same around a Horovod ``State``. A process the launcher
declared lost, or one that cannot go on (fewer than ``--min-np`` left), gets
:class:`~pytfcomm.MembershipError`.

With ``--host-discovery-script``, workers also join at commit points: after each
commit every rank calls :func:`hosts_updated` and, when it says True, :func:`reform`,
then takes rank 0's commit. The joiner's ``pytfcomm.init()`` waits for that commit
point, returns its communicator in the new membership (``epoch() > 0``: it joined a
running job) and takes rank 0's commit with the same broadcasts.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TypeVar

import numpy as np

from . import _elastic_client as _client
from . import _init
from ._comm import Communicator
from ._elastic_wire import ADDR_VAR, EPOCH_VAR, GROW_VAR, ID_VAR, WINDOW_VAR
from .errors import CommError, ConfigError, InvalidArgumentError, MembershipError, PeerLostError

_T = TypeVar("_T")

__all__ = ["broadcast_commit", "enabled", "epoch", "hosts_updated", "recoverable", "reform"]

_SLACK_S = 30.0  # beyond the launcher's window: its own work, a loaded machine
_POLL_S = 10.0  # hosts_updated(): how long rank 0 waits for the launcher's answer
_NOT_ELASTIC = (
    "this process was not started by pytfcomm-run --elastic, so no launcher can place it "
    "in a new membership: start the job with pytfcomm-run --elastic --min-np A ... "
    "(docs/elastic.md)"
)


def enabled() -> bool:
    """Whether this process was started by ``pytfcomm-run --elastic``."""
    return bool(os.environ.get(ADDR_VAR, "").strip())


def epoch() -> int:
    """The membership epoch this process is in: 0 as started, one more per re-forming."""
    try:
        return int(os.environ.get(EPOCH_VAR, "0") or 0)
    except ValueError:
        return 0


def recoverable(exc: BaseException) -> bool:
    """Whether ``exc`` means the job lost a member, so that :func:`reform` can go on.

    True for :class:`~pytfcomm.PeerLostError` (what every call waiting when the job
    failed raises), and for a :class:`~pytfcomm.CommError` or a TensorFlow
    ``tf.errors.OpError`` (a TF op's failure) raised while the job's communicator is
    closed by an error (a call made after the failure). False otherwise: a wrong
    argument, a mismatch, a communicator the program closed itself.
    """
    if isinstance(exc, PeerLostError):
        return True
    comm = _init.last_communicator()
    if comm is None or not comm.closed or not comm._core.failure:
        return False
    if isinstance(exc, CommError):
        return True
    tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")
    return tf_errors is not None and isinstance(exc, tf_errors.OpError)


def _env_number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        raise ConfigError(f"{name}={os.environ.get(name)!r} is not a number") from None


def _ask(addr: str, secret: str, worker: int, known: int, wait_s: float) -> dict[str, object]:
    """The launcher's answer to "which membership comes after epoch ``known``?"."""
    body = {"op": "rejoin", "id": worker, "epoch": known}
    return _client.ask(addr, secret, body, wait_s, "the next membership")


def _poll(addr: str, secret: str, worker: int, known: int, wait_s: float) -> bool:
    """Whether the launcher has joiners waiting for the next commit point (rank 0 asks)."""
    body = {"op": "poll", "id": worker, "epoch": known}
    reply = _client.ask(addr, secret, body, wait_s, "whether workers wait to join")
    if not reply.get("ok"):
        raise MembershipError(str(reply.get("error", "the launcher refused this process")))
    return reply.get("pending") is True


def hosts_updated(comm: Communicator | None = None, timeout: float = _POLL_S) -> bool:
    """Whether workers wait to join the job at this commit point (Horovod's
    ``hosts_updated``): call it on every rank, at the same point, right after a commit.

    When True, call :func:`reform` on every rank: the new communicator has the waiting
    joiners appended after the current ranks (which keep their order), and every rank
    takes rank 0's committed state, as after a loss. Only rank 0 asks the launcher
    (within ``timeout`` seconds); its answer reaches every rank by a broadcast on
    ``comm`` (default: the job's communicator), so all ranks decide alike. A joiner
    that arrives after rank 0 asked is admitted at the next commit point.

    False at once (no question, no broadcast) unless this job was started by
    ``pytfcomm-run --elastic --host-discovery-script``, the only way workers join.
    Raises :class:`~pytfcomm.MembershipError` on every rank when rank 0 cannot reach
    the launcher.
    """
    if os.environ.get(GROW_VAR) != "1" or not enabled():
        return False
    comm = comm if comm is not None else _init.default_communicator()
    if comm is None:
        raise MembershipError(
            "hosts_updated() needs the job's communicator: call pytfcomm.init() first"
        )
    answer, why = 0, ""
    if comm.rank == 0:
        try:
            worker = int(os.environ.get(ID_VAR, ""))
            secret = (getattr(comm, "_join_args", None) or {}).get("secret") or os.environ.get(
                "PYTFCOMM_SECRET", ""
            )
            answer = int(_poll(os.environ[ADDR_VAR].strip(), secret, worker, epoch(), timeout))
        except (ValueError, MembershipError) as exc:
            answer, why = -1, str(exc)
    flag = int(comm.broadcast(np.array([answer], np.int64), root=0)[0])
    if flag < 0:
        raise MembershipError(
            why or "rank 0 could not ask the launcher whether workers wait to join (see its error)"
        )
    return flag == 1


def reform(timeout: float | None = None) -> Communicator:
    """Leave the broken communicator and join the survivors' new one; returns it.

    Call it on every surviving rank after a :class:`~pytfcomm.PeerLostError`, or on
    every rank when :func:`hosts_updated` says True (the joiners are then appended
    after the current ranks). Blocks
    until the launcher decided the next membership (within its ``--elastic-window``,
    or ``timeout`` seconds: default that window plus 30 s) and the new communicator is
    connected (``connect_timeout`` of the first ``init``). The new communicator is the
    default one from now on (TF ops, ``hvd``); ranks are renumbered in their old order.

    Raises :class:`~pytfcomm.MembershipError` when this process is not started by
    ``pytfcomm-run --elastic``, was declared lost (it missed the check-in window), when
    fewer than ``--min-np`` ranks are left, or when the launcher does not answer in time.
    """
    addr = os.environ.get(ADDR_VAR, "").strip()
    if not addr:
        raise MembershipError(_NOT_ELASTIC)
    try:
        worker = int(os.environ.get(ID_VAR, ""))
    except ValueError:
        raise MembershipError(f"{ID_VAR} is unset or not a number: " + _NOT_ELASTIC) from None
    old = _init.last_communicator()
    join = dict(getattr(old, "_join_args", None) or {})
    secret = join.pop("secret", None) or os.environ.get("PYTFCOMM_SECRET", "")
    if not secret:
        raise MembershipError("no job secret to authenticate to the launcher with: " + _NOT_ELASTIC)
    if old is not None:
        old.close()
    wait_s = timeout if timeout is not None else _env_number(WINDOW_VAR, 10.0) + _SLACK_S
    # The job as pytfcomm-run would have started it: init() reads these as usual.
    _client.take(_ask(addr, secret, worker, epoch(), wait_s))
    return _init.init(
        secret=secret,
        transport=join.get("transport") or None,
        timeout=_given(join.get("timeout")),
        connect_timeout=_given(join.get("connect_timeout")),
        stall_warning=_given(join.get("stall_warning"), zero=True),
    )


def _given(value: object, zero: bool = False) -> float | None:
    """An ``init`` argument as the first ``init`` resolved it; None for "the default"
    (stored as a negative number)."""
    if isinstance(value, (int, float)) and (value > 0 or (zero and value == 0)):
        return float(value)
    return None


def broadcast_commit(commit: _T, comm: Communicator | None = None) -> _T:
    """Rank 0's ``commit`` on every rank, in one broadcast: what each rank takes after
    :func:`reform` (or after :func:`hosts_updated` says True).

    ``commit`` is this rank's last commit: NumPy arrays and Python or NumPy numbers
    (``bool``, ``int``, ``float``), nested in tuples, lists and dicts (e.g.
    ``(step, [v.numpy() for v in variables])``). Every rank passes the same structure,
    shapes and dtypes (a rank whose bytes differ in number raises
    :class:`~pytfcomm.MismatchError`, on every rank); each gets a new structure of the
    same kind with rank 0's values (arrays are new arrays, numbers keep their type).
    ``comm``: the job's communicator (default: the one :func:`reform` returned).
    """
    comm = comm if comm is not None else _init.default_communicator()
    if comm is None:
        raise MembershipError(
            "broadcast_commit() needs the job's communicator: call pytfcomm.init() or "
            "pytfcomm.elastic.reform() first"
        )
    leaves: list[np.ndarray] = []
    _flatten(commit, leaves)
    parts: list[np.ndarray] = [leaf.reshape(-1).view(np.uint8) for leaf in leaves]
    buf = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    got = comm.broadcast(buf, root=0, name="elastic.commit")
    it = iter(leaves)
    offset = [0]

    def take(like: np.ndarray) -> np.ndarray:
        n = like.nbytes
        out = got[offset[0] : offset[0] + n].view(like.dtype).reshape(like.shape).copy()
        offset[0] += n
        return out

    return _unflatten(commit, it, take)


def _flatten(value: Any, out: list[np.ndarray]) -> None:
    if isinstance(value, dict):
        for key in value:
            _flatten(value[key], out)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _flatten(item, out)
    elif isinstance(value, (np.ndarray, np.generic, bool, int, float)) and not (
        np.asarray(value).dtype.hasobject
    ):
        out.append(np.asarray(value, order="C"))  # 0-d stays 0-d
    else:
        raise InvalidArgumentError(
            "broadcast_commit() takes NumPy arrays and numbers nested in tuples, lists and "
            f"dicts; got a {type(value).__name__} (convert tensors with .numpy() first)"
        )


def _unflatten(value: Any, leaves: Any, take: Any) -> Any:
    if isinstance(value, dict):
        return type(value)((k, _unflatten(v, leaves, take)) for k, v in value.items())
    if isinstance(value, (tuple, list)):
        items = [_unflatten(v, leaves, take) for v in value]
        if hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*items)
        return type(value)(items)
    got = take(next(leaves))
    if isinstance(value, np.ndarray):
        return got
    if isinstance(value, np.generic):
        return got[()]
    return type(value)(got[()])
