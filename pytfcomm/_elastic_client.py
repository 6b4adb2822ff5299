"""A rank's side of ``pytfcomm-run --elastic``'s membership service (docs/elastic.md).

One question per connection (:mod:`pytfcomm._elastic_wire`): the launcher greets with a
nonce, the rank sends its sealed question, the launcher answers sealed under the rank's
own nonce. :func:`ask` is that exchange; :func:`take` makes a membership reply this
process's job (the variables ``init()`` reads); :func:`admit_joiner` is what ``init()``
does first in a process the launcher started to join a running job. Shared by
:mod:`pytfcomm.elastic` and :mod:`pytfcomm._init`; imports neither.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from typing import Any

from ._args import connect_wait_s
from ._cluster import format_addr, parse_addr
from ._elastic_wire import (
    ADDR_VAR,
    EPOCH_VAR,
    ID_VAR,
    JOINER_VAR,
    WireError,
    read_line,
    sealed,
    unseal,
)
from .errors import MembershipError

__all__ = ["admit_joiner", "ask", "take"]

#: How much longer a joiner waits for its answer than it asks the launcher to wait for
#: its admission: the launcher's answer to a joiner it gave up on still arrives.
JOIN_SLACK_S = 15.0


def ask(addr: str, secret: str, body: dict[str, Any], wait_s: float, what: str) -> dict[str, Any]:
    """The launcher's answer to ``body`` (with a fresh nonce of ours added), within
    ``wait_s`` seconds; MembershipError naming ``what`` was asked when none comes."""
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
            sock.sendall(sealed(secret, "req", nonce, {**body, "nonce": cnonce}))
            return unseal(secret, "rep", cnonce, read_line(sock, deadline))
    except (OSError, WireError) as exc:
        raise MembershipError(
            f"could not get {what} from the launcher at {addr} within {wait_s:g} s ({exc}): "
            "is pytfcomm-run still running? The job cannot go on in this process; rerun "
            "it, or use --restarts as a fallback"
        ) from None


def take(reply: dict[str, Any]) -> None:
    """Make the membership in ``reply`` this process's job: the variables ``init()``
    reads, as pytfcomm-run would have set them (MembershipError when it is refused or
    malformed)."""
    if not reply.get("ok"):
        raise MembershipError(str(reply.get("error", "the launcher refused this process")))
    fields = ("rank", "size", "epoch", "local_rank", "local_size", "cross_rank", "cross_size")
    values = [reply.get(k) for k in fields]
    new_addr = reply.get("addr")
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if len(ints) != len(fields) or not isinstance(new_addr, str):
        raise MembershipError(f"the launcher's reply is malformed: {reply!r}")
    rank, size, new_epoch = ints[:3]
    local_rank, local_size, cross_rank, cross_size = (str(v) for v in ints[3:])
    os.environ.update(
        PYTFCOMM_RANK=str(rank),
        PYTFCOMM_SIZE=str(size),
        PYTFCOMM_ADDR=new_addr,
        PYTFCOMM_LOCAL_RANK=local_rank,
        PYTFCOMM_LOCAL_SIZE=local_size,
        HOROVOD_RANK=str(rank),
        HOROVOD_SIZE=str(size),
        HOROVOD_LOCAL_RANK=local_rank,
        HOROVOD_LOCAL_SIZE=local_size,
        HOROVOD_CROSS_RANK=cross_rank,
        HOROVOD_CROSS_SIZE=cross_size,
    )
    os.environ[EPOCH_VAR] = str(new_epoch)
    if "TF_CONFIG" in os.environ:
        os.environ["TF_CONFIG"] = _tf_config(rank, size, new_addr)


def _tf_config(rank: int, size: int, addr: str) -> str:
    """TF_CONFIG for rank ``rank`` of ``size``, as pytfcomm-run writes it (a worker list,
    task = the rank), so that a ``pytfcomm.MultiWorkerMirroredStrategy`` made after a
    re-forming sees the new job's size and this task. Every worker is named by the
    rendezvous host with port 0: no TF server listens (pytfcomm's strategy starts none,
    and the communicator finds the hosts itself)."""
    worker = format_addr(parse_addr(addr, what=ADDR_VAR)[0], 0)
    config = {"cluster": {"worker": [worker] * size}, "task": {"type": "worker", "index": rank}}
    return json.dumps(config, separators=(",", ":"))


def admit_joiner(secret: str | None, connect_timeout: float | None) -> None:
    """In a process ``pytfcomm-run --elastic`` started to join a running job: wait (at
    most ``connect_timeout``, default PYTFCOMM_CONNECT_TIMEOUT) until the ranks admit it
    at a commit point, and take that membership. Nothing in any other process."""
    if os.environ.get(JOINER_VAR) != "1":
        return
    addr = os.environ.get(ADDR_VAR, "").strip()
    try:
        worker = int(os.environ.get(ID_VAR, ""))
    except ValueError:
        worker = -1
    key = secret or os.environ.get("PYTFCOMM_SECRET", "")
    if not addr or worker < 0 or not key:
        raise MembershipError(
            f"{JOINER_VAR}=1, but {ADDR_VAR}, {ID_VAR} or PYTFCOMM_SECRET is missing: only "
            "pytfcomm-run --elastic --host-discovery-script starts joiners (docs/elastic.md)"
        )
    wait = connect_wait_s(connect_timeout)
    body = {"op": "join", "id": worker, "epoch": -1, "wait": wait}
    reply = ask(addr, key, body, wait + JOIN_SLACK_S, "this joiner's admission")
    take(reply)
    del os.environ[JOINER_VAR]  # admitted: a later init() (reform) is an ordinary one
