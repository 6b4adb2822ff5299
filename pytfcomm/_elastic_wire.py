"""The messages between ``pytfcomm-run --elastic`` and its ranks (docs/elastic.md).

One request and one reply per connection, each a single line of JSON (nothing is
unpickled), at most :data:`MAX_LINE` bytes, authenticated with the job secret:

1. the launcher sends ``{"v": 1, "nonce": N}`` (a fresh random nonce);
2. the rank sends ``{"body": B, "mac": HMAC(secret, "req" | N | B)}``, where ``B`` holds
   what it asks (``op``), its worker id, the membership epoch it knows and a nonce ``C``
   of its own;
3. the launcher answers ``{"body": R, "mac": HMAC(secret, "rep" | C | R)}``.

The questions (``op``): ``rejoin``, the next membership after a loss or at a commit
point that admits joiners (``pytfcomm.elastic.reform``); ``join``, the first membership
of a process started to join a running job (``pytfcomm.init`` in a joiner; it names how
long it waits, ``wait``); ``poll``, whether joiners wait to be admitted
(``pytfcomm.elastic.hosts_updated``, asked by rank 0 only).

A request whose MAC does not verify gets no answer (the connection is closed), so only a
holder of the secret learns anything; a reply that does not verify is refused by the
rank, so only the launcher can place it in a job. Bodies are hashed in one canonical
JSON form (sorted keys, no spaces). This module is shared by both sides and opens no
sockets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from typing import Any

__all__ = [
    "ADDR_VAR",
    "EPOCH_VAR",
    "GROW_VAR",
    "ID_VAR",
    "JOINER_VAR",
    "MAX_LINE",
    "VERSION",
    "WINDOW_VAR",
    "WireError",
    "canonical",
    "mac",
    "read_line",
    "sealed",
    "unseal",
]

VERSION = 1
#: The longest line either side accepts, in bytes.
MAX_LINE = 4096
#: Variables ``pytfcomm-run --elastic`` gives every rank.
ADDR_VAR = "PYTFCOMM_ELASTIC_ADDR"  # host:port of the launcher's membership service
ID_VAR = "PYTFCOMM_ELASTIC_ID"  # the worker id: the rank it was started as
WINDOW_VAR = "PYTFCOMM_ELASTIC_WINDOW"  # the check-in window, seconds
EPOCH_VAR = "PYTFCOMM_ELASTIC_EPOCH"  # the membership epoch this process joined
GROW_VAR = "PYTFCOMM_ELASTIC_GROW"  # "1": the job may grow (--host-discovery-script)
JOINER_VAR = "PYTFCOMM_ELASTIC_JOINER"  # "1": started to join a running job at a commit


class WireError(Exception):
    """A message that is malformed, too long, late or not authentic."""


def canonical(body: dict[str, Any]) -> bytes:
    """``body`` as the bytes its MAC covers."""
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def mac(secret: str, kind: str, nonce: str, body: dict[str, Any]) -> str:
    """HMAC-SHA256 (hex) of ``kind | nonce | canonical(body)`` under the job secret."""
    msg = kind.encode() + b"\0" + nonce.encode() + b"\0" + canonical(body)
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def sealed(secret: str, kind: str, nonce: str, body: dict[str, Any]) -> bytes:
    """One line: ``body`` and its MAC."""
    line = json.dumps({"body": body, "mac": mac(secret, kind, nonce, body)}).encode() + b"\n"
    if len(line) > MAX_LINE:
        raise WireError(f"message of {len(line)} bytes is over {MAX_LINE}")
    return line


def unseal(secret: str, kind: str, nonce: str, line: bytes) -> dict[str, Any]:
    """The body of a sealed ``line``; WireError when it is malformed or its MAC is wrong."""
    try:
        msg = json.loads(line)
        body, tag = msg["body"], msg["mac"]
    except (ValueError, TypeError, KeyError) as exc:
        raise WireError(f"malformed message ({exc.__class__.__name__})") from None
    if not isinstance(body, dict) or not isinstance(tag, str):
        raise WireError("malformed message")
    if not hmac.compare_digest(tag, mac(secret, kind, nonce, body)):
        raise WireError("the message failed the job-secret check")
    return body


def read_line(sock: socket.socket, deadline: float) -> bytes:
    """One newline-terminated line from ``sock`` by ``deadline`` (``time.monotonic()``).

    WireError when the peer closes first, the line is over :data:`MAX_LINE` bytes, or
    the deadline passes.
    """
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WireError("timed out waiting for a message")
        sock.settimeout(min(left, 1.0))
        try:
            chunk = sock.recv(MAX_LINE + 1 - len(buf))
        except TimeoutError:
            continue
        if not chunk:
            raise WireError("the connection closed before a whole message came")
        buf += chunk
        end = buf.find(b"\n")
        if end >= 0:
            return bytes(buf[:end])
        if len(buf) > MAX_LINE:
            raise WireError(f"a message over {MAX_LINE} bytes")
