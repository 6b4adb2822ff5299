"""Work out where this process sits in a pytfcomm job.

``resolve()`` turns explicit arguments or the environment into a :class:`ClusterSpec`:
this process's rank, the job size, rank 0's rendezvous address, the local address to
bind, and an identity for the machine.  Sources, highest precedence first:

1. explicit arguments ``resolve(rank=..., size=..., addr=...)``   -> source ``"explicit"``
2. ``PYTFCOMM_RANK`` / ``PYTFCOMM_SIZE`` / ``PYTFCOMM_ADDR``       -> ``"PYTFCOMM"``
3. ``TF_CONFIG`` (MultiWorkerMirroredStrategy layout)            -> ``"TF_CONFIG"``
4. Slurm (a task started by ``srun``)                            -> ``"slurm"``
5. MPI launchers (Open MPI, MPICH/Hydra, Intel MPI, PMIx)        -> ``"mpi"``
6. nothing found: a single-process job                           -> ``"single"``

This module is pure Python: it imports no TensorFlow and opens no sockets.  Its only
name lookups are in :func:`is_loopback_host`, for host names (bounded in time, cached).
Every error is a :class:`pytfcomm.errors.ConfigError` whose message names
the argument or variable at fault and what to set.  docs/launching.md is the user guide.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import socket
import threading
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pytfcomm.errors import ConfigError

__all__ = [
    "MAX_SIZE",
    "SOURCES",
    "ClusterSpec",
    "ConfigError",
    "default_host_id",
    "format_addr",
    "is_loopback_host",
    "launcher_port",
    "parse_addr",
    "resolve",
    "slurm_first_host",
    "slurm_port",
    "tf_rendezvous_port",
]

SOURCES: tuple[str, ...] = ("explicit", "PYTFCOMM", "TF_CONFIG", "slurm", "mpi", "single")

#: The most ranks a job may have: the TCP transport keeps a rank in 15 bits of its
#: request handles (csrc/transport/host/transport.cc), so sizes are 1..MAX_SIZE.
MAX_SIZE = 2**15 - 1

#: Digits read from an integer variable at most: any longer value is out of every
#: range here, and Python refuses to convert strings of over 4300 digits at all.
_MAX_INT_DIGITS = 18

#: Longest wait for one host name lookup in is_loopback_host(): a name that takes longer
#: counts as not loopback (the safe side: the job then needs a secret).
DNS_TIMEOUT_S = 2.0

#: Address used when a single-process job needs no rendezvous.
SINGLE_PROCESS_ADDR = "127.0.0.1:0"

#: Ports derived for Slurm and MPI jobs lie in LAUNCHER_PORT_BASE .. +LAUNCHER_PORT_SPAN-1.
LAUNCHER_PORT_BASE = 20000
LAUNCHER_PORT_SPAN = 20000

#: TF_CONFIG rendezvous port: rank 0's TF port + TF_PORT_OFFSET, wrapped into
#: TF_PORT_MIN..TF_PORT_MAX, skipping every port that TF_CONFIG lists.
TF_PORT_OFFSET = 1000
TF_PORT_MIN = 1024
TF_PORT_MAX = 65535

_TF_TASK_TYPES = ("chief", "worker", "evaluator", "ps")

# Job identifiers that every rank of one MPI job shares, in lookup order.
_MPI_JOB_ID_VARS = (
    "OMPI_MCA_ess_base_jobid",  # Open MPI 3/4 (ORTE)
    "OMPI_MCA_orte_ess_jobid",  # older Open MPI
    "PMIX_NAMESPACE",  # PMIx: Open MPI 5 / PRRTE, srun --mpi=pmix
    "PMI_JOBID",  # PMI-2 servers (srun --mpi=pmi2, PALS)
    "I_MPI_HYDRA_UUID",  # Intel MPI's Hydra
)

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_IPC_NS_PATH = "/proc/self/ns/ipc"

_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_DIGITS_RE = re.compile(r"[0-9]+")
_INT_RE = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class ClusterSpec:
    """This process's place in the job, as decided by :func:`resolve`.

    ``addr`` is rank 0's rendezvous address, ``"host:port"`` (IPv6 as ``"[::1]:port"``).
    ``bind_host`` is the address this rank's listener binds; ``""`` means "let the core
    pick the local address whose route leads to rank 0".  It is never ``"0.0.0.0"``
    unless PYTFCOMM_BIND_HOST asked for it.  Ranks with equal ``host_id`` are on the same
    machine.  ``all_loopback`` is True when every address known for the job is loopback.
    ``local_rank``/``local_size`` are what the launcher said, or None when it said nothing.
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

    @property
    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's rendezvous address split into ``(host, port)``."""
        return parse_addr(self.addr)


