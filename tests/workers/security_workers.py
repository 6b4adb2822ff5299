"""Rank functions for the security tests (tests/security/test_security_*.py)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np

import pytfcomm


def slow_job(rank: int, size: int, addr: str, delay: float, rounds: int) -> dict:
    """The last rank joins late -- once the file `go` appears in the working
    directory (the test creates it when its attacks are done), or after
    `delay` s at most -- so the others' listeners stay open for an attacker
    to hit while they wait; then check real collectives."""
    if rank == size - 1:
        deadline = time.monotonic() + delay
        while not os.path.exists("go") and time.monotonic() < deadline:
            time.sleep(0.05)
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=30) as comm:
        for i in range(rounds):
            x = np.arange(1000, dtype=np.int64) * (rank + 1) + i
            y = comm.allreduce(x)
            want = np.arange(1000, dtype=np.int64) * sum(range(1, size + 1)) + i * size
            if not np.array_equal(y, want):
                raise AssertionError(f"round {i}: wrong allreduce result")
            b = comm.broadcast(np.full(10, rank, np.int32), root=i % size)
            if not (b == i % size).all():
                raise AssertionError(f"round {i}: wrong broadcast result")
        return {"pid": os.getpid(), "ok": True}


def expect_error(
    rank: int, size: int, addr: str, secrets: list[str], connect_timeout: float
) -> dict:
    """init() with this rank's secret from `secrets`; report the error, if any."""
    try:
        with pytfcomm.init(
            rank=rank, size=size, addr=addr, secret=secrets[rank], connect_timeout=connect_timeout
        ) as comm:
            comm.barrier(timeout=10)
    except pytfcomm.CommError as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return {"type": None}


def lone_rank0(rank: int, size: int, addr: str) -> dict:
    """Rank 0 of a 2-rank job whose rank 1 is the test itself (a Python
    re-implementation of the handshake); it then goes away."""
    # Rank 1 leaves right after the address table: rank 0 notices either in
    # the setup that follows bootstrap (stream offers) or in its first collective.
    try:
        with pytfcomm.init(rank=0, size=2, addr=addr, connect_timeout=20, timeout=10) as comm:
            comm.barrier()
    except pytfcomm.CommError as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return {"type": None}


def claim_rank(rank: int, size: int, addr: str, claimed: list[int], sizes: list[int]) -> dict:
    """Process `rank` joins as rank claimed[rank] of a job of size sizes[rank]."""
    try:
        with pytfcomm.init(
            rank=claimed[rank], size=sizes[rank], addr=addr, connect_timeout=15
        ) as comm:
            comm.barrier(timeout=10)
    except pytfcomm.CommError as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return {"type": None}


# ---- a Python re-implementation of the wire handshake (docs/security.md), used
# by the tests to play a hostile or an honest client with hashlib's HMAC.

HELLO_MAGIC = 0x314D4D4F43465450


def _protocol_version() -> int:
    """kProtocolVersion, read from csrc/transport/wire.h (its one place)."""
    wire = Path(__file__).resolve().parents[2] / "csrc" / "transport" / "wire.h"
    found = re.search(r"kProtocolVersion = (\d+);", wire.read_text())
    assert found, f"no kProtocolVersion in {wire}"
    return int(found.group(1))


PROTOCOL_VERSION = _protocol_version()
CHALLENGE_MAGIC, PROOF_MAGIC, CONFIRM_MAGIC = 0x4C4C4843, 0x464F5250, 0x4D524643
HELLO_SIZE, CHALLENGE_SIZE, PROOF_SIZE, CONFIRM_SIZE = 448, 48, 40, 40
JOIN, DATA = 1, 2


def hello_bytes(
    purpose: int, rank: int, size: int, port: int = 0, auth: bool = True, nonce: bytes = b""
) -> bytes:
    import struct

    head = struct.pack(
        "<QIIiiII", HELLO_MAGIC, PROTOCOL_VERSION, purpose, rank, size, port, int(auth)
    )
    nonce = (nonce or os.urandom(32))[:32].ljust(32, b"\0")
    return head + nonce + b"127.0.0.1".ljust(256, b"\0") + b"attacker".ljust(128, b"\0")


def mac(secret: str, role: str, hello: bytes, challenge: bytes) -> bytes:
    import hashlib
    import hmac

    label = f"pytfcomm-v2|{role}|".encode()
    return hmac.new(secret.encode(), label + hello + challenge, hashlib.sha256).digest()


def recv_exact(sock, n: int) -> bytes:  # type: ignore[no-untyped-def]
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def bound_where_asked(rank: int, size: int, addr: str, real_addr: str) -> dict:
    """Join at `real_addr`; rank 0 checks its port is closed on 127.0.0.1."""
    import socket

    out: dict = {}
    if rank == 0:
        port = int(real_addr.rsplit(":", 1)[1])
        import threading

        def probe() -> None:
            time.sleep(0.5)  # rank 0 is listening, waiting for rank 1
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                out["other_loopback_refused"] = False
            except OSError:
                out["other_loopback_refused"] = True

        t = threading.Thread(target=probe)
        t.start()
    else:
        time.sleep(1.0)
    with pytfcomm.init(rank=rank, size=size, addr=real_addr, connect_timeout=20) as comm:
        comm.barrier()
    if rank == 0:
        t.join()
    return out
