"""Each rank's environment: rank, size, rendezvous address, ports, TF_CONFIG, secret.

Ports (docs/launching.md, "pytfcomm-run"):

* a job on this machine only, without ``--port``: the launcher picks ``size + 1``
  distinct free ports on the rendezvous address, one TensorFlow port per rank and the
  pytfcomm rendezvous port;
* otherwise (remote hosts, or ``--port P``, default 29500): the pytfcomm port is ``P``
  on rank 0's host and the TensorFlow port of a rank is ``P + 1 + local_rank`` on its
  machine, so pytfcomm's port is never one of TensorFlow's.

``PYTFCOMM_ADDR`` is always set, so TF_CONFIG is only there for TensorFlow itself
(``MultiWorkerMirroredStrategy``); pytfcomm reads ``PYTFCOMM_*`` first.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from .._cluster import format_addr
from .._elastic_wire import ADDR_VAR, EPOCH_VAR, GROW_VAR, ID_VAR, JOINER_VAR, WINDOW_VAR
from .._secret import MIN_SECRET, check_secret
from .gpus import GPUS_PER_RANK_VAR
from .hosts import Placement, UsageError
from .ports import free_ports

__all__ = [
    "DEFAULT_PORT",
    "MIN_SECRET",
    "JobPlan",
    "job_secret",
    "launcher_host",
    "make_plan",
]

DEFAULT_PORT = 29500
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Variables the launcher sets for every rank (stale values in the caller's env are replaced).
RANK_VARS = (
    "PYTFCOMM_RANK",
    "PYTFCOMM_SIZE",
    "PYTFCOMM_ADDR",
    "PYTFCOMM_LOCAL_RANK",
    "PYTFCOMM_LOCAL_SIZE",
    "PYTFCOMM_RESTART_COUNT",
    "PYTFCOMM_MAX_RESTARTS",
    "TF_CONFIG",
    GPUS_PER_RANK_VAR,
    ADDR_VAR,
    EPOCH_VAR,
    GROW_VAR,
    ID_VAR,
    JOINER_VAR,
    WINDOW_VAR,
    *(
        f"HOROVOD_{n}"
        for n in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")
    ),
)


@dataclass(frozen=True)
class JobPlan:
    """What every rank is told: ``envs[r]`` holds rank r's variables (secret excluded)."""

    placements: list[Placement]
    addr: str
    tf_workers: list[str]
    envs: list[dict[str, str]]


def job_secret(environ: Mapping[str, str]) -> str:
    """The caller's PYTFCOMM_SECRET if set, else 32 fresh random bytes as hex.

    A given secret must pass ``init()``'s rule (:func:`pytfcomm._secret.check_secret`,
    :class:`~pytfcomm.ConfigError`), checked here so that no rank starts with it.
    """
    given = environ.get("PYTFCOMM_SECRET", "")
    return check_secret(given, "PYTFCOMM_SECRET") or secrets.token_hex(32)


def _route_address(remote: str) -> str:
    """This machine's address on the route to ``remote`` (a UDP connect sends nothing)."""
    try:
        infos = socket.getaddrinfo(remote, 9, type=socket.SOCK_DGRAM)
        family, _, _, _, sockaddr = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)
            return s.getsockname()[0]
    except (OSError, IndexError) as exc:
        raise UsageError(
            f"cannot work out this machine's address as seen from {remote!r} ({exc}): pass "
            "--bind <this machine's address on the network the hosts share>."
        ) from None


def launcher_host(placements: list[Placement], bind: str | None) -> str:
    """This machine's address as the job's other hosts see it: ``--bind``, else the
    address on the route to the first remote host, else loopback (a local job). Local
    ranks are announced under it, and ``--elastic``'s membership service listens on it."""
    if bind:
        return bind
    remote = [p.host for p in placements if not p.host.local]
    return _route_address(remote[0].name) if remote else "127.0.0.1"