# --------------------------------------------------------------------------- helpers


def _get(env: Mapping[str, str], name: str) -> str | None:
    """The stripped value of ``name``; unset, empty and blank all count as unset."""
    value = env.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _first_set(env: Mapping[str, str], names: Iterable[str]) -> str | None:
    for name in names:
        if _get(env, name) is not None:
            return name
    return None


def _quote(value: object, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def _int_text(value: int) -> str:
    """``value`` for a message: Python refuses to print ints of over 4300 digits."""
    if -(10**_MAX_INT_DIGITS) < value < 10**_MAX_INT_DIGITS:
        return str(value)
    return f"{'-' if value < 0 else ''}<a {value.bit_length()}-bit integer>"


def _env_int(env: Mapping[str, str], name: str, meaning: str) -> int | None:
    raw = _get(env, name)
    if raw is None:
        return None
    if not _INT_RE.fullmatch(raw):
        raise ConfigError(f"{name}={_quote(raw)} is not an integer: set {name} to {meaning}.")
    if len(raw.lstrip("+-").lstrip("0")) > _MAX_INT_DIGITS:
        raise ConfigError(f"{name}={_quote(raw, 40)} is out of range: set {name} to {meaning}.")
    return int(raw)


_SIZE_RANGE = f"1..{MAX_SIZE}"
_SIZE_WHY = f"pytfcomm runs jobs of up to {MAX_SIZE} ranks"


def _check_rank_size(rank: int, size: int, rank_name: str, size_name: str) -> None:
    if size < 1:
        raise ConfigError(
            f"{size_name}={_int_text(size)} is invalid: the job size must be at least 1 "
            f"(valid: {_SIZE_RANGE})."
        )
    if size > MAX_SIZE:
        raise ConfigError(
            f"{size_name}={_int_text(size)} is out of range: the job size must be in "
            f"{_SIZE_RANGE} ({_SIZE_WHY})."
        )
    if not 0 <= rank < size:
        raise ConfigError(
            f"{rank_name}={_int_text(rank)} is out of range for {size_name}={size}: "
            f"the rank must satisfy 0 <= rank < {size}."
        )


def _check_local(
    local_rank: int | None,
    local_size: int | None,
    size: int,
    names: tuple[str | None, str | None],
    size_name: str,
) -> None:
    """A launcher's local rank / local size (either may be None), against the job size."""
    lrank_name, lsize_name = names
    if local_size is not None and not 1 <= local_size <= size:
        raise ConfigError(
            f"{lsize_name}={_int_text(local_size)} is out of range 1..{size} ({size_name})."
        )
    limit = local_size or size
    if local_rank is not None and not 0 <= local_rank < limit:
        raise ConfigError(
            f"{lrank_name}={_int_text(local_rank)} is out of range: it must satisfy "
            f"0 <= {lrank_name} < {limit} ({lsize_name if local_size else size_name})."
        )


def _check_port(port: int, size: int, what: str) -> None:
    if port == 0 and size == 1:
        return
    if not 1 <= port <= 65535:
        raise ConfigError(
            f"{what}: port {port} is invalid for a {size}-process job: use a port in "
            "1..65535 (port 0 is only allowed when the job has a single process)."
        )


def _host_problem(host: str) -> str | None:
    """Why ``host`` is not an IPv6 literal (no brackets), IPv4 address or name; None if fine."""
    if not host:
        return "the host is empty"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} is not an IPv6 address"
        return None
    if not _NAME_RE.fullmatch(host):
        return f"{host!r} contains characters not allowed in a host name"
    if "." in host and re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"{host!r} is not a valid IPv4 address"
    return None


def _norm_host(host: str) -> str:
    """``localhost`` becomes ``127.0.0.1`` (so binder and connectors agree on IPv4)."""
    return "127.0.0.1" if host.lower().rstrip(".") == "localhost" else host


def _host_key(host: str) -> str:
    """A comparison key: equal keys are the same address as written (no DNS)."""
    host = _norm_host(host)
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host.lower().rstrip(".")


