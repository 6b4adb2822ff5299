"""``pytfcomm-run --elastic`` with ranks on two hosts (docs/elastic.md, "Several hosts").

Two simulated hosts: network namespaces the test creates (tests/_netns.py), joined
through a router. The launcher runs in the first (``-H A:2,B:2``); B's ranks start
through a fake ssh that enters B's namespace and gives them a host id of their own
(the namespaces share one kernel, so without it pytfcomm would take them for one
machine). Skipped, with the reason, where namespaces cannot be created.

* a rank on B is SIGKILLed in a NumPy loop: the three others go on in place, with the
  local ranks of the new membership, bitwise equal to the reference;
* a discovery script offers a slot on B: a joiner starts there over ssh and is
  admitted at a commit point;
* B reaches the membership service, which answers only requests sealed with the
  job secret; Ctrl-C, or the launcher's death, stops the rank on B.

In-process tests of the service (no namespaces) cover a host whose every rank is lost
(rank 0 and the rendezvous move to the other host), the local and cross ranks of a new
membership, and where joiners go.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _launcher_run import PY, _env, started, wait_files, wait_gone
from _netns import RoutedHosts
from _paths import WORKERS

from pytfcomm import elastic as elastic_mod
from pytfcomm._launch.hosts import Host
from pytfcomm._launch.membership import MembershipService
from pytfcomm._launch.procs import RankSpec

LOSS_WORKER = str(WORKERS / "elastic_workers.py")
GROW_WORKER = str(WORKERS / "elastic_grow_workers.py")
STEPS, AT = 8, 4  # the victim (started as rank 3, on host B) is lost at step AT
ELASTIC = ("--elastic", "--min-np", "2", "--bind-to", "none")


@pytest.fixture
def hosts() -> Iterator[RoutedHosts]:
    routed = RoutedHosts("10.234")
    try:
        routed.create()
        yield routed
    finally:
        routed.delete()


def _fake_ssh(tmp_path: Path, hosts: RoutedHosts) -> str:
    """An ssh stand-in: ``fake_ssh HOST COMMAND`` logs HOST, then runs COMMAND in B's
    namespace with a bare environment (as a fresh login) and B's host id."""
    script = tmp_path / "fake_ssh.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = {hosts.addr[1]} ] || {{ echo "fake ssh: unknown host $1" >&2; exit 255; }}\n'
        f'echo "$1" >>{tmp_path / "ssh.log"}\n'
        f'exec ip netns exec {hosts.ns[1]} env -i PATH="$PATH" HOME="$HOME" '
        f'PYTFCOMM_HOST_ID=simulated-b sh -c "$2"\n'
    )
    script.chmod(0o755)
    return str(script)


def _run_args(tmp_path: Path, hosts: RoutedHosts, *extra: str) -> list[str]:
    return ["--ssh-command", _fake_ssh(tmp_path, hosts), *ELASTIC, *extra]


def _schedule(members_per_step: list[tuple[int, ...]]) -> list[str]:
    """``w`` (as hex floats) after one step per entry, each among the workers it names."""
    w = np.zeros(4, np.float64)
    for step, members in enumerate(members_per_step):
        g = [(i + 1) * (step + 1) * np.arange(4, dtype=np.float64) for i in members]
        w = w - 0.01 * (np.sum(g, axis=0) / len(members))
    return [x.hex() for x in w]


def _result(out: Path, worker: int) -> dict:
    return json.loads((out / f"result{worker}.json").read_text())


def _pids(out: Path, worker: int) -> list[int]:
    lines = (out / f"starts{worker}.jsonl").read_text().splitlines()
    return [json.loads(line)["pid"] for line in lines]


