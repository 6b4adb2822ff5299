"""An identity for this machine: ranks with equal ids can share memory."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from ._env import _get

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_IPC_NS_PATH = "/proc/self/ns/ipc"


def _read_boot_id() -> str | None:
    try:
        with open(_BOOT_ID_PATH, encoding="ascii") as f:
            value = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value or None


def _read_ipc_namespace() -> str | None:
    try:
        return os.readlink(_IPC_NS_PATH)
    except OSError:
        return None


def default_host_id(environ: Mapping[str, str] | None = None) -> str:
    """Identify this machine; processes with equal ids can share memory.

    ``PYTFCOMM_HOST_ID`` (from ``environ``, default ``os.environ``) wins when set; tests use
    it to simulate several hosts.  Otherwise the id is the hostname, plus the kernel boot id
    (``/proc/sys/kernel/random/boot_id``) and the IPC namespace (``/proc/self/ns/ipc``) when
    readable: two containers that share a hostname but not a kernel get different ids,
    and so do containers on one kernel whose IPC namespaces (and /dev/shm) are separate.
    """
    env = os.environ if environ is None else environ
    override = _get(env, "PYTFCOMM_HOST_ID")
    if override is not None:
        return override
    parts = [socket.gethostname() or "unknown-host"]
    boot_id = _read_boot_id()
    if boot_id:
        parts.append(boot_id)
    ipc_ns = _read_ipc_namespace()
    if ipc_ns:
        parts.append(ipc_ns)
    return "/".join(parts)
