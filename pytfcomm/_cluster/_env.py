"""Reading launcher variables and checking ranks, sizes and ports.

Shared by every source of :mod:`pytfcomm._cluster`: a value that is unset, empty or
blank counts as unset, integers are read with a bound on their digits, and each check
raises a :class:`~pytfcomm.errors.ConfigError` naming the variable at fault.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from pytfcomm.errors import ConfigError

#: The most ranks a job may have: the TCP transport keeps a rank in 15 bits of its
#: request handles (csrc/transport/host/transport.cc), so sizes are 1..MAX_SIZE.
MAX_SIZE = 2**15 - 1

#: Digits read from an integer variable at most: any longer value is out of every
#: range here, and Python refuses to convert strings of over 4300 digits at all.
_MAX_INT_DIGITS = 18

_INT_RE = re.compile(r"[+-]?[0-9]+")


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