def format_addr(host: str, port: int) -> str:
    """Join ``host`` and ``port`` into ``"host:port"``, bracketing IPv6 literals."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_loopback_ip(text: str) -> bool:
    """True for 127.0.0.0/8, ``::1`` and IPv4-mapped loopback; False for non-addresses."""
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def _lookup(name: str, timeout: float) -> list[str] | None:
    """The addresses ``name`` resolves to; None when it does not resolve in ``timeout`` s.

    getaddrinfo cannot be interrupted, so it runs in a daemon thread that is left
    behind when the resolver hangs (it ends with the resolver's own timeout).
    """
    found: list[list[str] | None] = []

    def run() -> None:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
            found.append([str(info[4][0]) for info in infos])
        except Exception:  # gaierror, UnicodeError (bad IDNA label), anything else
            found.append(None)

    thread = threading.Thread(target=run, name="pytfcomm-lookup", daemon=True)
    thread.start()
    thread.join(timeout)
    return found[0] if found else None


@functools.lru_cache(maxsize=256)
def _name_is_loopback(name: str) -> bool:
    addresses = _lookup(name, DNS_TIMEOUT_S)
    return bool(addresses) and all(_is_loopback_ip(a) for a in addresses)


def is_loopback_host(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8, ``::1``, IPv4-mapped loopback, and host names
    that resolve only to such addresses.

    A one-node Slurm job names its node, e.g. ``vm``, which /etc/hosts maps to
    127.0.0.1 or 127.0.1.1: connections to it never leave the machine.  A name is
    looked up once per process (cached) and at most DNS_TIMEOUT_S seconds; a name
    that does not resolve in time, or resolves to any other address, is not
    loopback.  So are ``""``, ``0.0.0.0`` and ``::``.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    name = text.lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        if _host_problem(text) is not None:  # not a name: nothing to look up
            return False
        return _name_is_loopback(name)
    return _is_loopback_ip(text)


def parse_addr(text: str, what: str = "address") -> tuple[str, int]:
    """Split ``"host:port"`` or ``"[ipv6]:port"`` into ``(host, port)``.

    The host comes back without brackets; the port is 0..65535 (callers decide whether 0
    is acceptable).  ``what`` names the setting in error messages, e.g. "PYTFCOMM_ADDR".
    Raises ConfigError saying what is wrong: no port, an unbracketed IPv6 address, a URL
    scheme, a bad host or a port that is not a number in range.
    """
    if not isinstance(text, str):
        raise ConfigError(
            f'{what} must be a string "host:port", not {type(text).__name__} {text!r}.'
        )

    def bad(reason: str) -> ConfigError:
        return ConfigError(
            f'{what}={_quote(text)} is not a valid address: {reason}. Expected "host:port", '
            'e.g. "10.0.0.1:29500", or "[fd00::1]:29500" for IPv6.'
        )

    s = text.strip()
    if not s:
        raise bad("it is empty")
    if "://" in s:
        raise bad('remove the URL scheme ("...://")')
    if any(c.isspace() for c in s):
        raise bad("it contains whitespace")
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            raise bad("the '[' of the IPv6 address is never closed with ']'")
        host, rest = s[1:end], s[end + 1 :]
        if not rest.startswith(":"):
            raise bad("the port is missing: add ':<port>' after ']'")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad(f"{host!r} inside the brackets is not an IPv6 address") from None
    else:
        if ":" not in s:
            raise bad("the port is missing")
        host, _, port_text = s.rpartition(":")
        if ":" in host:
            raise bad('an IPv6 address must be written in brackets, e.g. "[::1]:29500"')
        problem = _host_problem(host)
        if problem is not None:
            raise bad(problem)
    if not port_text:
        raise bad("the port is empty")
    if not _DIGITS_RE.fullmatch(port_text):
        raise bad(f"the port {port_text!r} is not a number")
    if len(port_text.lstrip("0")) > 5:
        raise bad(f"the port {_quote(port_text, 20)} is out of range 0..65535")
    port = int(port_text)
    if port > 65535:
        raise bad(f"the port {port} is out of range 0..65535")
    return host, port


# --------------------------------------------------------------------------- host identity


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


# --------------------------------------------------------------------------- ports


def _wrap_tf_port(port: int) -> int:
    span = TF_PORT_MAX - TF_PORT_MIN + 1
    return TF_PORT_MIN + (port - TF_PORT_MIN) % span


def tf_rendezvous_port(rank0_tf_port: int, tf_ports: Iterable[int]) -> int:
    """The pytfcomm port for a TF_CONFIG job, the same on every rank.

    Start at ``rank0_tf_port + 1000``, wrap into 1024..65535, and step up by one (wrapping
    again) past every port in ``tf_ports`` -- all ports TF_CONFIG lists, any task type.
    """
    used = set(tf_ports)
    port = _wrap_tf_port(rank0_tf_port + TF_PORT_OFFSET)
    for _ in range(TF_PORT_MAX - TF_PORT_MIN + 1):
        if port not in used:
            return port
        port = _wrap_tf_port(port + 1)
    raise ConfigError("TF_CONFIG uses every port in 1024..65535: set PYTFCOMM_PORT.")


def slurm_port(job_id: int, step_id: int = 0) -> int:
    """Slurm's derived port: ``20000 + (job_id * 31 + step_id) % 20000``.

    Different steps of one job and nearby job ids get different ports.
    """
    return LAUNCHER_PORT_BASE + (job_id * 31 + step_id) % LAUNCHER_PORT_SPAN


def launcher_port(job_id: str) -> int:
    """An MPI job's derived port: ``20000 + zlib.crc32(job_id.encode()) % 20000``."""
    return LAUNCHER_PORT_BASE + zlib.crc32(job_id.encode("utf-8")) % LAUNCHER_PORT_SPAN


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


# --------------------------------------------------------------------------- spec assembly


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


# --------------------------------------------------------------------------- sources


def _from_explicit(
    rank: int | None, size: int | None, addr: str | None, env: Mapping[str, str]
) -> ClusterSpec:
    missing = [
        name for name, value in (("rank", rank), ("size", size), ("addr", addr)) if value is None
    ]
    if missing == ["addr"] and size == 1:
        addr, missing = SINGLE_PROCESS_ADDR, []
    if missing:
        raise ConfigError(
            "resolve(): explicit configuration needs rank, size and addr together; missing: "
            f"{', '.join(missing)}. Pass all three (addr may be left out only when size=1), "
            "or none of them to read the configuration from the environment."
        )
    for name, value in (("rank", rank), ("size", size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"resolve({name}={value!r}): {name} must be an int.")
    assert rank is not None and size is not None and addr is not None
    _check_rank_size(rank, size, "rank", "size")
    host, port = parse_addr(addr, what="resolve(addr)")
    _check_port(port, size, "resolve(addr)")
    return _make_spec(rank=rank, size=size, host=host, port=port, source="explicit", env=env)


def _from_pytfcomm_env(env: Mapping[str, str]) -> ClusterSpec | None:
    rank = _env_int(env, "PYTFCOMM_RANK", "this process's rank, 0 <= rank < PYTFCOMM_SIZE")
    size = _env_int(env, "PYTFCOMM_SIZE", f"the number of processes in the job, {_SIZE_RANGE}")
    if rank is None and size is None:
        return None
    if rank is None:
        raise ConfigError(
            "PYTFCOMM_SIZE is set but PYTFCOMM_RANK is not: set PYTFCOMM_RANK to this "
            "process's rank (0 <= rank < PYTFCOMM_SIZE); the two are always set together."
        )
    if size is None:
        raise ConfigError(
            "PYTFCOMM_RANK is set but PYTFCOMM_SIZE is not: set PYTFCOMM_SIZE to the number "
            "of processes in the job; the two are always set together."
        )
    _check_rank_size(rank, size, "PYTFCOMM_RANK", "PYTFCOMM_SIZE")
    parsed = _env_addr(env, size)
    if parsed is None:
        if size > 1:
            raise ConfigError(
                f"PYTFCOMM_SIZE={size} but PYTFCOMM_ADDR is not set: set PYTFCOMM_ADDR to rank "
                "0's <host>:<port>, the same on every rank, e.g. PYTFCOMM_ADDR=10.0.0.1:29500."
            )
        parsed = parse_addr(SINGLE_PROCESS_ADDR)
    host, port = parsed
    local_rank, local_size = _pytfcomm_local(env, size)
    return _make_spec(
        rank=rank,
        size=size,
        host=host,
        port=port,
        source="PYTFCOMM",
        env=env,
        local_rank=local_rank,
        local_size=local_size,
    )


def _pytfcomm_local(env: Mapping[str, str], size: int) -> tuple[int | None, int | None]:
    """PYTFCOMM_LOCAL_RANK / PYTFCOMM_LOCAL_SIZE (set by pytfcomm-run), checked; None if unset."""
    local_rank = _env_int(env, "PYTFCOMM_LOCAL_RANK", "this rank's index on its host")
    local_size = _env_int(env, "PYTFCOMM_LOCAL_SIZE", "the number of ranks on this host")
    names = ("PYTFCOMM_LOCAL_RANK", "PYTFCOMM_LOCAL_SIZE")
    _check_local(local_rank, local_size, size, names, "PYTFCOMM_SIZE")
    return local_rank, local_size


_TF_EXAMPLE = (
    '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}'
)


def _tf_error(problem: str, fix: str) -> ConfigError:
    return ConfigError(f"TF_CONFIG {problem}: {fix}. Example: TF_CONFIG='{_TF_EXAMPLE}'.")


def _from_tf_config(env: Mapping[str, str]) -> ClusterSpec | None:
    raw = _get(env, "TF_CONFIG")
    if raw is None:
        return None
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _tf_error(
            f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}) in "
            f"{_quote(raw)}",
            "fix the JSON (keys and strings need double quotes)",
        ) from None
    except ValueError:  # an integer of over 4300 digits
        raise _tf_error(
            f"holds a number with too many digits in {_quote(raw)}",
            "give task.index as this process's position in its list",
        ) from None
    if not isinstance(cfg, dict):
        raise _tf_error(f"must be a JSON object, got {_quote(raw)}", 'give "cluster" and "task"')
    cluster, task = cfg.get("cluster"), cfg.get("task")
    if not isinstance(cluster, dict) or not cluster:
        what = "has no" if cluster is None else f"has an unusable {_quote(cluster)} as its"
        raise _tf_error(
            f'{what} "cluster"',
            'set "cluster" to an object mapping "chief"/"worker" to lists of "host:port"',
        )
    unknown = sorted(k for k in cluster if k not in _TF_TASK_TYPES)
    if unknown:
        raise _tf_error(
            f"cluster has unsupported task type(s) {', '.join(map(repr, unknown))}",
            'use "chief" and "worker" (an "evaluator" may be listed but does not join)',
        )
    if cluster.get("ps"):
        raise _tf_error(
            f'cluster has "ps" tasks {_quote(cluster["ps"])}',
            'parameter-server clusters are not supported by all-reduce; remove "ps" and '
            'run a MultiWorkerMirroredStrategy-style cluster of "chief"/"worker" tasks, '
            "where every worker holds all variables and updates them synchronously. How to "
            "move a ps/worker or ParameterServerStrategy job, and what all-reduce does not "
            "replace (asynchronous updates): docs/migrating.md#no-parameter-servers",
        )

    entries: dict[str, list[tuple[str, int]]] = {}
    seen: dict[str, str] = {}
    for ttype in _TF_TASK_TYPES:
        listed = cluster.get(ttype)
        if listed is None:
            continue
        if not isinstance(listed, list):
            raise _tf_error(
                f"cluster.{ttype} is {_quote(listed)}",
                f'make cluster.{ttype} a list of "host:port" strings',
            )
        parsed: list[tuple[str, int]] = []
        for i, item in enumerate(listed):
            where = f"TF_CONFIG cluster.{ttype}[{i}]"
            if not isinstance(item, str):
                raise _tf_error(
                    f"cluster.{ttype}[{i}] is {_quote(item)}",
                    'write each task as a "host:port" string',
                )
            host, port = parse_addr(item, what=where)
            if port == 0:
                raise _tf_error(
                    f"cluster.{ttype}[{i}] {item!r} has port 0",
                    "give each task its real port, 1..65535",
                )
            key = format_addr(_host_key(host), port)
            if key in seen:
                raise _tf_error(
                    f"lists the address {item!r} twice, at {seen[key]} and cluster.{ttype}[{i}]",
                    "give every task its own host:port",
                )
            seen[key] = f"cluster.{ttype}[{i}]"
            parsed.append((host, port))
        entries[ttype] = parsed
    chief, workers = entries.get("chief", []), entries.get("worker", [])
    if len(chief) > 1:
        raise _tf_error(
            f"cluster.chief has {len(chief)} entries {_quote(cluster['chief'])}",
            "list at most one chief",
        )
    if not chief and not workers:
        raise _tf_error(
            'cluster has no "chief" or "worker" tasks',
            'list the processes of the job under "worker" (and optionally one "chief")',
        )

    if not isinstance(task, dict):
        what = "has no" if task is None else f"has an unusable {_quote(task)} as its"
        raise _tf_error(
            f'{what} "task"', 'set "task" to {"type": "worker", "index": <this process\'s index>}'
        )
    ttype, index = task.get("type"), task.get("index")
    if ttype == "evaluator":
        raise ConfigError(
            f"TF_CONFIG task {_quote(task)} is an evaluator: evaluators don't join "
            "collectives, so an evaluator process must not initialise pytfcomm. Only "
            '"chief" and "worker" tasks take part in all-reduce. Run the evaluation as a '
            "separate process that reads the chief's checkpoints and never calls "
            "pytfcomm.init() or pytfcomm.MultiWorkerMirroredStrategy(): "
            "docs/migrating.md#no-evaluator-task."
        )
    if ttype not in ("chief", "worker"):
        raise _tf_error(
            f"task.type is {_quote(ttype) if ttype is not None else 'missing'}",
            'set task.type to "chief" or "worker"'
            + (" (all-reduce has no parameter servers: docs/migrating.md#no-parameter-servers)"
               if ttype == "ps" else ""),
        )
    if isinstance(index, str) and _DIGITS_RE.fullmatch(index.strip()):
        digits = index.strip().lstrip("0")
        index = int(digits or "0") if len(digits) <= _MAX_INT_DIGITS else 10**_MAX_INT_DIGITS
    if not isinstance(index, int) or isinstance(index, bool):
        raise _tf_error(
            f"task.index is {_quote(index) if index is not None else 'missing'} in {_quote(task)}",
            f"set task.index to this process's position (0-based) in the cluster.{ttype} list",
        )
    members = chief if ttype == "chief" else workers
    if not 0 <= index < len(members):
        valid = f"0..{len(members) - 1}" if members else "none: the list is empty"
        raise _tf_error(
            f"task {_quote(task)} is out of range: cluster.{ttype} has {len(members)} "
            f"entr{'y' if len(members) == 1 else 'ies'} (valid indices: {valid})",
            "fix task.index or add the missing address to the cluster list",
        )

    size = len(chief) + len(workers)
    if size > MAX_SIZE:
        raise _tf_error(
            f"cluster lists {size} chief and worker tasks", f"{_SIZE_WHY}: list {_SIZE_RANGE}"
        )
    rank = index if ttype == "chief" else len(chief) + index
    own_host = members[index][0]
    rank0_host, rank0_tf_port = (chief + workers)[0]
    all_hosts = [h for lst in entries.values() for h, _ in lst]
    port_env = _env_port(env)
    override = _env_addr(env, size)
    if override is not None:
        host, port = override
    else:
        host = rank0_host
        if port_env is not None:
            rank0_key = _host_key(rank0_host)
            for ttype_, lst in entries.items():
                for i, (h, p) in enumerate(lst):
                    if p == port_env and _host_key(h) == rank0_key:
                        raise ConfigError(
                            f"PYTFCOMM_PORT={port_env} is the TensorFlow port of TF_CONFIG "
                            f"cluster.{ttype_}[{i}] on rank 0's host {h!r}: choose another "
                            "PYTFCOMM_PORT, or unset it to derive a free one."
                        )
            port = port_env
        else:
            port = tf_rendezvous_port(
                rank0_tf_port, [p for lst in entries.values() for _, p in lst]
            )
    return _make_spec(
        rank=rank,
        size=size,
        host=host,
        port=port,
        source="TF_CONFIG",
        env=env,
        own_host=own_host,
        extra_hosts=[_norm_host(h) for h in all_hosts],
    )


