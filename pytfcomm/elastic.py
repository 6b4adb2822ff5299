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
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time

from . import _init
from ._cluster import parse_addr
from ._comm import Communicator
from ._elastic_wire import (
    ADDR_VAR,
    EPOCH_VAR,
    ID_VAR,
    WINDOW_VAR,
    WireError,
    read_line,
    sealed,
    unseal,
)
from .errors import CommError, ConfigError, MembershipError, PeerLostError

__all__ = ["enabled", "epoch", "recoverable", "reform"]

_SLACK_S = 30.0  # beyond the launcher's window: its own work, a loaded machine
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
    host, port = parse_addr(addr, what=ADDR_VAR)
    deadline = time.monotonic() + wait_s
    cnonce = secrets.token_hex(16)
    try:
        with socket.create_connection((host, port), timeout=min(wait_s, 10.0)) as sock:
            hello = read_line(sock, deadline)
            try:
                nonce = json.loads(hello)["nonce"]
            except (ValueError, KeyError, TypeError):
                raise WireError("the launcher's greeting is malformed") from None
            if not isinstance(nonce, str):
                raise WireError("the launcher's greeting is malformed")
            body = {"op": "rejoin", "id": worker, "epoch": known, "nonce": cnonce}
            sock.sendall(sealed(secret, "req", nonce, body))
            return unseal(secret, "rep", cnonce, read_line(sock, deadline))
    except (OSError, WireError) as exc:
        raise MembershipError(
            f"could not get the next membership from the launcher at {addr} within "
            f"{wait_s:g} s ({exc}): is pytfcomm-run still running? The job cannot go on "
            "in this process; rerun it, or use --restarts as a fallback"
        ) from None


def reform(timeout: float | None = None) -> Communicator:
    """Leave the broken communicator and join the survivors' new one; returns it.

    Call it on every surviving rank after a :class:`~pytfcomm.PeerLostError`. Blocks
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
    reply = _ask(addr, secret, worker, epoch(), wait_s)
    if not reply.get("ok"):
        raise MembershipError(str(reply.get("error", "the launcher refused this process")))
    rank, size, new_addr = reply.get("rank"), reply.get("size"), reply.get("addr")
    new_epoch = reply.get("epoch")
    if not (
        isinstance(rank, int)
        and isinstance(size, int)
        and isinstance(new_addr, str)
        and isinstance(new_epoch, int)
    ):
        raise MembershipError(f"the launcher's reply is malformed: {reply!r}")
    # The job as pytfcomm-run would have started it: init() reads these as usual.
    os.environ.update(
        PYTFCOMM_RANK=str(rank),
        PYTFCOMM_SIZE=str(size),
        PYTFCOMM_ADDR=new_addr,
        PYTFCOMM_LOCAL_RANK=str(rank),
        PYTFCOMM_LOCAL_SIZE=str(size),
        HOROVOD_RANK=str(rank),
        HOROVOD_SIZE=str(size),
        HOROVOD_LOCAL_RANK=str(rank),
        HOROVOD_LOCAL_SIZE=str(size),
        HOROVOD_CROSS_RANK="0",
        HOROVOD_CROSS_SIZE="1",
    )
    os.environ[EPOCH_VAR] = str(new_epoch)
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
