"""Job-secret authentication (docs/security.md): jobs with one secret run,
ranks with another secret or none are refused with AuthenticationError, jobs
across non-loopback addresses need a secret, and a Python implementation of
the handshake (hashlib's HMAC) interoperates with the C++ one."""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import time
from pathlib import Path

import pytest
import security_workers as sw
from _harness import collect, run_ranks, start_ranks

import pytfcomm

SECRET = "test-secret-0123456789abcdef"


def test_job_with_a_secret_runs() -> None:
    results = run_ranks(3, "security_workers:slow_job", 0.0, 3, env={"PYTFCOMM_SECRET": SECRET})
    assert all(r["ok"] for r in results)


@pytest.mark.parametrize("bad", ["another-secret-0123456789", ""])
def test_rank_with_wrong_or_no_secret_is_refused(bad: str) -> None:
    outcomes = run_ranks(
        2, "security_workers:expect_error", [SECRET, bad], 3.0, allow_failure=True, timeout=60
    )
    (ok0, rank0), (ok1, rank1) = outcomes
    assert ok0 and ok1, outcomes
    assert rank1["type"] == "AuthenticationError", rank1
    assert "PYTFCOMM_SECRET" in rank1["message"], rank1
    # Rank 0 cannot tell a misconfigured rank from a stranger: it refuses the
    # connection, logs it, and keeps waiting until its connect deadline.
    assert rank0["type"] == "CommTimeoutError", rank0


def test_non_loopback_job_needs_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTFCOMM_SECRET", raising=False)
    monkeypatch.delenv("PYTFCOMM_INSECURE", raising=False)
    with pytest.raises(pytfcomm.ConfigError, match="PYTFCOMM_SECRET") as info:
        pytfcomm.init(rank=1, size=2, addr="10.255.255.1:29500", connect_timeout=0.2)
    assert "PYTFCOMM_INSECURE=1" in str(info.value)
    # The explicit opt-out lets it proceed to connecting, which then fails one
    # way or another (nothing of ours is there), but not for want of a secret.
    monkeypatch.setenv("PYTFCOMM_INSECURE", "1")
    with pytest.raises(pytfcomm.CommError) as info:
        pytfcomm.init(rank=1, size=2, addr="10.255.255.1:29500", connect_timeout=0.2)
    assert "PYTFCOMM_SECRET" not in str(info.value)
    monkeypatch.setenv("PYTFCOMM_INSECURE", "maybe")
    with pytest.raises(pytfcomm.ConfigError, match="PYTFCOMM_INSECURE"):
        pytfcomm.init(rank=1, size=2, addr="10.255.255.1:29500", connect_timeout=0.2)


def test_short_secret_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTFCOMM_SECRET", "hunter2")
    with pytest.raises(pytfcomm.ConfigError, match="too short"):
        pytfcomm.init(rank=0, size=1)


def _secret_file(tmp_path: Path, content: str, name: str = "job.secret") -> Path:
    path = tmp_path / name
    path.write_text(content)
    path.chmod(0o600)
    return path


def test_secret_file_holds_the_job_secret(tmp_path: Path) -> None:
    """Rank 0 reads PYTFCOMM_SECRET_FILE, rank 1 gets PYTFCOMM_SECRET: one job only if
    the file's content (its newline dropped) is the secret."""
    path = _secret_file(tmp_path, SECRET + "\n")
    from_file = {"PYTFCOMM_SECRET": "", "PYTFCOMM_SECRET_FILE": str(path)}
    results = run_ranks(
        2, "security_workers:slow_job", 0.0, 2,
        per_rank_env=[from_file, {"PYTFCOMM_SECRET": SECRET}], timeout=60,
    )  # fmt: skip
    assert all(r["ok"] for r in results)
    outcomes = run_ranks(
        2, "security_workers:slow_job", 0.0, 2, allow_failure=True, timeout=60,
        per_rank_env=[{**from_file, "PYTFCOMM_CONNECT_TIMEOUT": "3"},
                      {"PYTFCOMM_SECRET": "another-secret-0123456789"}],
    )  # fmt: skip
    assert not outcomes[1][0] and "AuthenticationError" in outcomes[1][1], outcomes[1]


def _secret_of(spec_addr: str) -> str:
    from pytfcomm import _cluster, _secret

    return _secret.job_secret(None, _cluster.resolve(rank=1, size=2, addr=spec_addr))


