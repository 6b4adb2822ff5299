""":class:`ClusterSpec`, and what every source needs to build one.

The overrides that apply to every source (PYTFCOMM_ADDR, PYTFCOMM_PORT,
PYTFCOMM_BIND_HOST, PYTFCOMM_HOST_ID) are read here, and :func:`_make_spec` decides the
bind host and whether the whole job is loopback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytfcomm.errors import ConfigError

from ._env import _check_port, _env_int, _get
from .address import _host_problem, _norm_host, format_addr, is_loopback_host, parse_addr
from .host_id import default_host_id

#: Ports derived for Slurm and MPI jobs lie in LAUNCHER_PORT_BASE .. +LAUNCHER_PORT_SPAN-1.
LAUNCHER_PORT_BASE = 20000
LAUNCHER_PORT_SPAN = 20000


@dataclass(frozen=True)
class ClusterSpec:
    """This process's place in the job, as decided by :func:`resolve`.

    ``addr`` is rank 0's rendezvous address, ``"host:port"`` (IPv6 as ``"[::1]:port"``).
    ``bind_host`` is the address this rank's listener binds; ``""`` means "let the core
    pick the local address whose route leads to rank 0".  It is never ``"0.0.0.0"``
    unless PYTFCOMM_BIND_HOST asked for it.  Ranks with equal ``host_id`` are on the same
    machine.  ``all_loopback`` is True when every address known for the job is loopback.
    ``local_rank``/``local_size`` are what the launcher said, or None when it said nothing.
    ``job`` names the launcher's job as every rank of it reads it (e.g. ``"SLURM_JOB_ID=12
    SLURM_STEP_ID=0"``), ``""`` when the source has none; ``init()`` checks that all ranks
    agree on it, on ``source`` and on ``size`` (:mod:`pytfcomm._job_check`).
    """

    rank: int
    size: int
    addr: str
    bind_host: str
    host_id: str
    source: str
    all_loopback: bool
    local_rank: int | None = None
    local_size: int | None = None
    job: str = ""

    @property
    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's rendezvous address split into ``(host, port)``."""
        return parse_addr(self.addr)


@dataclass(frozen=True)
class _LauncherIdentity:
    kind: str
    rank: int
    size: int
    local_rank: int | None
    local_size: int | None
    names: str  # the variables that gave rank/size, for messages


def _env_port(env: Mapping[str, str]) -> int | None:
    """PYTFCOMM_PORT, validated to 1..65535, or None when unset."""
    port = _env_int(env, "PYTFCOMM_PORT", "a TCP port number in 1..65535")
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"PYTFCOMM_PORT={port} is out of range: use a port in 1..65535.")
    return port


def _env_addr(env: Mapping[str, str], size: int) -> tuple[str, int] | None:
    """PYTFCOMM_ADDR, parsed and validated, or None when unset."""
    raw = _get(env, "PYTFCOMM_ADDR")
    if raw is None:
        return None
    host, port = parse_addr(raw, what="PYTFCOMM_ADDR")
    _check_port(port, size, "PYTFCOMM_ADDR")
    return host, port


def _bind_override(env: Mapping[str, str]) -> str | None:
    raw = _get(env, "PYTFCOMM_BIND_HOST")
    if raw is None:
        return None
    host = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
    problem = _host_problem(host)
    if problem is not None:
        raise ConfigError(
            f"PYTFCOMM_BIND_HOST={raw!r} is not a valid host ({problem}): give an address or "
            'host name without a port, e.g. "10.0.0.2", "::1" or "0.0.0.0".'
        )
    return _norm_host(host)


def _make_spec(
    *,
    rank: int,
    size: int,
    host: str,
    port: int,
    source: str,
    env: Mapping[str, str],
    own_host: str | None = None,
    extra_hosts: Iterable[str] = (),
    local_rank: int | None = None,
    local_size: int | None = None,
) -> ClusterSpec:
    host = _norm_host(host)
    bind = _bind_override(env)
    if bind is None:
        if own_host is not None:
            bind = _norm_host(own_host)
        elif rank == 0:
            bind = host
        else:
            bind = ""
    hosts = [host, *extra_hosts]
    if bind:
        hosts.append(bind)
    return ClusterSpec(
        rank=rank,
        size=size,
        addr=format_addr(host, port),
        bind_host=bind,
        host_id=default_host_id(env),
        source=source,
        all_loopback=all(is_loopback_host(h) for h in hosts),
        local_rank=local_rank,
        local_size=local_size,
    )