@pytest.mark.parametrize("remote_first", [False, True], ids=["kill-on-B", "rank0-on-B"])
def test_survivors_on_two_hosts_go_on_with_new_local_ranks(
    tmp_path: Path, hosts: RoutedHosts, remote_first: bool
) -> None:
    # kill-on-B: -H A:2,B:2, the rank on B (started as 3) is killed. rank0-on-B:
    # -H B:2,A:2, rank 0 and the rendezvous are on B (the new one too: the job's port
    # there), the rank on A started as 3 is killed.
    here, there = hosts.addr
    a, b = (there, here) if remote_first else (here, there)
    args = _run_args(tmp_path, hosts, "-H", f"{a}:2,{b}:2")
    with started(*args, PY, LOSS_WORKER, "kill", str(tmp_path), str(STEPS), str(AT),
                 cwd=tmp_path, env=_env(), prefix=["ip", "netns", "exec", hosts.ns[0]],
                 ) as proc:  # fmt: skip
        wait_files([tmp_path / "victim"], timeout=120)
        victim = int((tmp_path / "victim").read_text())
        time.sleep(0.2)  # the survivors are in the step's all-reduce, waiting for it
        t_kill = time.time()
        os.kill(victim, signal.SIGKILL)  # the rank itself, not an ssh client
        _, err = proc.communicate(timeout=150)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert f"rank 3 (host {b}" in text and "the job goes on without it" in text, text[-3000:]
    assert "epoch 1: 3 rank(s) go on (started as 0, 1, 2); lost: 3" in text, text[-3000:]
    assert (tmp_path / "ssh.log").read_text().split() == [there, there]
    rendezvous = f"{there}:29500" if remote_first else f"{here}:"
    assert f"joined: none; rendezvous {rendezvous}" in text, text[-3000:]
    want = _schedule([(0, 1, 2, 3)] * AT + [(0, 1, 2)] * (STEPS - AT))
    # local rank, local size, hosts (the communicator's); local rank and size, cross
    # rank and size (the environment reform() wrote, Horovod's names included)
    layout = {0: ([0, 2, 2], [0, 2, 0, 2]), 1: ([1, 2, 2], [1, 2, 0, 1]),
              2: ([0, 1, 2], [0, 1, 1, 2])}  # fmt: skip
    for i in (0, 1, 2):
        res = _result(tmp_path, i)
        assert _pids(tmp_path, i) == [res["pid"]], "restarted instead of going on in place"
        assert res["epoch"] == 1
        assert res["seen"] == [[i, 4]] * AT + [[i, 3]] * (STEPS - AT), res["seen"]
        assert res["w"] == want
        assert (res["layout"]["comm"], res["layout"]["env"]) == layout[i], res["layout"]
        t = res["times"]
        print(
            f"two hosts, worker {i} on {a if i < 2 else b}: SIGKILL on {b} -> error "
            f"{t['error'] - t_kill:.3f} s, -> next step done {t['next_step'] - t_kill:.3f} s"
        )
    assert not (tmp_path / "result3.json").exists()


