"""Sources 1 and 2: explicit ``resolve(rank, size, addr)`` arguments, and the
PYTFCOMM_RANK / PYTFCOMM_SIZE / PYTFCOMM_ADDR variables (what pytfcomm-run sets)."""

from __future__ import annotations

from collections.abc import Mapping

from pytfcomm.errors import ConfigError

from ._env import _SIZE_RANGE, _check_local, _check_port, _check_rank_size, _env_int
from .address import parse_addr
from .spec import ClusterSpec, _env_addr, _make_spec

#: Address used when a single-process job needs no rendezvous.
SINGLE_PROCESS_ADDR = "127.0.0.1:0"


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
