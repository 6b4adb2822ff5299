"""Free TCP ports: the one helper for pytfcomm-run, split(), tests and benchmarks.

A port is free when the kernel gives it to a socket bound to port 0; it is free "a
moment ago" only: the caller binds it right after, and a job whose port was taken in
between fails with :class:`~pytfcomm.ConfigError` naming it.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack

__all__ = ["free_port", "free_ports"]


def free_ports(host: str = "127.0.0.1", count: int = 1) -> list[int]:
    """``count`` distinct ports that were free on ``host`` a moment ago.

    Every socket stays bound until all are picked, so the ports differ. ``OSError``
    when ``host`` is not an address of this machine.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
            s.bind((host, 0))
            ports.append(int(s.getsockname()[1]))
    return ports


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free on ``host`` a moment ago (see :func:`free_ports`)."""
    return free_ports(host, 1)[0]