def test_a_discovered_slot_on_another_host_starts_a_joiner_there(
    tmp_path: Path, hosts: RoutedHosts
) -> None:
    a, b = hosts.addr
    (tmp_path / "slots").write_text(f"{a}:2\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat '{tmp_path / 'slots'}'\n")
    script.chmod(0o755)
    # A job on A alone: --bind makes its services reachable from other hosts.
    args = _run_args(tmp_path, hosts, "-H", f"{a}:2", "--bind", a, "--max-np", "3",
                     "--host-discovery-script", str(script))  # fmt: skip
    with started(*args, PY, GROW_WORKER, "grow", str(tmp_path), "3", "10", "5",
                 cwd=tmp_path, env=_env(), prefix=["ip", "netns", "exec", hosts.ns[0]],
                 ) as proc:  # fmt: skip
        wait_files([tmp_path / "step5"], timeout=120)
        t_rewrite = time.time()
        (tmp_path / "slots.tmp").write_text(f"{a}:2\n{b}:1\n")
        os.replace(tmp_path / "slots.tmp", tmp_path / "slots")
        _, err = proc.communicate(timeout=150)
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert f"3 slot(s): this machine 2, {b} 1: target 3" in text, text[-3000:]
    assert f"starting joiner(s) 2 on {b}; they join at the next commit point" in text
    assert "epoch 1: 3 rank(s) go on (started as 0, 1, 2); lost: none; joined: 2" in text
    assert (tmp_path / "ssh.log").read_text().split() == [b]  # the joiner, over ssh
    results = [_result(tmp_path, i) for i in (0, 1, 2)]
    joined = results[2]["since"]
    assert joined >= 5 and all(r["since"] == joined for r in results)
    steps = len(results[0]["seen"])
    want = _schedule([(0, 1)] * joined + [(0, 1, 2)] * (steps - joined))
    layout = {0: ([0, 2, 2], [0, 2, 0, 2]), 1: ([1, 2, 2], [1, 2, 0, 1]),
              2: ([0, 1, 2], [0, 1, 1, 2])}  # fmt: skip
    for i, res in enumerate(results):
        assert _pids(tmp_path, i) == [res["pid"]]
        assert res["joiner"] is (i == 2) and res["epoch"] == 1
        assert res["w"] == want
        assert (res["layout"]["comm"], res["layout"]["env"]) == layout[i], res["layout"]
    t2 = results[2]["times"]
    print(
        f"discovery file rewritten -> first step with 3 ranks on two hosts: "
        f"{results[0]['full_at'] - t_rewrite:.2f} s; joiner on {b}: start -> admitted "
        f"{t2['joined'] - t2['started']:.2f} s"
    )


