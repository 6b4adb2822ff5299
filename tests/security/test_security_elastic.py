"""The membership service of pytfcomm-run --elastic against peers without the secret.

In-process: a service on 127.0.0.1 with a known secret, and clients that forge, flood
or garble. Only a holder of the job secret learns a membership, only the launcher's
reply is believed, and nothing a client sends stops the service from serving the next.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from pytfcomm import MembershipError
from pytfcomm import elastic as elastic_mod
from pytfcomm._cluster import parse_addr
from pytfcomm._elastic_wire import MAX_LINE, WireError, read_line, sealed
from pytfcomm._launch.membership import MembershipService

SECRET = "s" * 32


@pytest.fixture
def service():
    said: list[str] = []
    svc = MembershipService("127.0.0.1", SECRET, [0, 1], min_np=1, window=2.0, say=said.append)
    svc.said = said  # type: ignore[attr-defined]
    yield svc
    svc.close()


def _raw(addr: str, line: bytes) -> bytes:
    """What the service answers ``line`` with ("" when it closes without a word)."""
    with socket.create_connection(parse_addr(addr), timeout=15) as sock:
        json.loads(read_line(sock, time.monotonic() + 10))
        sock.sendall(line)
        try:
            return read_line(sock, time.monotonic() + 15)
        except (WireError, OSError):  # closed (or reset) without a word
            return b""


def test_a_request_without_the_secret_gets_no_answer(service: MembershipService) -> None:
    body = {"op": "rejoin", "id": 0, "epoch": 0, "nonce": "x"}
    assert _raw(service.addr, sealed("w" * 32, "req", "guess", body)) == b""
    # sealed with the secret but for another connection's nonce: a replay
    assert _raw(service.addr, sealed(SECRET, "req", "an-old-nonce", body)) == b""
    assert _raw(service.addr, b"not json at all\n") == b""
    assert _raw(service.addr, b"{" * (MAX_LINE + 10)) == b""
    assert service.epoch == 0 and service.members == [0, 1]
    assert any("failed the job-secret check" in s for s in service.said)  # type: ignore[attr-defined]
    # and it still serves the ranks: both check in, both get epoch 1
    got: list[dict] = []

    def ask(worker: int) -> None:
        got.append(elastic_mod._ask(service.addr, SECRET, worker, 0, 30))

    threads = [threading.Thread(target=ask, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted((g["rank"], g["size"], g["epoch"]) for g in got) == [(0, 2, 1), (1, 2, 1)]
    assert got[0]["addr"] == got[1]["addr"]


def test_a_forged_launcher_reply_is_refused() -> None:
    # A listener that knows no secret answers with a made-up membership.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]

        def fake() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.sendall(b'{"v": 1, "nonce": "n"}\n')
                read_line(conn, time.monotonic() + 10)
                body = {"ok": True, "rank": 0, "size": 1, "addr": "127.0.0.1:1", "epoch": 9}
                conn.sendall(json.dumps({"body": body, "mac": "0" * 64}).encode() + b"\n")

        t = threading.Thread(target=fake)
        t.start()
        with pytest.raises(MembershipError, match="failed the job-secret check"):
            elastic_mod._ask(f"127.0.0.1:{port}", SECRET, 0, 0, 20)
        t.join(20)


def test_a_stranger_with_the_secret_is_refused_not_admitted(service: MembershipService) -> None:
    # An epoch this run never made, or a worker it never started: refused, nothing changes.
    for worker, epoch in ((0, 5), (9, 0)):
        reply = elastic_mod._ask(service.addr, SECRET, worker, epoch, 20)
        assert reply["ok"] is False, reply
        assert "is not one this run of the job started" in str(reply["error"]), reply
    assert service.epoch == 0 and service.members == [0, 1]