def slurm_first_host(nodelist: str, what: str = "SLURM_JOB_NODELIST") -> str:
    """The first host of a Slurm hostlist, e.g. ``"node[03-05,7],gpu1"`` -> ``"node03"``.

    Only the first entry is expanded; every ``[...]`` in it contributes the start of its
    first range with its zero padding, so ``"rack[1-2]-n[08-09]"`` -> ``"rack1-n08"``.
    ``what`` names the variable in errors.
    """
    text = nodelist.strip()

    def bad(reason: str) -> ConfigError:
        return ConfigError(
            f"{what}={nodelist!r} is not a Slurm host list ({reason}): expected e.g. "
            '"node[01-04],gpu7"; or set PYTFCOMM_ADDR=<rank 0 host>:<port>.'
        )

    if not text:
        raise bad("it is empty")
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == ",":
            break
        if c == "]":
            raise bad("']' without '['")
        if c == "[":
            end = text.find("]", i)
            if end < 0:
                raise bad("'[' is never closed")
            inner = text[i + 1 : end]
            if "[" in inner:
                raise bad("nested '['")
            first = inner.split(",", 1)[0].split("-", 1)[0].strip()
            if not _DIGITS_RE.fullmatch(first):
                raise bad(f"range [{inner}] does not start with a number")
            out.append(first)
            i = end + 1
            continue
        out.append(c)
        i += 1
    host = "".join(out)
    problem = _host_problem(host)
    if problem is not None:
        raise bad(f"first host: {problem}")
    return host