def _host_addresses(placements: list[Placement], bind: str | None) -> dict[str, str]:
    """machine key -> the address other ranks use for it (TF_CONFIG, PYTFCOMM_ADDR)."""
    out: dict[str, str] = {}
    for p in placements:
        h = p.host
        if h.machine not in out:
            out[h.machine] = launcher_host(placements, bind) if h.local else h.name
    return out


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct ports that were free on ``host`` a moment ago."""
    try:
        return free_ports(host, count)
    except OSError as exc:
        raise UsageError(f"cannot bind a port on {host!r} ({exc}): check --bind.") from None


def make_plan(placements: list[Placement], *, port: int | None, bind: str | None) -> JobPlan:
    """Addresses, ports and environment of every rank (the secret is added by the caller)."""
    size = len(placements)
    addresses = _host_addresses(placements, bind)
    rank0_host = addresses[placements[0].host.machine]
    all_local = all(p.host.local for p in placements)
    if port is None and all_local:
        ports = _free_ports(rank0_host, size + 1)
        pytfcomm_port, tf_ports = ports[0], ports[1:]
    else:
        pytfcomm_port = DEFAULT_PORT if port is None else port
        top = pytfcomm_port + max(p.local_size for p in placements)
        if pytfcomm_port < 1 or top > 65535:
            raise UsageError(
                f"--port {pytfcomm_port}: ports {pytfcomm_port}..{top} must lie in 1..65535 "
                "(pytfcomm uses the port, TensorFlow the next one per local rank)."
            )
        tf_ports = [pytfcomm_port + 1 + p.local_rank for p in placements]
    addr = format_addr(rank0_host, pytfcomm_port)
    workers = [
        format_addr(addresses[p.host.machine], tf_port)
        for p, tf_port in zip(placements, tf_ports, strict=True)
    ]
    envs = []
    for p in placements:
        # Horovod's names too, for scripts that read them (pytfcomm.horovod reads PYTFCOMM_*).
        # Cross rank/size: this rank among the ranks with its local rank, one per machine.
        peers = [q.rank for q in placements if q.local_rank == p.local_rank]
        horovod = {
            "HOROVOD_RANK": str(p.rank),
            "HOROVOD_SIZE": str(size),
            "HOROVOD_LOCAL_RANK": str(p.local_rank),
            "HOROVOD_LOCAL_SIZE": str(p.local_size),
            "HOROVOD_CROSS_RANK": str(peers.index(p.rank)),
            "HOROVOD_CROSS_SIZE": str(len(peers)),
        }
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": p.rank}}
        envs.append(
            {
                "PYTFCOMM_RANK": str(p.rank),
                "PYTFCOMM_SIZE": str(size),
                "PYTFCOMM_ADDR": addr,
                "PYTFCOMM_LOCAL_RANK": str(p.local_rank),
                "PYTFCOMM_LOCAL_SIZE": str(p.local_size),
                "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
                **horovod,
            }
        )
    return JobPlan(placements, addr, workers, envs)


def forwarded_vars(specs: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """``-x NAME`` (the caller's value) and ``-x NAME=VALUE`` options as a dict."""
    out: dict[str, str] = {}
    for spec in specs:
        name, eq, value = spec.partition("=")
        if not _NAME_RE.fullmatch(name):
            raise UsageError(f"-x {spec!r}: expected NAME or NAME=VALUE with a valid name.")
        if name == "PYTFCOMM_SECRET" or name in RANK_VARS:
            raise UsageError(f"-x {name}: pytfcomm-run sets {name} itself.")
        if not eq:
            if name not in environ:
                raise UsageError(f"-x {name}: {name} is not set here; use -x {name}=VALUE.")
            value = environ[name]
        out[name] = value
    return out


MALLOC_HUGEPAGES = "glibc.malloc.hugetlb=1"


def malloc_hugepages(environ: Mapping[str, str]) -> dict[str, str]:
    """``GLIBC_TUNABLES`` with ``glibc.malloc.hugetlb=1`` added, unless the caller's sets
    ``glibc.malloc.hugetlb`` already: glibc (>= 2.35, ignored before) then asks for
    transparent huge pages for what malloc maps, as NumPy does for its large arrays.
    On machines whose transparent huge pages are ``madvise`` only, TF's tensors otherwise
    sit on 4 KiB pages and a 16 MiB all-reduce of them took 1.3x as long (docs/launching.md)."""
    current = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb=" in current:
        return {}
    return {"GLIBC_TUNABLES": f"{current}:{MALLOC_HUGEPAGES}" if current else MALLOC_HUGEPAGES}


def remote_passthrough(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's PYTFCOMM_* settings (tuning knobs) that remote ranks also get."""
    skip = {*RANK_VARS, "PYTFCOMM_SECRET", "PYTFCOMM_RUN_SSH"}
    return {k: v for k, v in environ.items() if k.startswith("PYTFCOMM_") and k not in skip}


def local_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without stale rank variables (local ranks inherit it)."""
    return {k: v for k, v in environ.items() if k not in RANK_VARS}