def test_secret_file_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTFCOMM_SECRET", raising=False)
    monkeypatch.delenv("PYTFCOMM_INSECURE", raising=False)
    remote = "10.0.0.1:29500"  # resolve() only: nothing connects
    with pytest.raises(pytfcomm.ConfigError) as info:
        _secret_of(remote)
    assert "PYTFCOMM_SECRET " in str(info.value) and "PYTFCOMM_SECRET_FILE" in str(info.value)
    assert "export PYTFCOMM_SECRET=" in str(info.value)

    path = _secret_file(tmp_path, "  " + SECRET + "\n")
    monkeypatch.setenv("PYTFCOMM_SECRET_FILE", str(path))
    assert _secret_of(remote) == SECRET
    monkeypatch.setenv("PYTFCOMM_SECRET", "x" * 20)  # PYTFCOMM_SECRET wins, file unread
    path.chmod(0o644)
    assert _secret_of(remote) == "x" * 20
    monkeypatch.delenv("PYTFCOMM_SECRET")
    for mode in (0o644, 0o640, 0o604, 0o620):
        path.chmod(mode)
        with pytest.raises(pytfcomm.ConfigError, match=f"mode 0{mode:o}.*chmod 600"):
            _secret_of(remote)
    cases = [
        (_secret_file(tmp_path, "short\n", "short"), "too short"),
        (_secret_file(tmp_path, "\n", "empty"), "is empty"),
        (_secret_file(tmp_path, "x" * 5000, "big"), "over 4096 bytes"),
        (tmp_path / "missing", "cannot open it"),
    ]
    for bad, words in cases:
        monkeypatch.setenv("PYTFCOMM_SECRET_FILE", str(bad))
        with pytest.raises(pytfcomm.ConfigError, match=words) as info:
            _secret_of(remote)
        assert "PYTFCOMM_SECRET_FILE" in str(info.value)
    (tmp_path / "dir").mkdir(mode=0o700)
    os.mkfifo(tmp_path / "fifo", 0o600)  # must not block init() waiting for a writer
    for odd in ("dir", "fifo"):
        monkeypatch.setenv("PYTFCOMM_SECRET_FILE", str(tmp_path / odd))
        with pytest.raises(pytfcomm.ConfigError, match="not a regular file"):
            _secret_of(remote)


def test_python_handshake_interoperates_with_the_core() -> None:
    """Play rank 1 of a 2-rank job in Python: prove the secret with hashlib's
    HMAC, check rank 0's proof, receive the address table."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        procs, results, addr = start_ranks(
            1, "security_workers:lone_rank0", env={"PYTFCOMM_SECRET": SECRET}, workdir=workdir
        )
        try:
            port = int(addr.rsplit(":", 1)[1])
            deadline = time.monotonic() + 20
            while True:
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                    break
                except OSError:
                    assert time.monotonic() < deadline, "rank 0 never listened"
                    time.sleep(0.05)
            with sock:
                hello = sw.hello_bytes(sw.JOIN, 1, 2)
                sock.sendall(hello)
                challenge = sw.recv_exact(sock, sw.CHALLENGE_SIZE)
                magic, status, flags, rank = struct.unpack("<IIIi", challenge[:16])
                assert (magic, status, flags, rank) == (sw.CHALLENGE_MAGIC, 0, 1, 0)
                proof = struct.pack("<II", sw.PROOF_MAGIC, 0)
                sock.sendall(proof + sw.mac(SECRET, "connector", hello, challenge))
                confirm = sw.recv_exact(sock, sw.CONFIRM_SIZE)
                assert struct.unpack("<II", confirm[:8]) == (sw.CONFIRM_MAGIC, 0)
                assert confirm[8:] == sw.mac(SECRET, "acceptor", hello, challenge)
                reply = sw.recv_exact(sock, 24)
                magic8, status, size = struct.unpack("<Qii", reply[:16])
                assert (magic8, status, size) == (sw.HELLO_MAGIC, 0, 2)
                table = sw.recv_exact(sock, 2 * 392)
                assert struct.unpack("<i", table[392:396])[0] == 1
        finally:
            outcomes = collect(procs, results, workdir, 30)
    ok, res = outcomes[0]
    assert ok, res
    assert res["type"] == "PeerLostError", res  # "rank 1" left after joining
