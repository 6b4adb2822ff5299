"""Helpers for tests that simulate hosts with network namespaces they create."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS`` (bounded), capturing its output."""
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


def require_netns() -> None:
    """Skip the test, saying why, where namespaces cannot be created."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` is not installed: cannot create network namespaces")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root (CAP_NET_ADMIN)")


class RoutedHosts:
    """Two simulated hosts (network namespaces) that reach each other only through
    a third one, a router, where the test can drop every packet between them
    (``cut``) and let them through again (``heal``): an outage on the path, as a
    failed switch makes, that neither host's kernel sees (no link goes down, no
    error comes back, TCP just retransmits into the void)."""

    def __init__(self, prefix: str) -> None:
        tag = uuid.uuid4().hex[:6]
        self.prefix = prefix  # "10.N": the hosts are PREFIX.1.1 and PREFIX.2.1
        self.ns = [f"ptc-{tag}-a", f"ptc-{tag}-b"]
        self.router = f"ptc-{tag}-r"
        self.addr = [f"{prefix}.1.1", f"{prefix}.2.1"]
        self._tag = tag
        self._created: list[str] = []
        self._cut = False

    def create(self) -> None:
        """Make the namespaces and links; skips the test, saying why, where it cannot."""
        require_netns()
        t, r = self._tag, self.router
        for n in [*self.ns, r]:
            res = ip("netns", "add", n)
            if res.returncode != 0:
                pytest.skip(f"`ip netns add` failed here: {res.stderr.strip()}")
            self._created.append(n)
        steps: list[tuple[str, ...]] = [("-n", r, "link", "set", "lo", "up")]
        for i, n in enumerate(self.ns):
            host, gw, mine, theirs = f"h{i}{t}", f"g{i}{t}", self.addr[i], f"{self.prefix}.{i + 1}"
            steps += [
                ("link", "add", host, "type", "veth", "peer", "name", gw),
                ("link", "set", host, "netns", n),
                ("link", "set", gw, "netns", r),
                ("-n", n, "addr", "add", f"{mine}/24", "dev", host),
                ("-n", r, "addr", "add", f"{theirs}.254/24", "dev", gw),
                ("-n", n, "link", "set", host, "up"),
                ("-n", n, "link", "set", "lo", "up"),
                ("-n", r, "link", "set", gw, "up"),
                ("-n", n, "route", "add", "default", "via", f"{theirs}.254"),
            ]
        steps.append(("netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        for step in steps:
            res = ip(*step)
            if res.returncode != 0:
                pytest.skip(f"`ip {' '.join(step)}` failed: {res.stderr.strip()}")

    def _routes(self, verb: str) -> None:
        for a in self.addr:
            res = ip("-n", self.router, "route", verb, "blackhole", f"{a}/32")
            assert res.returncode == 0, res.stderr

    def cut(self) -> None:
        """Drop every packet between the hosts, silently, at the router."""
        self._routes("add")
        self._cut = True

    def heal(self) -> None:
        """Let packets through again."""
        if self._cut:
            self._routes("del")
            self._cut = False

    def delete(self) -> None:
        """Remove the namespaces (their links go with them)."""
        for n in self._created:
            ip("netns", "del", n)
        self._created.clear()
