"""Facts about the machine and software for the JSON metadata, and a CPU-contention probe."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
import subprocess
import time
from typing import Any

from benchmarks._registry import open_mpi_mpirun


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _first_line(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    total = sum(vals[:8])  # without guest times, which are already in user
    return total - idle, total


def busy_fraction(sample_s: float = 0.5) -> float | None:
    """Share of all CPUs busy during sample_s while we are idle: other load on the host."""
    try:
        b0, t0 = _cpu_times()
        time.sleep(sample_s)
        b1, t1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return None
    return (b1 - b0) / (t1 - t0) if t1 > t0 else None


def metadata() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg": os.getloadavg(),
        "versions": {
            "numpy": _version("numpy"),
            "torch": _version("torch"),
            "mpi4py": _version("mpi4py"),
            "mpirun": _first_line([open_mpi_mpirun() or "mpirun", "--version"]),
            "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
        },
    }
