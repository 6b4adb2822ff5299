"""Hierarchical all-reduce across simulated hosts: 2 network namespaces x 2 ranks.

The test creates two network namespaces joined by a veth pair (addresses in
10.231.0.0/24 that exist only inside them), runs ranks 0-1 in the first and
2-3 in the second (each pair with its own host id, as on two machines), and
checks every dtype and op against NumPy with the hierarchical, auto and ring
algorithms. Skipped, with the reason, where namespaces cannot be created
(not root, no `ip`, no CAP_NET_ADMIN).
"""

from __future__ import annotations

import uuid

import pytest
from _harness import check_matrix, free_port
from _netns import ip, require_netns

SUBNET = "10.231.0"


@pytest.fixture
def two_hosts():
    require_netns()
    tag = uuid.uuid4().hex[:6]
    ns = [f"ptc-{tag}-a", f"ptc-{tag}-b"]
    veth = [f"pa{tag}", f"pb{tag}"]
    created: list[str] = []
    try:
        for n in ns:
            r = ip("netns", "add", n)
            if r.returncode != 0:
                pytest.skip(f"`ip netns add` failed here: {r.stderr.strip()}")
            created.append(n)
        steps = [
            ("link", "add", veth[0], "type", "veth", "peer", "name", veth[1]),
            ("link", "set", veth[0], "netns", ns[0]),
            ("link", "set", veth[1], "netns", ns[1]),
        ]
        for i, n in enumerate(ns):
            steps += [
                ("-n", n, "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", veth[i]),
                ("-n", n, "link", "set", veth[i], "up"),
                ("-n", n, "link", "set", "lo", "up"),
            ]
        for step in steps:
            r = ip(*step)
            if r.returncode != 0:
                pytest.skip(f"`ip {' '.join(step)}` failed: {r.stderr.strip()}")
        yield ns
    finally:
        for n in created:
            ip("netns", "del", n)  # deletes the veth pair with it


def test_hierarchical_across_two_simulated_hosts(ranks, two_hosts):
    ns = two_hosts
    prefix = [["ip", "netns", "exec", ns[r // 2]] for r in range(4)]
    env = {"PYTFCOMM_SECRET": uuid.uuid4().hex * 2}  # non-loopback: a secret is required
    per_rank_env = [{"PYTFCOMM_HOST_ID": f"simulated-host-{r // 2}"} for r in range(4)]
    outs = ranks(
        4,
        "netns_workers:topology_and_allreduce",
        [0, 1, 7, 1000, 65536 + 3],
        timeout=240,
        env=env,
        per_rank_env=per_rank_env,
        host=f"{SUBNET}.1",
        port=free_port(),
        per_rank_prefix=prefix,
    )
    for r, o in enumerate(outs):
        assert o["topology"]["num_hosts"] == 2, o["topology"]
        assert o["topology"]["local_size"] == 2
        assert o["topology"]["local_rank"] == r % 2
        assert o["topology"]["explicit"] == "hierarchical"
    check_matrix(outs)


def test_multi_stream_tcp_across_two_simulated_hosts(ranks, two_hosts):
    # The same job over a real veth link with 3 striped connections per pair
    # of hosts (PYTFCOMM_TCP_STREAMS) and small stripes.
    ns = two_hosts
    prefix = [["ip", "netns", "exec", ns[r // 2]] for r in range(4)]
    env = {
        "PYTFCOMM_SECRET": uuid.uuid4().hex * 2,
        "PYTFCOMM_TCP_STREAMS": "3",
        "PYTFCOMM_TCP_STRIPE_BYTES": "8192",
    }
    per_rank_env = [{"PYTFCOMM_HOST_ID": f"simulated-host-{r // 2}"} for r in range(4)]
    outs = ranks(
        4,
        "stream_workers:matrix_and_sockets",
        [0, 7, 65536 + 3],
        timeout=240,
        env=env,
        per_rank_env=per_rank_env,
        host=f"{SUBNET}.1",
        port=free_port(),
        per_rank_prefix=prefix,
    )
    check_matrix(outs)
    for o in outs:
        assert o["big_ok"]
        assert o["sockets"] == 2 * 3 + 1, o["sockets"]
