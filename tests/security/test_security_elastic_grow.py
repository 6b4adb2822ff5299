"""Joiners of pytfcomm-run --elastic --host-discovery-script against peers without the secret.

In-process: a membership service on 127.0.0.1 with a known secret that wants one joiner
(worker 2). A request without the secret, posing as that joiner or asking whether joiners
wait, gets no answer and changes nothing; a holder of the secret asking for an id the
launcher never started, or asking twice, is refused; the real joiner is admitted at the
next commit point, after the current ranks, and every member gets the same membership.
Through the launcher: a forged join sent to a running job's service is dropped, and the
job ends as it would have without it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _launcher_run import PY, _env, started, wait_files
from _paths import WORKERS

from pytfcomm import MembershipError
from pytfcomm import elastic as elastic_mod
from pytfcomm._cluster import parse_addr
from pytfcomm._elastic_client import ask
from pytfcomm._elastic_wire import WireError, read_line, sealed
from pytfcomm._launch.hosts import Host
from pytfcomm._launch.membership import MembershipService
from pytfcomm._launch.procs import RankSpec

SECRET = "s" * 32
WRONG = "w" * 32


class _Target:
    def __init__(self, n: int) -> None:
        self.n = n

    def hosts(self) -> list[Host]:
        return [Host("localhost", "localhost", self.n, True)]


@pytest.fixture
def service():
    said: list[str] = []
    svc = MembershipService(
        "127.0.0.1", SECRET, [0, 1], min_np=1, window=5.0, say=said.append,
        grow=_Target(3), make_joiner=lambda w, _h: RankSpec(w, "localhost", ["true"], {}), max_np=3,
    )  # fmt: skip
    svc.said = said  # type: ignore[attr-defined]
    yield svc
    svc.close()


def _forged(addr: str, body: dict) -> bytes:
    """What the service answers ``body`` sealed with the wrong secret for the right nonce
    ("" when it closes without a word)."""
    with socket.create_connection(parse_addr(addr), timeout=15) as sock:
        nonce = json.loads(read_line(sock, time.monotonic() + 10))["nonce"]
        sock.sendall(sealed(WRONG, "req", nonce, {**body, "nonce": "c"}))
        try:
            return read_line(sock, time.monotonic() + 15)
        except (WireError, OSError):
            return b""


def _in_thread(got: dict[int, dict], key: int, fn: Callable[[], dict]) -> threading.Thread:
    t = threading.Thread(target=lambda: got.__setitem__(key, fn()))
    t.start()
    return t


def _rejoin(addr: str, worker: int) -> dict:
    return elastic_mod._ask(addr, SECRET, worker, 0, 30)


def _join(addr: str, worker: int, wait: float) -> dict:
    body = {"op": "join", "id": worker, "epoch": -1, "wait": wait}
    return ask(addr, SECRET, body, wait + 15, "an admission")


def test_a_joiner_without_the_secret_is_never_admitted(service: MembershipService) -> None:
    assert [s.rank for s in service.joiners()] == [2]
    assert service.joiners() == []  # it runs: no second one
    assert _forged(service.addr, {"op": "join", "id": 2, "epoch": -1, "wait": 5}) == b""
    assert _forged(service.addr, {"op": "poll", "id": 0, "epoch": 0}) == b""
    assert any("failed the job-secret check" in s for s in service.said)  # type: ignore[attr-defined]
    assert elastic_mod._poll(service.addr, SECRET, 0, 0, 10) is False
    # With the secret, an id this run never started is refused, and changes nothing.
    reply = _join(service.addr, 7, 5)
    assert reply["ok"] is False and "is not one this run of the job started" in reply["error"]
    assert service.epoch == 0 and service.members == [0, 1]

    # The real joiner waits; rank 0's poll now says so; the members re-form with it.
    got: dict[int, dict] = {}
    joiner = _in_thread(got, 2, lambda: _join(service.addr, 2, 30))
    deadline = time.monotonic() + 20
    while not elastic_mod._poll(service.addr, SECRET, 0, 0, 10):
        assert time.monotonic() < deadline, "the joiner never showed as waiting"
        time.sleep(0.05)
    twice = _join(service.addr, 2, 5)  # a second request for a waiting joiner
    assert twice["ok"] is False and "no joiner waiting" in twice["error"], twice
    members = [_in_thread(got, w, lambda w=w: _rejoin(service.addr, w)) for w in (0, 1)]
    for t in (joiner, *members):
        t.join(60)
    assert {w: (g["rank"], g["size"], g["epoch"]) for w, g in got.items()} == {
        0: (0, 3, 1), 1: (1, 3, 1), 2: (2, 3, 1),
    }  # fmt: skip
    assert len({g["addr"] for g in got.values()}) == 1
    assert service.members == [0, 1, 2]
    # Admitted once: asking to join again is refused; a poll says nothing waits.
    assert _join(service.addr, 2, 5)["ok"] is False
    assert elastic_mod._poll(service.addr, SECRET, 0, 1, 10) is False


def test_a_joiner_that_gives_up_is_left_out_for_good(service: MembershipService) -> None:
    assert [s.rank for s in service.joiners()] == [2]
    reply = _join(service.addr, 2, 0.5)
    assert reply["ok"] is False and "no commit point admitted this joiner" in reply["error"]
    assert elastic_mod._poll(service.addr, SECRET, 0, 0, 10) is False
    # The ranks re-form anyway (say rank 0 saw it a moment before): no joiner in it.
    got: dict[int, dict] = {}
    for t in [_in_thread(got, w, lambda w=w: _rejoin(service.addr, w)) for w in (0, 1)]:
        t.join(60)
    assert sorted((g["rank"], g["size"]) for g in got.values()) == [(0, 2), (1, 2)]
    assert _join(service.addr, 2, 1)["ok"] is False  # never admitted later


def test_a_forged_joiner_cannot_enter_a_running_job(tmp_path: Path) -> None:
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    args = ("-np", "2", "--elastic", "--max-np", "3", "--host-discovery-script", str(script),
            "--bind-to", "none")  # fmt: skip
    worker = str(WORKERS / "elastic_grow_workers.py")
    with started(*args, PY, worker, "grow", str(tmp_path), "2", "150", "0",
                 cwd=tmp_path, env=_env(PYTFCOMM_TRANSPORT="tcp")) as proc:  # fmt: skip
        wait_files([tmp_path / "addr"], timeout=90)
        addr = (tmp_path / "addr").read_text()
        for body in ({"op": "join", "id": 2, "epoch": -1, "wait": 5},
                     {"op": "poll", "id": 0, "epoch": 0}):  # fmt: skip
            assert _forged(addr, body) == b""
        _, err = proc.communicate(timeout=120)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert "failed the job-secret check" in text, text[-3000:]
    assert "starting joiner" not in text and "epoch 1" not in text, text[-3000:]
    for i in (0, 1):
        res = json.loads((tmp_path / f"result{i}.json").read_text())
        assert res["epoch"] == 0 and {s[2] for s in res["seen"]} == {2}
        assert len(res["seen"]) == 150


def test_a_join_with_a_wait_that_is_no_number_gets_no_answer(service: MembershipService) -> None:
    # Even with the secret: NaN (which JSON allows) or a negative wait would make the
    # service's wait unbounded or meaningless; the request is dropped, nothing changes.
    assert [s.rank for s in service.joiners()] == [2]
    for wait in (float("nan"), -1.0, True):
        body = {"op": "join", "id": 2, "epoch": -1, "wait": wait}
        with pytest.raises(MembershipError, match="could not get"):
            ask(service.addr, SECRET, body, 5, "an admission")
    assert elastic_mod._poll(service.addr, SECRET, 0, 0, 10) is False
    # still pending: the real joiner may wait (here it gives up after 0.2 s)
    assert "no commit point admitted" in _join(service.addr, 2, 0.2)["error"]
