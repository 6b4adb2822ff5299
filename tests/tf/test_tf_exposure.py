"""What a running pytfcomm.MultiWorkerMirroredStrategy job exposes to others (issue 13).

Two workers train a Keras 3 model with ``fit`` epoch after epoch. While they
run, the test (a) lists every TCP port the worker processes listen on (their
socket inodes matched against /proc/PID/net/tcp{,6}) and requires that none
is bound to the wildcard address, and (b) probes every one of those ports and
every port TF_CONFIG names from another network namespace: a TCP connect,
then a TensorFlow gRPC client that lists devices, computes 1 + 1 and reads a
file on the worker. Nothing may run there. TF's own strategy fails both: its
gRPC server listens on ``*:PORT`` and runs whatever a stranger sends.

The network-namespace variant puts the workers in namespaces A and B and
the probe in C (a bridge in C joins them; addresses 10.232.0.0/24); it is
skipped, with the reason, where namespaces cannot be made. The loopback
variant runs everywhere (workers and probe on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from _harness import TESTS, collect, free_port, kill_all, start_ranks
from _netns import ip, require_netns

pytest.importorskip("tensorflow")

SUBNET = "10.232.0"
PROBE = TESTS / "workers" / "exposure_probe.py"
MARKER = "pytfcomm-exposure-marker"
READY_S = 180  # both workers built the strategy and trained one epoch
PROBE_S = 60  # the whole probe, every target
FINISH_S = 90  # the workers stop after `stop` appears


@pytest.fixture
def three_hosts():
    """Namespaces A, B (workers) and C (the outsider), joined by a bridge in C."""
    require_netns()
    tag = uuid.uuid4().hex[:6]
    ns = [f"ptx-{tag}-{c}" for c in "abc"]
    created: list[str] = []
    try:
        for n in ns:
            r = ip("netns", "add", n)
            if r.returncode != 0:
                pytest.skip(f"`ip netns add` failed here: {r.stderr.strip()}")
            created.append(n)
        bridge = f"xb{tag}"
        steps = [
            ("-n", ns[2], "link", "add", bridge, "type", "bridge"),
            ("-n", ns[2], "addr", "add", f"{SUBNET}.3/24", "dev", bridge),
            ("-n", ns[2], "link", "set", bridge, "up"),
            ("-n", ns[2], "link", "set", "lo", "up"),
        ]
        for i in range(2):
            inner, outer = f"x{i}{tag}", f"y{i}{tag}"
            steps += [
                ("link", "add", inner, "type", "veth", "peer", "name", outer),
                ("link", "set", inner, "netns", ns[i]),
                ("link", "set", outer, "netns", ns[2]),
                ("-n", ns[2], "link", "set", outer, "master", bridge),
                ("-n", ns[2], "link", "set", outer, "up"),
                ("-n", ns[i], "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", inner),
                ("-n", ns[i], "link", "set", inner, "up"),
                ("-n", ns[i], "link", "set", "lo", "up"),
            ]
        for step in steps:
            r = ip(*step)
            if r.returncode != 0:
                pytest.skip(f"`ip {' '.join(step)}` failed: {r.stderr.strip()}")
        yield ns
    finally:
        for n in created:
            ip("netns", "del", n)  # takes its veth ends and the bridge with it


# --------------------------------------------------------------------------- listeners
def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def _hex_ip(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(text, 16)))
    words = struct.unpack("<4I", raw)  # four host-order 32-bit words
    return socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))


def listeners(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` has in LISTEN state.

    /proc/PID/net/tcp{,6} list the sockets of the process's network namespace;
    the process's own are those whose inode it holds as a file descriptor.
    """
    mine = _socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in mine:  # 0A = LISTEN
                hexip, hexport = f[1].split(":")
                found.append((_hex_ip(hexip), int(hexport, 16)))
    return sorted(set(found))


def _is_wildcard(ip: str) -> bool:
    return ip in ("0.0.0.0", "::")


# --------------------------------------------------------------------------- the job
def _wait_ready(procs: list[subprocess.Popen], workdir: Path) -> list[int]:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if all((workdir / f"ready{r}").exists() for r in range(len(procs))):
            return [int((workdir / f"ready{r}").read_text()) for r in range(len(procs))]
        dead = [r for r, p in enumerate(procs) if p.poll() is not None]
        if dead:
            break
        time.sleep(0.2)
    logs = "\n".join(
        f"--- rank {r}:\n" + (workdir / f"rank{r}.log").read_text(errors="replace")[-3000:]
        for r in range(len(procs))
    )
    raise AssertionError(f"the workers did not start training within {READY_S} s:\n{logs}")


