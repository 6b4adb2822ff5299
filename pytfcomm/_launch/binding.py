"""``--bind-to core``: the CPUs each local rank may run on (docs/launching.md, "Binding").

The CPUs to share out are the launcher's own (``sched_getaffinity``: a Slurm allocation,
a cgroup or ``taskset`` around the launcher narrows them), grouped into physical cores
(hyperthreads of one core stay together; sysfs topology, else one CPU per core):

* ranks <= cores: each local rank gets a contiguous block of whole cores, the blocks as
  even as they can be (8 cores, 3 ranks: 3, 3 and 2 cores);
* ranks > cores: local rank ``r`` gets core ``r mod cores``, so ranks ``r`` and ``r + 1``
  (each other's first peer in the ring and in the negotiation's log-depth exchange) sit on
  different cores (4 ranks on 2 cores: 0 and 2 on one, 1 and 3 on the other).

A rank bound to its CPUs stays there: the scheduler no longer moves it between cores
early in a run, where the all-reduce of small buffers over TCP on an oversubscribed host
was measured 1.3-2.5x slower than in a settled placement (docs/benchmarks.md).
The binding is set in the child before ``exec``, so every thread the rank starts
(TensorFlow's pools size themselves from it) inherits it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

__all__ = ["BIND_CHOICES", "cpu_list", "local_bindings", "physical_cores", "rank_cpus"]

#: ``--bind-to`` values: ``core`` (above) or ``none`` (ranks inherit the launcher's CPUs).
BIND_CHOICES = ("core", "none")

_SYSFS_CPU = "/sys/devices/system/cpu"


def _core_key(cpu: int, sysfs: str) -> tuple[int, int] | None:
    """(package, core id) of ``cpu`` from sysfs; None where the topology is not readable."""
    base = os.path.join(sysfs, f"cpu{cpu}", "topology")
    try:
        with open(os.path.join(base, "physical_package_id")) as f:
            package = int(f.read())
        with open(os.path.join(base, "core_id")) as f:
            core = int(f.read())
    except (OSError, ValueError):
        return None
    return package, core


def physical_cores(allowed: Iterable[int], sysfs: str = _SYSFS_CPU) -> list[tuple[int, ...]]:
    """The CPUs of ``allowed`` grouped by physical core, each group sorted, the groups in
    the order of their first CPU. A CPU whose topology sysfs does not give is a core alone."""
    groups: dict[object, list[int]] = {}
    for cpu in sorted(set(allowed)):
        key = _core_key(cpu, sysfs)
        groups.setdefault(("cpu", cpu) if key is None else key, []).append(cpu)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: g[0])


def rank_cpus(cores: Sequence[tuple[int, ...]], local_size: int) -> list[tuple[int, ...]]:
    """The CPUs of each local rank ``0 .. local_size - 1`` (module doc)."""
    if not cores:
        raise ValueError("no CPU to bind ranks to")
    if local_size < 1:
        raise ValueError(f"local_size must be at least 1, got {local_size}")
    n = len(cores)
    if local_size > n:
        return [cores[r % n] for r in range(local_size)]
    out = []
    start = 0
    for r in range(local_size):
        width = n // local_size + (1 if r < n % local_size else 0)
        out.append(tuple(cpu for core in cores[start : start + width] for cpu in core))
        start += width
    return out


def cpu_list(cpus: Iterable[int]) -> str:
    """``0-3,6,8-9``: the form ``taskset -c`` and ``/proc/<pid>/status`` use."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def local_bindings(local_size: int, allowed: Iterable[int] | None = None) -> list[frozenset[int]]:
    """Each local rank's CPUs out of ``allowed`` (default: this process's own)."""
    cpus = os.sched_getaffinity(0) if allowed is None else allowed
    return [frozenset(c) for c in rank_cpus(physical_cores(cpus), local_size)]
