"""Pickled objects between ranks, sealed with the job secret (docs/security.md, "Objects").

The data frames of a collective are not integrity-protected after the handshake, and
a pickle runs code when loaded: a payload that crosses the network is therefore sealed
before it is sent and checked before anything unpickles it. It travels as
``payload || tag``, where ``tag = HMAC-SHA256(secret, LABEL | call | payload)`` and
``call`` names the kind of call, this communicator's session, the call's number, the
sender's rank and the group size. The session id is the SHA-256 of a random 16-byte
nonce from every rank, exchanged at the first sealed call of each thread on each
communicator (each rank checks that its own nonce came back). So a payload altered in
transit, or replayed from another call, rank or session (an earlier job with the same
secret), fails the check and is never unpickled: :class:`AuthenticationError`.

Without a job secret (a loopback job, or ``PYTFCOMM_INSECURE=1``) payloads travel
unsealed: only local users, or the network the user declared trusted, can reach them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import weakref
from typing import Any

import numpy as np

from .errors import AuthenticationError

__all__ = ["TAG_BYTES", "Seal", "seal_for"]

LABEL = b"pytfcomm-object-v1"
TAG_BYTES = 32
_NONCE_BYTES = 16

# communicator -> thread name -> [session id, calls made]: calls pair per thread name
# on every rank, as the communicator's collectives do.
_sessions: weakref.WeakKeyDictionary[Any, dict[str, list[Any]]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class Seal:
    """Seals and checks the payloads of one object call (see the module doc)."""

    def __init__(self, key: bytes, kind: str, context: bytes, size: int) -> None:
        self._key = key
        self._kind = kind
        self._context = context
        self._size = size

    @property
    def sealed(self) -> bool:
        """Whether payloads carry a tag (the job has a secret)."""
        return bool(self._key)

    def _tag(self, sender: int, payload: bytes | memoryview) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        mac.update(b"%s|%s|%d|%d|" % (LABEL, self._context, sender, self._size))
        mac.update(payload)
        return mac.digest()

    def wrap(self, payload: bytes, sender: int) -> bytes:
        """``payload`` as rank ``sender`` sends it: with its tag when sealed."""
        return payload + self._tag(sender, payload) if self._key else payload

    def unwrap(self, data: bytes | memoryview, sender: int) -> memoryview:
        """The payload of ``data`` received from rank ``sender`` (a view, no copy), after
        checking its tag; AuthenticationError (nothing unpickled) when it does not verify."""
        view = memoryview(data).cast("B")
        if not self._key:
            return view
        if len(data) < TAG_BYTES or not hmac.compare_digest(
            self._tag(sender, view[:-TAG_BYTES]), bytes(view[-TAG_BYTES:])
        ):
            raise AuthenticationError(
                f"{self._kind}: the payload from rank {sender} failed its integrity check "
                "(HMAC-SHA256 with the job secret), so it was not unpickled: it was altered "
                "on the way or replayed from another call. Someone may be tampering with "
                "the traffic between the hosts: run the job on a network only its hosts "
                "can reach, or inside a VPN (WireGuard, IPsec); see docs/security.md"
            )
        return view[:-TAG_BYTES]


def _session(comm: Any, kind: str) -> bytes:
    """This thread's session id on ``comm``: the hash of every rank's fresh nonce."""
    nonce = os.urandom(_NONCE_BYTES)
    got = comm.allgather(np.frombuffer(nonce, dtype=np.uint8)).tobytes()
    mine = got[comm.rank * _NONCE_BYTES : (comm.rank + 1) * _NONCE_BYTES]
    if len(got) != comm.size * _NONCE_BYTES or not hmac.compare_digest(mine, nonce):
        raise AuthenticationError(
            f"{kind}: this rank's session nonce came back altered: someone may be tampering "
            "with the traffic between the hosts (docs/security.md)"
        )
    return hashlib.sha256(got).digest()


def seal_for(comm: Any, kind: str) -> Seal:
    """The :class:`Seal` of the next object call ``kind`` on ``comm`` from this thread.

    Every rank of ``comm`` must call it once per object call, in the same order per
    thread (as the call's collectives); the first call of a thread exchanges the
    session nonces (one small all-gather). The key is the job secret ``comm`` joined
    with; without one the seal does nothing.
    """
    secret = comm._join_args.get("secret", "")
    if not secret:
        return Seal(b"", kind, b"", comm.size)
    name = threading.current_thread().name
    with _lock:
        state = _sessions.setdefault(comm, {}).get(name)
    if state is None:
        state = [_session(comm, kind), 0]
        with _lock:
            _sessions[comm][name] = state
    number = state[1]
    state[1] += 1
    context = b"%s|%s|%d" % (kind.encode(), state[0].hex().encode(), number)
    return Seal(secret.encode(), kind, context, comm.size)