# Run on B: one connection per key (none, a wrong one, the job's), each sending a poll
# sealed under the nonce the service greets with; prints what came back (the reply's
# body when it unseals under the job's secret, "" for no answer).
_PROBE = """
import json, socket, sys, time
from pytfcomm._cluster import parse_addr
from pytfcomm._elastic_wire import WireError, read_line, sealed, unseal
addr, secret = sys.argv[1], sys.argv[2]
body = {"op": "poll", "id": 0, "epoch": 0, "nonce": "mine"}
out = []
for key in ("", "w" * 32, secret):
    with socket.create_connection(parse_addr(addr), timeout=15) as sock:
        nonce = json.loads(read_line(sock, time.monotonic() + 10))["nonce"]
        line = sealed(key, "req", nonce, body) if key else (json.dumps(body) + "\\n").encode()
        sock.sendall(line)
        try:
            reply = read_line(sock, time.monotonic() + 15)
        except (WireError, OSError):
            out.append("")
            continue
        out.append(unseal(secret, "rep", "mine", reply))
print(json.dumps(out))
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "launcher-dies"])
def test_the_membership_service_answers_another_host_only_with_the_secret(
    tmp_path: Path, hosts: RoutedHosts, stop: signal.Signals
) -> None:
    a, b = hosts.addr
    secret = uuid.uuid4().hex * 2
    args = _run_args(tmp_path, hosts, "-H", f"{a}:1,{b}:1")
    with started(*args, PY, GROW_WORKER, "grow", str(tmp_path), "2", "1900", "0",
                 cwd=tmp_path, env=_env(PYTFCOMM_SECRET=secret),
                 prefix=["ip", "netns", "exec", hosts.ns[0]]) as proc:  # fmt: skip
        wait_files([tmp_path / "addr", tmp_path / "starts1.jsonl"], timeout=120)
        addr = (tmp_path / "addr").read_text()
        assert addr.startswith(f"{a}:"), addr  # where B can reach it, not loopback
        probe = subprocess.run(["ip", "netns", "exec", hosts.ns[1], PY, "-c", _PROBE, addr,
                                secret], capture_output=True, text=True, timeout=90,
                               cwd=tmp_path)  # fmt: skip
        assert probe.returncode == 0, probe.stderr
        remote_pid = _pids(tmp_path, 1)[0]
        proc.send_signal(stop)  # Ctrl-C, or the launcher's death: the rank on B stops
        _, err = proc.communicate(timeout=60)
    text = err.decode(errors="replace")
    plain, wrong, right = json.loads(probe.stdout)
    assert plain == "" and wrong == "", (plain, wrong)  # no answer without the secret
    assert right["ok"] is True and right["pending"] is False, right  # with it: an answer
    assert text.count("failed the job-secret check") == 1, text[-3000:]
    assert proc.returncode == (130 if stop == signal.SIGINT else -9), text[-3000:]
    assert wait_gone([remote_pid], timeout=30) == []


# ------------------------------------------------------------------ in-process, no netns
SECRET = "s" * 32
A = Host("node-a", "node-a", 2, False)
B = Host("node-b", "node-b", 2, False)


class _Slots:
    def __init__(self, hosts: list[Host]) -> None:
        self._hosts = hosts

    def hosts(self) -> list[Host]:
        return self._hosts


def _service(where: dict[int, Host], **grow: object) -> MembershipService:
    return MembershipService(
        "127.0.0.1", SECRET, sorted(where), min_np=1, window=5.0, say=lambda _m: None,
        where=where, rendezvous=lambda h: f"{h.name}:29500", **grow,  # type: ignore[arg-type]
    )  # fmt: skip


def _round(svc: MembershipService, workers: list[int]) -> dict[int, dict]:
    """Every worker in ``workers`` asks for the membership after epoch 0."""
    got: dict[int, dict] = {}

    def ask(w: int) -> None:
        got[w] = elastic_mod._ask(svc.addr, SECRET, w, 0, 30)

    threads = [threading.Thread(target=ask, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return got


def _layout(reply: dict) -> tuple[int, ...]:
    keys = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")
    return tuple(reply[k] for k in keys)


def test_a_host_whose_ranks_are_all_lost_is_left_and_rank_0_moves() -> None:
    # Workers 0, 1 on A, 2, 3 on B; both of A's are lost: B's go on, rank 0 on B,
    # which is where the new rendezvous is.
    svc = _service({0: A, 1: A, 2: B, 3: B})
    try:
        assert svc.exited(0, -9) and svc.exited(1, 137)
        got = _round(svc, [2, 3])
    finally:
        svc.close()
    assert _layout(got[2]) == (0, 2, 0, 2, 0, 1) and _layout(got[3]) == (1, 2, 1, 2, 0, 1)
    assert got[2]["addr"] == got[3]["addr"] == "node-b:29500"


def test_the_layout_is_worked_out_per_host_for_the_new_membership() -> None:
    # A:3 (workers 0-2), B:2 (3, 4); worker 1 lost: 0, 2 on A, 3, 4 on B.
    svc = _service({0: A, 1: A, 2: A, 3: B, 4: B})
    try:
        assert svc.exited(1, 137)
        got = _round(svc, [0, 2, 3, 4])
    finally:
        svc.close()
    assert [_layout(got[w]) for w in (0, 2, 3, 4)] == [
        (0, 4, 0, 2, 0, 2),
        (1, 4, 1, 2, 0, 2),
        (2, 4, 0, 2, 1, 2),
        (3, 4, 1, 2, 1, 2),
    ]
    assert {g["addr"] for g in got.values()} == {"node-a:29500"}


def test_joiners_go_where_the_discovered_slots_are_free() -> None:
    # A has 2 slots, both used; B offers 2 and C 1, capped by --max-np 4: both on B.
    c = Host("node-c", "node-c", 1, False)
    made: list[tuple[int, str]] = []

    def make(w: int, h: Host) -> RankSpec:
        made.append((w, h.target))
        return RankSpec(w, h.target, ["true"], {})

    svc = _service({0: A, 1: A}, grow=_Slots([A, B, c]), make_joiner=make, max_np=4)
    try:
        assert [s.host for s in svc.joiners()] == ["node-b", "node-b"]
        assert made == [(2, "node-b"), (3, "node-b")] and svc.joiners() == []
    finally:
        svc.close()