@dataclass(frozen=True)
class _LauncherIdentity:
    kind: str
    rank: int
    size: int
    local_rank: int | None
    local_size: int | None
    names: str  # the variables that gave rank/size, for messages


def _slurm_identity(env: Mapping[str, str]) -> _LauncherIdentity | None:
    if _get(env, "SLURM_PROCID") is None:
        return None
    # The batch script of sbatch and the shell of salloc carry SLURM_PROCID=0 and the
    # allocation's SLURM_NTASKS but are not srun tasks; only srun sets a step id.
    if _first_set(env, ("SLURM_STEP_ID", "SLURM_STEPID")) is None:
        return None
    rank = _env_int(env, "SLURM_PROCID", "this task's rank, 0 <= rank < the task count")
    size_var = _first_set(env, ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"))
    if size_var is None:
        raise ConfigError(
            "Slurm: SLURM_PROCID is set but none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS or "
            "SLURM_NPROCS is: launch with srun -n <tasks>, or set PYTFCOMM_RANK, "
            "PYTFCOMM_SIZE and PYTFCOMM_ADDR."
        )
    size = _env_int(env, size_var, f"the number of tasks in the step, {_SIZE_RANGE}")
    assert rank is not None and size is not None
    _check_rank_size(rank, size, "SLURM_PROCID", size_var)
    local_rank = _env_int(env, "SLURM_LOCALID", "the task's index on its node")
    _check_local(local_rank, None, size, ("SLURM_LOCALID", None), size_var)
    return _LauncherIdentity("slurm", rank, size, local_rank, None, f"SLURM_PROCID/{size_var}")


def _from_slurm(ident: _LauncherIdentity, env: Mapping[str, str]) -> ClusterSpec:
    port_env = _env_port(env)
    override = _env_addr(env, ident.size)
    if override is not None:
        host, port = override
    else:
        list_var = _first_set(env, ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"))
        if list_var is None:
            raise ConfigError(
                "Slurm: neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set, so rank "
                "0's host is unknown: set PYTFCOMM_ADDR=<rank 0 host>:<port>."
            )
        host = slurm_first_host(env[list_var], what=list_var)
        if port_env is not None:
            port = port_env
        else:
            job_var = _first_set(env, ("SLURM_JOB_ID", "SLURM_JOBID"))
            job_id = _env_int(env, job_var, "the numeric Slurm job id") if job_var else None
            if job_id is None or job_id < 0:
                raise ConfigError(
                    "Slurm: SLURM_JOB_ID is not set to a job number, so no port can be derived: "
                    "set PYTFCOMM_PORT=<port>, the same for all tasks."
                )
            step_var = _first_set(env, ("SLURM_STEP_ID", "SLURM_STEPID"))
            step_id = _env_int(env, step_var, "the numeric step id") if step_var else None
            port = slurm_port(job_id, max(step_id or 0, 0))
    return _make_spec(
        rank=ident.rank,
        size=ident.size,
        host=host,
        port=port,
        source="slurm",
        env=env,
        local_rank=ident.local_rank,
    )


# (family, rank var, size vars, local rank vars, local size vars)
_MPI_FAMILIES: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "Open MPI",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_SIZE",),
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
    ),
    ("MPICH/Intel MPI", "PMI_RANK", ("PMI_SIZE",), ("MPI_LOCALRANKID",), ("MPI_LOCALNRANKS",)),
    (
        "PMIx",
        "PMIX_RANK",
        ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"),
    ),
)