def _probe(prefix: list[str], workdir: Path, targets: list[str]) -> dict[str, dict]:
    out = workdir / "probe.jsonl"
    secret_file = workdir / "on-the-worker.txt"
    secret_file.write_text(MARKER)
    proc = subprocess.Popen(
        [*prefix, sys.executable, str(PROBE), str(out), str(secret_file), *targets],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=PROBE_S)
    except subprocess.TimeoutExpired:
        pass  # targets that never answered have no line: nothing ran there
    finally:
        kill_all([proc])
    lines = out.read_text().splitlines() if out.exists() else []
    return {rec["target"]: rec for rec in map(json.loads, lines)}


def _run_and_probe(
    hosts: list[str],
    worker_prefix: list[list[str]] | None,
    probe_prefix: list[str],
    env: dict[str, str],
) -> dict:
    tf_ports = [free_port() for _ in hosts]
    with tempfile.TemporaryDirectory(prefix="pytfcomm-exposure-") as tmp:
        workdir = Path(tmp)
        procs, results, _ = start_ranks(
            len(hosts),
            "exposure_workers:fit_while_probed",
            hosts,
            tf_ports,
            240.0,
            env=env,
            workdir=workdir,
            host=hosts[0],
            port=free_port(),
            per_rank_prefix=worker_prefix,
        )
        ok = False
        try:
            pids = _wait_ready(procs, workdir)
            seen = {r: listeners(pid) for r, pid in enumerate(pids)}
            targets = {f"{hosts[r]}:{p}" for r in range(len(hosts)) for p in tf_ports}
            for r, socks in seen.items():
                for ip, port in socks:
                    host = hosts[r] if _is_wildcard(ip) else ip
                    targets.add(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            probed = _probe(probe_prefix, workdir, sorted(targets))
            # Listeners opened later (a lazily started server) count too.
            for r, pid in enumerate(pids):
                seen[r] = sorted(set(seen[r]) | set(listeners(pid)))
            ok = True
        finally:
            (workdir / "stop").touch()
            if not ok:
                kill_all(procs)
            outcomes = collect(procs, results, workdir, FINISH_S)
    bad = {r: o[1] for r, o in outcomes.items() if not o[0]}
    assert not bad, "\n".join(f"--- rank {r}:\n{t}" for r, t in bad.items())
    return {
        "listeners": seen,
        "probed": probed,
        "targets": sorted(targets),
        "tf_ports": tf_ports,
        "results": [outcomes[r][1] for r in range(len(hosts))],
    }


def _check(run: dict, hosts: list[str]) -> None:
    listening = run["listeners"]
    wildcard = {r: [s for s in socks if _is_wildcard(s[0])] for r, socks in listening.items()}
    assert not any(wildcard.values()), (
        f"workers listen on the wildcard address: {wildcard} (all listeners: {listening})"
    )
    for r, socks in listening.items():
        assert all(ip == hosts[r] for ip, _ in socks), (
            f"worker {r} listens on {socks}, beyond its configured address {hosts[r]}"
        )
    ran = {t: rec for t, rec in run["probed"].items() if rec.get("ran")}
    assert not ran, f"an outsider ran TF ops on the workers: {ran}"
    # The job itself trained: several epochs, identical weights on both workers.
    res = run["results"]
    assert len(res[0]["losses"]) >= 2 and np.all(np.isfinite(res[0]["losses"])), res[0]["losses"]
    for a, b in zip(res[0]["weights"], res[1]["weights"], strict=True):
        assert np.array_equal(a, b), "the workers' weights differ"


@pytest.mark.timeout(READY_S + PROBE_S + FINISH_S + 60)
def test_strategy_exposes_nothing_to_another_namespace(three_hosts):
    ns = three_hosts
    hosts = [f"{SUBNET}.1", f"{SUBNET}.2"]
    env = {"PYTFCOMM_SECRET": uuid.uuid4().hex * 2}  # non-loopback: a secret is required
    run = _run_and_probe(
        hosts, [["ip", "netns", "exec", n] for n in ns[:2]], ["ip", "netns", "exec", ns[2]], env
    )
    print(json.dumps({k: run[k] for k in ("listeners", "probed", "tf_ports")}, default=str))
    _check(run, hosts)


@pytest.mark.timeout(READY_S + PROBE_S + FINISH_S + 60)
def test_strategy_exposes_nothing_on_loopback():
    hosts = ["127.0.0.1", "127.0.0.1"]
    run = _run_and_probe(hosts, None, [], {})
    print(json.dumps({k: run[k] for k in ("listeners", "probed", "tf_ports")}, default=str))
    _check(run, hosts)
