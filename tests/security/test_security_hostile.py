"""Hostile bytes on every listening port of a running job (issue 6).

The last rank starts late, so the others sit in bootstrap with their
listeners open. Meanwhile the test attacks every one of those listeners with
random bytes, a wrong magic, absurd fields, a missing and a wrong secret, a
replayed handshake, a flood of idle connections and a slow-loris sender.
Then the late rank arrives: the job must bootstrap, compute correct results,
and every rank must have logged the refusals without crashing.
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

import security_workers as sw
from _harness import collect, logged_refusals, start_ranks

SECRET = "hostile-test-secret-0123456789"
DELAY = 60.0  # the late rank joins when the attacks are done, or after this long


def _listening_ports(pids: list[int]) -> dict[int, tuple[str, int]]:
    """pid -> (ip, port) of each TCP listener the given processes hold."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue
    found: dict[int, tuple[str, int]] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN
            hexip, hexport = f[1].split(":")
            ip = socket.inet_ntoa(struct.pack("<I", int(hexip, 16)))
            found[inodes[f[9]]] = (ip, int(hexport, 16))
    return found


def _send(addr: tuple[str, int], payload: bytes, read: int = 0) -> bytes:
    with socket.create_connection(addr, timeout=5) as s:
        try:
            s.sendall(payload)
            return sw.recv_exact(s, read) if read else b""
        except OSError:
            return b""


def _blind_attacks(addr: tuple[str, int]) -> None:
    """Attacks that need no answer: bytes sent, connection closed."""
    _send(addr, os.urandom(4096))
    _send(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    _send(addr, struct.pack("<QIIiiII", sw.HELLO_MAGIC, 2, 1, 2**31 - 1, 2**31 - 1, 2**32 - 1, 1))
    _send(addr, struct.pack("<IIQ", 0x41544144, 0, 2**63) + os.urandom(24))


def _attacks(addr: tuple[str, int]) -> dict[str, bytes]:
    """One connection per attack; returns what each got back."""
    got: dict[str, bytes] = {}
    rng = os.urandom
    got["random"] = _send(addr, rng(4096))
    got["http"] = _send(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got["huge_fields"] = _send(
        addr, struct.pack("<QIIiiII", sw.HELLO_MAGIC, 2, 1, 2**31 - 1, 2**31 - 1, 2**32 - 1, 1)
    )
    got["frame_huge_length"] = _send(addr, struct.pack("<IIQ", 0x41544144, 0, 2**63) + rng(24))
    got["no_secret"] = _send(addr, sw.hello_bytes(sw.JOIN, 1, 4, auth=False), sw.CHALLENGE_SIZE)
    # Wrong secret: a well-formed handshake with another key.
    with socket.create_connection(addr, timeout=5) as s:
        hello = sw.hello_bytes(sw.JOIN, 2, 4)
        s.sendall(hello)
        ch = sw.recv_exact(s, sw.CHALLENGE_SIZE)
        forged = sw.mac("wrong" * 5, "connector", hello, ch)
        s.sendall(struct.pack("<II", sw.PROOF_MAGIC, 0) + forged)
        got["wrong_secret"] = sw.recv_exact(s, sw.CONFIRM_SIZE)
    # Replay: a proof that was valid for an earlier connection's challenge.
    hello = sw.hello_bytes(sw.JOIN, 3, 4)
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(hello)
        old = sw.recv_exact(s, sw.CHALLENGE_SIZE)
    recorded = struct.pack("<II", sw.PROOF_MAGIC, 0) + sw.mac(SECRET, "connector", hello, old)
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(hello)
        sw.recv_exact(s, sw.CHALLENGE_SIZE)
        s.sendall(recorded)
        got["replay"] = sw.recv_exact(s, sw.CONFIRM_SIZE)
    return got


def _slow_loris(addr: tuple[str, int], stop: threading.Event) -> None:
    try:
        with socket.create_connection(addr, timeout=5) as s:
            for b in sw.hello_bytes(sw.JOIN, 1, 4):
                if stop.wait(0.3):
                    return
                s.sendall(bytes([b]))
    except OSError:
        pass  # the listener dropped us (deadline) or closed after bootstrap


def test_job_survives_hostile_clients_on_every_listener() -> None:
    with tempfile.TemporaryDirectory(prefix="pytfcomm-hostile-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            4,
            "security_workers:slow_job",
            DELAY,
            5,
            env={"PYTFCOMM_SECRET": SECRET},
            workdir=workdir,
        )
        stop = threading.Event()
        idle: list[socket.socket] = []
        threads: list[threading.Thread] = []
        try:
            # Rank 0's rendezvous and the listeners of ranks 1 and 2 (rank 3 has none).
            deadline = time.monotonic() + 20
            ports: dict[int, tuple[str, int]] = {}
            while len(ports) < 3 and time.monotonic() < deadline:
                ports = _listening_ports([p.pid for p in procs[:3]])
                time.sleep(0.05)
            assert len(ports) == 3, ports
            for ip, _ in ports.values():
                assert ip.startswith("127."), ports  # never the wildcard address
            for addr in ports.values():
                threads.append(threading.Thread(target=_slow_loris, args=(addr, stop)))
                threads[-1].start()
                idle += [socket.create_connection(addr, timeout=5) for _ in range(20)]
                _blind_attacks(addr)
            # Until the late rank joins, only rank 0's rendezvous runs handshakes (ranks 1
            # and 2 wait for the address table; their attackers sit in the backlog and are
            # dealt with once they accept), so attacks that need an answer go to rank 0.
            root = next(a for pid, a in ports.items() if pid == procs[0].pid)
            answers = {root: _attacks(root)}
        finally:
            (workdir / "go").touch()  # let the late rank join: bootstrap completes
            outcomes = collect(procs, results, workdir, 60)
            stop.set()
            for t in threads:
                t.join(timeout=10)
            for s in idle:
                s.close()
        logs = [(workdir / f"rank{r}.log").read_text(errors="replace") for r in range(4)]
    for r in range(4):
        assert outcomes[r][0], f"rank {r}: {outcomes[r][1]}"
    for addr, got in answers.items():
        # Refusals carry a status, never a MAC; nothing else was answered.
        assert struct.unpack("<II", got["no_secret"][:8]) == (sw.CHALLENGE_MAGIC, 1), addr
        for name in ("wrong_secret", "replay"):
            magic, status = struct.unpack("<II", got[name][:8])
            assert (magic, status) == (sw.CONFIRM_MAGIC, 3), (addr, name)
            assert got[name][8:] == bytes(32), (addr, name)
        for name in ("random", "http", "huge_fields", "frame_huge_length"):
            assert got[name] == b"", (addr, name)
    # Every attacked rank logged its refusals, with the reasons: the first few one line
    # each, the rest in a summary that counts them by reason (test_security_flood.py).
    assert logged_refusals(logs[0])[1] >= 12, logs[0][-3000:]  # 4 blind + 8 in _attacks
    assert "bad magic" in logs[0] and "replayed handshake" in logs[0], logs[0][-3000:]
    for r in (1, 2):
        assert "bad magic" in logs[r], logs[r][-3000:]
