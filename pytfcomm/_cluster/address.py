"""Host and ``"host:port"`` parsing, and whether an address stays on this machine.

No sockets are opened; the only name lookups are in :func:`is_loopback_host`, for host
names (bounded in time by ``DNS_TIMEOUT_S``, cached per process).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import threading

from pytfcomm.errors import ConfigError

from ._env import _quote

#: Longest wait for one host name lookup in is_loopback_host(): a name that takes longer
#: counts as not loopback (the safe side: the job then needs a secret).
DNS_TIMEOUT_S = 2.0

_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_DIGITS_RE = re.compile(r"[0-9]+")


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
    if not addresses:  # unresolved (None) or no address at all
        return False
    return all(_is_loopback_ip(a) for a in addresses)


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
