"""Host lists (``-H``, ``--hostfile``) and the placement of ranks on hosts.

Ranks fill the hosts in the order given, each host up to its slots ("block"
placement, as ``mpirun`` and ``horovodrun`` do). Hosts that are this machine
(``localhost``, 127.0.0.0/8, ``::1``, this hostname, an address of this machine)
run their ranks without ssh; all of them count as one machine for local ranks.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from .._cluster import _host_problem, is_loopback_host

__all__ = ["Host", "Placement", "UsageError", "parse_host_list", "parse_hostfile", "place"]

#: Key shared by every host that is this machine.
LOCAL_MACHINE = "<local>"

_SLOTS_RE = re.compile(r"[0-9]+")


class UsageError(Exception):
    """A bad command line or host list; the launcher prints it and exits with 2."""


@dataclass(frozen=True)
class Host:
    """One entry of the host list.

    ``target`` is what ssh is given (``user@name`` kept), ``name`` the host part used
    in addresses, ``local`` whether it is this machine (started without ssh).
    """

    target: str
    name: str
    slots: int
    local: bool

    @property
    def machine(self) -> str:
        """Equal for entries that are the same machine (all local entries share one)."""
        return LOCAL_MACHINE if self.local else self.name.lower().rstrip(".")


@dataclass(frozen=True)
class Placement:
    """Where one rank runs: its host and its index among the ranks of that machine."""

    rank: int
    host: Host
    local_rank: int
    local_size: int


def _is_own_address(ip: str) -> bool:
    """True when ``ip`` is assigned to this machine; no DNS, no packet sent.

    The kernel picks ``ip`` itself as the source for a route to one of its own
    addresses (binding is no test: ``ip_nonlocal_bind`` may allow any address).
    """
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))
            own = s.getsockname()[0]
    except OSError:
        return False
    return ipaddress.ip_address(own.split("%", 1)[0]) == ipaddress.ip_address(ip)


def is_local_host(name: str) -> bool:
    """Whether ``name`` is this machine: loopback, this hostname, or one of its addresses."""
    if is_loopback_host(name):
        return True
    own = socket.gethostname().lower()
    lowered = name.lower().rstrip(".")
    if lowered in (own, own.split(".", 1)[0]):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return _is_own_address(name)


def _parse_entry(entry: str, where: str) -> Host:
    """``host``, ``host:slots``, ``user@host:slots``, ``[v6]`` or ``[v6]:slots``."""
    text = entry.strip()
    example = "e.g. -H node1:4,node2:4 or -H localhost:2,[fd00::2]:2"
    if not text:
        raise UsageError(f"{where}: empty host entry ({example}).")
    user, at, rest = text.rpartition("@")
    if at and not user:
        raise UsageError(f"{where}: {entry!r} has an empty user name before '@'.")
    slots_text: str | None = None
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            raise UsageError(f"{where}: {entry!r}: '[' of the IPv6 address is never closed.")
        name, tail = rest[1:end], rest[end + 1 :]
        if tail:
            if not tail.startswith(":"):
                raise UsageError(f"{where}: {entry!r}: expected ':<slots>' after ']'.")
            slots_text = tail[1:]
    else:
        if rest.count(":") > 1:
            raise UsageError(
                f"{where}: {entry!r}: write an IPv6 address in brackets, e.g. [fd00::2]:4."
            )
        name, colon, slots_text_ = rest.partition(":")
        slots_text = slots_text_ if colon else None
    problem = _host_problem(name)
    if problem is not None:
        raise UsageError(f"{where}: {entry!r} is not a host: {problem} ({example}).")
    if slots_text is None:
        slots = 1
    elif not _SLOTS_RE.fullmatch(slots_text) or int(slots_text) < 1:
        raise UsageError(
            f"{where}: {entry!r}: slots {slots_text!r} must be a positive integer "
            f"(host:slots, {example})."
        )
    else:
        slots = int(slots_text)
    target = f"{user}@{name}" if at else name
    return Host(target=target, name=name, slots=slots, local=is_local_host(name))


def _check_duplicates(hosts: list[Host], where: str) -> list[Host]:
    seen: dict[str, str] = {}
    for h in hosts:
        key = h.target.lower() if not h.local else h.name.lower()
        if key in seen:
            raise UsageError(
                f"{where}: host {h.target!r} is listed twice: list it once with the total "
                "number of slots."
            )
        seen[key] = h.target
    return hosts


def parse_host_list(text: str) -> list[Host]:
    """Parse ``-H`` / ``--hosts``: comma-separated ``host[:slots]`` entries."""
    entries = [e for e in text.split(",")]
    hosts = [_parse_entry(e, "-H") for e in entries]
    return _check_duplicates(hosts, "-H")


def parse_hostfile(path: str) -> list[Host]:
    """Parse a host file: one host per line, ``host slots=N`` or ``host:N`` or ``host``.

    ``#`` starts a comment; blank lines are skipped.
    """
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--hostfile {path!r}: cannot read it ({exc}).") from None
    hosts: list[Host] = []
    for number, line in enumerate(lines, 1):
        where = f"--hostfile {path}:{number}"
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        host = _parse_entry(fields[0], where)
        for extra in fields[1:]:
            key, eq, value = extra.partition("=")
            if key != "slots" or not eq or not _SLOTS_RE.fullmatch(value) or int(value) < 1:
                raise UsageError(
                    f"{where}: unexpected {extra!r}: write 'host slots=N' or 'host:N'."
                )
            host = Host(host.target, host.name, int(value), host.local)
        hosts.append(host)
    if not hosts:
        raise UsageError(f"--hostfile {path!r} lists no hosts.")
    return _check_duplicates(hosts, f"--hostfile {path}")


def place(hosts: list[Host], np: int | None) -> list[Placement]:
    """Put ``np`` ranks (default: every slot) on ``hosts`` in order, filling each host."""
    total = sum(h.slots for h in hosts)
    if np is None:
        np = total
    if np < 1:
        raise UsageError(f"-np {np}: the number of processes must be at least 1.")
    if np > total:
        listed = ",".join(f"{h.target}:{h.slots}" for h in hosts)
        raise UsageError(
            f"-np {np} exceeds the {total} slot(s) of the hosts ({listed}): lower -np or "
            "give the hosts more slots (host:slots)."
        )
    chosen: list[Host] = []
    for h in hosts:
        chosen.extend([h] * min(h.slots, np - len(chosen)))
    counts: dict[str, int] = {}
    for h in chosen:
        counts[h.machine] = counts.get(h.machine, 0) + 1
    seen: dict[str, int] = {}
    placements = []
    for rank, h in enumerate(chosen):
        local_rank = seen.get(h.machine, 0)
        seen[h.machine] = local_rank + 1
        placements.append(Placement(rank, h, local_rank, counts[h.machine]))
    return placements
