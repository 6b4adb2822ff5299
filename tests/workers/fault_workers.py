"""Rank functions for fault injection (tests/reliability/test_faults.py).

One rank (the victim) injures itself while every rank is busy with
collectives; the survivors report what they raised, when, and whether the
communicator released its threads and descriptors. The transport comes from
PYTFCOMM_TRANSPORT.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import numpy as np
from proc_state import stopped

import pytfcomm


def _fds() -> dict[str, str]:
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # the descriptor listdir itself used
    return out


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


def _shutdown_sockets() -> None:
    """Cut every TCP connection of this process, as a network failure would."""
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM:
                s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            s.close()


def _mark(mark: Path) -> None:
    """Record the moment of injury; atomically, as survivors poll for the file."""
    tmp = mark.with_name(f"{mark.name}.{os.getpid()}.tmp")
    tmp.write_text(repr(time.time()))
    os.replace(tmp, mark)


def _injure(kind: str, mark: Path) -> None:
    _mark(mark)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif kind == "close_socket":
        _shutdown_sockets()


def fault(rank: int, size: int, addr: str, kind: str, timeout: float, victim: int) -> dict:
    fds0, tasks0 = _fds(), _tasks()
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, timeout=timeout)
    x = np.ones(1 << 18, np.float32)  # 1 MiB: several pipeline segments in flight
    comm.allreduce(x)
    mark = Path(f"injured-{kind}")  # the harness runs every rank in one temp dir
    if rank == victim:
        comm.barrier()
        if kind == "exit_early":
            comm.close()  # leaves cleanly while the others still expect it
            _mark(mark)
            return {"victim": True}
        threading.Timer(0.2, _injure, (kind, mark)).start()
    out: dict = {"victim": rank == victim}
    try:
        if rank != victim:
            # The departed victim's neighbours may learn of it while others
            # are still in this barrier.
            comm.barrier()
        for _ in range(10_000):
            comm.allreduce(x)
        out["type"] = None
    except pytfcomm.CommError as exc:
        out.update(type=type(exc).__name__, message=str(exc), t_err=time.time())
    deadline = time.time() + 20
    while not mark.exists() and time.time() < deadline:
        time.sleep(0.01)
    out["t_injured"] = float(mark.read_text()) if mark.exists() else None
    out["closed_after_error"] = comm.closed
    comm.close()
    out["leaked_fds"] = sorted(set(_fds().items()) - set(fds0.items()))
    # A joined thread may stay listed in /proc/self/task for a moment after
    # pthread_join returns (the kernel wakes the joiner before it reaps the
    # thread): only one still there after a second is a leak.
    deadline = time.time() + 1.0
    while _tasks() > tasks0 and time.time() < deadline:
        time.sleep(0.01)
    out["leaked_tasks"] = _tasks() - tasks0
    return out


def partner_ahead(rank: int, size: int, addr: str, victim: int, timeouts: list[float]) -> dict:
    """4 ranks, halving-doubling of 64 MiB: the victim stops a few ms into it, in its
    first exchange. Its partner there waits on it, while the partner's next partner,
    done with its own first exchange, sends that waiting rank data it cannot take yet,
    so its status answer is stuck behind the data. ``timeouts[r]``: rank r's deadline."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, timeout=timeouts[rank])
    x = np.ones(1 << 24, np.float32)
    comm.allreduce(x, algorithm="halving_doubling")
    comm.barrier()
    if rank == victim:
        threading.Timer(0.005, os.kill, (os.getpid(), signal.SIGSTOP)).start()
    out: dict = {}
    try:
        for _ in range(100):
            comm.allreduce(x, algorithm="halving_doubling")
        out["type"] = None
    except pytfcomm.CommError as exc:
        out.update(type=type(exc).__name__, message=str(exc))
    comm.close()
    return out


def shape_mismatch(rank: int, size: int, addr: str) -> dict:
    """Same dtype and element count, different shapes: must not pass silently."""
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=20) as comm:
        shape = (4, 6) if rank == 0 else (6, 4)
        try:
            comm.allreduce(np.ones(shape, np.float32))
            comm.barrier()
        except pytfcomm.CommError as exc:
            return {"type": type(exc).__name__, "message": str(exc)}
    return {"type": None}


def finished_before_last_words(
    rank: int, size: int, addr: str, transport: str, collective: str
) -> dict:
    """3 ranks. Rank 2 is stopped inside ``collective``, which ranks 0 and 1 then
    finish; rank 1 leaves, and rank 0 gives up on the next all-reduce (its last
    words, an abort note or ABORT frame, reach rank 2 after what it sent for
    ``collective``). Only then does rank 2 run again."""
    comm = pytfcomm.init(rank=rank, size=size, addr=addr, transport=transport, timeout=30)
    ids = np.zeros(size, np.int64)
    ids[rank] = os.getpid()
    pids = comm.allreduce(ids)
    sent = np.arange(1000, dtype=np.float32) * (rank + 1)

    def first() -> np.ndarray | None:
        if collective == "barrier":
            comm.barrier()
            return None
        return comm.broadcast(sent, root=0)

    def second() -> dict:
        try:
            comm.allreduce(np.ones(1000, np.float32), timeout=20)
            return {"type": None}
        except pytfcomm.CommError as exc:
            return {"type": type(exc).__name__, "message": str(exc)}

    out: dict = {}
    if rank == 2:
        try:
            got = first()
            out["first"] = {"type": None, "ok": got is None or bool(np.array_equal(got, sent / 3))}
        except pytfcomm.CommError as exc:
            out["first"] = {"type": type(exc).__name__, "message": str(exc)}
        out["second"] = second()
        comm.close()
        return out
    victim = int(pids[2])
    time.sleep(0.5)  # rank 2 is asleep in `collective` by now
    try:
        if rank == 0:
            os.kill(victim, signal.SIGSTOP)
            deadline = time.monotonic() + 5
            while not stopped(victim) and time.monotonic() < deadline:
                time.sleep(0.005)
            out["stopped"] = stopped(victim)
        first()
        if rank == 1:
            comm.close()  # leaves: rank 0's next collective loses it
            return out
        out["second"] = second()
    finally:
        if rank == 0:
            os.kill(victim, signal.SIGCONT)
    comm.close()
    return out


def out_of_descriptors(rank: int, size: int, addr: str, spare: int) -> dict:
    """Rank 0 lowers its descriptor limit (RLIMIT_NOFILE) to leave ``spare`` free
    descriptors, enough to listen but not to accept its peers, then every rank
    inits. Returns what each raised, after how long, and rank 0's limit."""
    import resource

    limit = None
    if rank == 0:
        names = os.listdir("/proc/self/fd")  # its own descriptor is closed by now
        used = {int(n) for n in names if os.path.exists(f"/proc/self/fd/{n}")}
        free = [fd for fd in range(max(used) + spare + 1) if fd not in used][:spare]
        limit = free[-1] + 1
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )
    start = time.monotonic()
    out: dict = {"limit": limit, "type": None}
    try:
        with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
            comm.barrier()
    except pytfcomm.CommError as exc:
        out.update(type=type(exc).__name__, message=str(exc))
    out["seconds"] = time.monotonic() - start
    return out