def _mpi_identity(env: Mapping[str, str]) -> _LauncherIdentity | None:
    for family, rank_var, size_vars, lrank_vars, lsize_vars in _MPI_FAMILIES:
        if _get(env, rank_var) is None:
            continue
        rank = _env_int(env, rank_var, "this process's MPI rank")
        size_var = _first_set(env, size_vars)
        if size_var is None:
            raise ConfigError(
                f"{family}: {rank_var} is set but the world size is not (looked for "
                f"{' / '.join(size_vars)}): set PYTFCOMM_RANK, PYTFCOMM_SIZE and PYTFCOMM_ADDR "
                "instead."
            )
        size = _env_int(env, size_var, f"the number of MPI processes, {_SIZE_RANGE}")
        assert rank is not None and size is not None
        _check_rank_size(rank, size, rank_var, size_var)
        lrank_var, lsize_var = _first_set(env, lrank_vars), _first_set(env, lsize_vars)
        local_rank = _env_int(env, lrank_var, "the local rank") if lrank_var else None
        local_size = _env_int(env, lsize_var, "the ranks on this host") if lsize_var else None
        _check_local(local_rank, local_size, size, (lrank_var, lsize_var), size_var)
        return _LauncherIdentity(
            family, rank, size, local_rank, local_size, f"{rank_var}/{size_var}"
        )
    return None


