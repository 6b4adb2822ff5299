"""A process's state as /proc/PID/stat gives it, for tests that stop or watch processes."""

from __future__ import annotations

from pathlib import Path


def state(pid: int) -> str | None:
    """The state letter of ``pid`` (R, S, T, Z, ...), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]  # the name in parentheses may hold spaces


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP, or traced)."""
    return state(pid) in ("T", "t")