_MPI_FORWARD_HINT = (
    "forward it to every rank: Open MPI 'mpirun -x PYTFCOMM_ADDR ...', MPICH/Intel MPI "
    "'mpiexec -genv PYTFCOMM_ADDR <host>:<port> ...'"
)


def _from_mpi(ident: _LauncherIdentity, env: Mapping[str, str]) -> ClusterSpec:
    port_env = _env_port(env)
    override = _env_addr(env, ident.size)
    own_host: str | None = None
    if override is not None:
        host, port = override
    elif ident.size == 1 or ident.local_size == ident.size:
        host = own_host = "127.0.0.1"
        job_var = _first_set(env, _MPI_JOB_ID_VARS)
        if port_env is not None:
            port = port_env
        elif job_var is not None:
            port = launcher_port(env[job_var].strip())
        elif ident.size == 1:
            port = 0
        else:
            raise ConfigError(
                f"{ident.kind} ({ident.names}): no job identifier to derive a port from "
                f"(looked for {', '.join(_MPI_JOB_ID_VARS)}): set PYTFCOMM_PORT=<port>, the "
                "same on every rank (mpiexec exports your environment; Open MPI needs "
                "'mpirun -x PYTFCOMM_PORT')."
            )
    elif ident.local_size is None:
        raise ConfigError(
            f"{ident.kind} ({ident.names}): the launcher does not say how many ranks share "
            "this host (OMPI_COMM_WORLD_LOCAL_SIZE / MPI_LOCALNRANKS unset), so rank 0's "
            f"host is unknown: set PYTFCOMM_ADDR=<rank0 host>:<port> and {_MPI_FORWARD_HINT}."
        )
    else:
        raise ConfigError(
            f"mpirun across hosts: set PYTFCOMM_ADDR=<rank0 host>:<port> and "
            f"{_MPI_FORWARD_HINT}. ({ident.kind} reports {ident.size} ranks, "
            f"{ident.local_size} of them on this host.)"
        )
    return _make_spec(
        rank=ident.rank,
        size=ident.size,
        host=host,
        port=port,
        source="mpi",
        env=env,
        own_host=own_host,
        local_rank=ident.local_rank,
        local_size=ident.local_size,
    )


# --------------------------------------------------------------------------- entry point


def resolve(
    rank: int | None = None,
    size: int | None = None,
    addr: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClusterSpec:
    """Decide this process's rank, the job size, rank 0's address and what to bind.

    Explicit arguments win: give ``rank``, ``size`` and ``addr`` together (``addr`` may be
    left out when ``size == 1``).  With none given, the environment (``environ``, default
    ``os.environ``) is read in this order: PYTFCOMM_RANK/SIZE/ADDR, TF_CONFIG, Slurm (srun
    tasks), MPI launchers; when none is present the job is a single process.
    PYTFCOMM_ADDR also overrides the address derived from TF_CONFIG, Slurm or MPI;
    PYTFCOMM_PORT the derived port; PYTFCOMM_BIND_HOST the bind host; PYTFCOMM_HOST_ID the
    host identity.  Raises ConfigError, naming the argument or variable at fault.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    if rank is not None or size is not None or addr is not None:
        return _from_explicit(rank, size, addr, env)

    spec = _from_pytfcomm_env(env)
    if spec is not None:
        return spec
    spec = _from_tf_config(env)
    if spec is not None:
        return spec

    slurm = _slurm_identity(env)
    mpi = _mpi_identity(env)
    # mpirun inside a Slurm allocation: the ranks inherit the Slurm variables of the step
    # that started the MPI daemons, which describe that step, not the MPI job.
    if slurm is not None and (mpi is None or (mpi.rank, mpi.size) == (slurm.rank, slurm.size)):
        return _from_slurm(slurm, env)
    if mpi is not None:
        return _from_mpi(mpi, env)

    if _get(env, "PYTFCOMM_ADDR") is not None:
        raise ConfigError(
            "PYTFCOMM_ADDR is set but this process's rank and the job size are unknown "
            "(no PYTFCOMM_RANK/PYTFCOMM_SIZE, TF_CONFIG, srun or MPI launcher found): set "
            "PYTFCOMM_RANK and PYTFCOMM_SIZE too, or unset PYTFCOMM_ADDR for a "
            "single-process run."
        )
    return _make_spec(rank=0, size=1, host="127.0.0.1", port=0, source="single", env=env)
