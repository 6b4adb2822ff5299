"""What a 2-rank shared-memory all-reduce can reach on this host, by how it moves bytes.

    python -m benchmarks.shm_ceiling --sizes 16M,64M [--iters 15] [--json out.json]

Two processes, each on its own core, time the memory passes of an N=2 all-reduce of ``n``
bytes (float32 sum) with nothing else around them: no transport, no negotiation, no
checksums; a rank waits only for the peer's piece it reads next (a counter in shared
memory). The all-reduce modes end with both ranks holding ``in0 + in1``, and the copies
with what they copied (checked after an iteration that starts from NaN), so the passes
are the real work, not a model of it. Modes, all with both ranks running at once:

* ``memcpy``: one core copies ``n`` bytes (``np.copyto``) while the other waits: the
  benchmarks' "limit" line, and the denominator here. ``memcpy2``: both copy at once.
* ``cma``: each rank copies ``n`` bytes from the other process's memory with
  ``process_vm_readv`` in 256 KiB pieces: the kernel copy that pytfcomm's shared-memory
  transport uses for large collectives (the receiver reads the sender's private buffer).
* ``private``: the all-reduce when each rank's input and output are its own private memory
  (NumPy arrays, TF tensors): read the peer's half of the input into ``out`` with
  ``process_vm_readv`` and add the own input there, piece by piece, and read each piece of
  the peer's reduced half from its ``out`` the same way as soon as the peer has published
  it. This is what pytfcomm's ring does at N=2 above ``PYTFCOMM_SHM_BYREF_BYTES``, with
  nothing else: its ceiling on this host.
* ``shared``: the same all-reduce when both ranks' inputs and outputs live in memory
  mapped by both processes: ``out = peer's input + own input`` read directly in one pass,
  and each of the peer's reduced pieces copied as it is published. No copy before the add:
  what a busbw of 0.8 of ``memcpy`` presumes (per rank it moves 160 MB for 64 MiB against
  memcpy's 128 MB). NumPy arrays and TF tensors are private memory, so pytfcomm cannot use
  it for them.

Each rank times every iteration between two barriers; a mode's time is the median over
iterations of the slower rank. busbw = n / time (N=2).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from benchmarks._host import cpu_model
from benchmarks._units import fmt_bytes, parse_sizes

MODES = ("memcpy", "memcpy2", "cma", "private", "shared")
PIECE = 256 << 10  # the ring's default segment (PYTFCOMM_SEGMENT_BYTES)
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Cma:
    """process_vm_readv from one peer process, through libc, with its iovecs built ahead."""

    def __init__(self, pid: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fn = libc.process_vm_readv
        self.fn.restype = ctypes.c_ssize_t
        self.fn.argtypes = [
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_ulong,
            ctypes.c_void_p,
            ctypes.c_ulong,
            ctypes.c_ulong,
        ]
        self.pid = pid

    def plan(self, dst: int, src: int, nbytes: int) -> tuple[int, int, int, Any, Any]:
        """One call copying ``nbytes`` from the peer's ``src`` to ``dst`` (it holds its iovecs)."""
        local, remote = _Iovec(dst, nbytes), _Iovec(src, nbytes)
        return ctypes.addressof(local), ctypes.addressof(remote), nbytes, local, remote

    def read(self, call: tuple) -> None:
        """One planned call; raises OSError unless it copied every byte."""
        got = self.fn(self.pid, call[0], 1, call[1], 1, 0)
        if got != call[2]:
            err = ctypes.get_errno()
            raise OSError(err, f"process_vm_readv from pid {self.pid}: {os.strerror(err)}")


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _pieces(half: slice) -> list[slice]:
    """``half`` (in floats) cut into PIECE-byte pieces."""
    step = PIECE // 4
    return [slice(a, min(a + step, half.stop)) for a in range(half.start, half.stop, step)]


def _len(x: slice) -> int:
    return (x.stop - x.start) * 4


def _pipelined(
    rank: int,
    progress: np.ndarray,
    base: int,
    pieces: int,
    reduce_piece,
    gather_piece,
    timeout_s: float = 60.0,
) -> None:
    """The ring's order at N=2: reduce my ``pieces`` one by one, publishing each, and gather
    each of the peer's reduced pieces (as many) as soon as its counter says it is done.

    ``progress[r]`` counts rank r's reduced pieces since the first iteration (``base`` of
    them before this one), so a counter never goes back and needs no reset between
    iterations. x86 keeps stores in order: a counter is seen only after its piece."""
    peer = 1 - rank
    got = 0
    for i in range(pieces):
        reduce_piece(i)
        progress[rank] = base + i + 1
        while got < pieces and progress[peer] > base + got:
            gather_piece(got)
            got += 1
    deadline = time.monotonic() + timeout_s
    while got < pieces:
        if progress[peer] > base + got:
            gather_piece(got)
            got += 1
        elif time.monotonic() > deadline:
            raise TimeoutError(f"the peer reduced {int(progress[peer]) - base} of {pieces} pieces")


def _input(rank: int, n: int) -> np.ndarray:
    """Rank ``rank``'s input: not uniform, so a piece in the wrong place shows in the check."""
    x = np.full(n, rank + 1, np.float32)
    x[::7] = rank * 3 + 0.5
    return x


def _allow_peer_reads() -> None:
    # Yama (ptrace_scope 1) lets only ancestors read a process's memory; let the peer.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY), 0, 0, 0)


def _pin(rank: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


def _rank(rank: int, nbytes: int, iters: int, modes: list[str], shared: mmap.mmap, conn) -> None:
    """One rank: run every mode, send back {mode: [seconds per iteration]}."""
    try:
        _pin(rank)
        _allow_peer_reads()
        n = nbytes // 4
        half = n // 2
        mine = slice(0, half) if rank == 0 else slice(half, n)  # the half this rank reduces
        theirs = slice(half, n) if rank == 0 else slice(0, half)
        inp = _input(rank, n)
        out = np.empty_like(inp)
        out[:] = 0
        # Shared memory: four arrays of n floats each (in0, in1, out0, out1).
        shm = np.frombuffer(shared, np.float32, count=4 * n).reshape(4, n)
        progress = np.frombuffer(shared, np.int64, count=2, offset=4 * nbytes)
        s_in, s_out, s_peer_in, s_peer_out = shm[rank], shm[2 + rank], shm[1 - rank], shm[3 - rank]
        s_in[:] = inp
        conn.send((os.getpid(), _addr(inp), _addr(out)))
        peer_pid, peer_in, peer_out = conn.recv()
        cma = _Cma(peer_pid)
        # Piece by piece: my half of the peer's input (reduce-scatter), then its
        # reduced half of its output (all-gather); both halves have as many pieces.
        rs, ag = _pieces(mine), _pieces(theirs)
        rs_reads = [cma.plan(_addr(out) + x.start * 4, peer_in + x.start * 4, _len(x)) for x in rs]
        ag_reads = [cma.plan(_addr(out) + x.start * 4, peer_out + x.start * 4, _len(x)) for x in ag]
        whole = cma.plan(_addr(out), peer_in, nbytes)
        expect = {
            "memcpy": inp,
            "memcpy2": inp,
            "cma": _input(1 - rank, n),
            "private": _input(0, n) + _input(1, n),
        }
        expect["shared"] = expect["private"]
        times: dict[str, list[float]] = {}
        # Per all-reduce mode: how a piece of my half is reduced, how one of the peer's
        # reduced pieces comes in.
        passes = {
            "private": (
                lambda i: (
                    cma.read(rs_reads[i]),
                    np.add(out[rs[i]], inp[rs[i]], out=out[rs[i]]),
                ),
                lambda i: cma.read(ag_reads[i]),
            ),
            "shared": (
                lambda i: np.add(s_peer_in[rs[i]], s_in[rs[i]], out=s_out[rs[i]]),
                lambda i: np.copyto(s_out[ag[i]], s_peer_out[ag[i]]),
            ),
        }
        base = 0  # pieces published by each rank so far (the same on both: same sequence)
        for mode in modes:
            times[mode] = []
            result = s_out if mode == "shared" else out
            for it in range(iters + 1):  # the first iteration warms up
                if it == iters:
                    # The checked iteration starts from garbage: a piece it gathered
                    # before the peer had reduced it shows as NaN (or, in "private",
                    # as the peer's input alone), not as the last iteration's sum.
                    result[:] = np.nan
                conn.send("ready")
                conn.recv()  # both ranks start together
                t0 = time.perf_counter()
                if mode == "memcpy":
                    if rank == 0:  # one core alone; rank 1 copies after the clock stops
                        np.copyto(out, inp)
                elif mode == "memcpy2":
                    np.copyto(out, inp)
                elif mode == "cma":
                    cma.read(whole)
                else:  # private, shared
                    _pipelined(rank, progress, base, len(rs), *passes[mode])
                times[mode].append(time.perf_counter() - t0)
                if mode == "memcpy" and rank == 1:
                    np.copyto(out, inp)  # the same result, untimed
                if mode in ("private", "shared"):
                    base += len(rs)
            if not np.array_equal(result, expect[mode]):
                bad = int(np.flatnonzero(result != expect[mode])[0])
                raise AssertionError(f"{mode}: rank {rank} element {bad} is {result[bad]}")
            times[mode] = times[mode][1:]
        conn.send(("done", times))
    except BaseException as exc:  # reported to the parent, which raises
        conn.send(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))


# After one rank's error, how long the relay waits for the other's last word.
ERROR_GRACE_S = 2.0


def _relay(a, b, timeout_s: float) -> list[dict[str, list[float]]]:
    """Forwards every message of each rank to the other until both are done; their times.

    When a rank fails, the other's error (within ERROR_GRACE_S) is reported too,
    in rank order: a rank that found a wrong element and exits makes its peer's
    next read of its memory fail, and that second error may reach the relay first.
    """
    finished: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    conns = [a, b]
    while len(finished) < 2:
        for i, c in enumerate(conns):
            if i in finished or not c.poll(0.001):
                continue
            msg = c.recv()
            if isinstance(msg, tuple) and msg and msg[0] in ("done", "error"):
                finished[i] = msg
            else:
                conns[1 - i].send(msg)
        errors = [finished[i][1] for i in sorted(finished) if finished[i][0] == "error"]
        if errors:
            other = 1 - min(i for i in finished if finished[i][0] == "error")
            if other not in finished and conns[other].poll(ERROR_GRACE_S):
                msg = conns[other].recv()
                if isinstance(msg, tuple) and msg and msg[0] == "error":
                    errors = sorted([*errors, msg[1]])
            raise RuntimeError("; ".join(errors))
        if time.monotonic() > deadline:
            raise TimeoutError(f"shm_ceiling: ranks still running after {timeout_s:.0f} s")
    return [finished[0][1], finished[1][1]]


def measure(
    nbytes: int, iters: int = 15, modes: list[str] | None = None, timeout_s: float = 300.0
) -> dict[str, float]:
    """Median seconds per all-reduce (slower rank) of each mode at ``nbytes`` (a multiple of 8)."""
    modes = list(modes or MODES)
    if nbytes % 8:
        raise ValueError(f"size must be a multiple of 8 bytes, got {nbytes}")
    # MAP_SHARED | MAP_ANONYMOUS, both children see it: 4 arrays, 2 progress counters.
    shared = mmap.mmap(-1, 4 * nbytes + 64)
    ctx = mp.get_context("fork")
    pipes = [ctx.Pipe() for _ in range(2)]
    procs = [
        ctx.Process(target=_rank, args=(r, nbytes, iters, modes, shared, pipes[r][1]), daemon=True)
        for r in range(2)
    ]
    for p in procs:
        p.start()
    try:
        # The address exchange, then every barrier: relay until both report.
        results = _relay(pipes[0][0], pipes[1][0], timeout_s)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        shared.close()
    return {
        m: statistics.median(max(x, y) for x, y in zip(results[0][m], results[1][m], strict=True))
        for m in modes
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16M,64M", help="comma-separated sizes (default 16M,64M)")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    print(
        f"# N=2 all-reduce passes, float32 sum, {args.iters} iters, median of the slower rank; "
        f"{os.cpu_count()} cpus, {cpu_model()}"
    )
    print(
        f"{'size':>8} "
        + " ".join(f"{m + '(us)':>13}" for m in MODES)
        + " "
        + " ".join(f"{m + '/memcpy':>15}" for m in MODES[1:])
    )
    rows = []
    for n in sizes:
        t = measure(n, args.iters)
        # busbw at N=2 is n / t; as a fraction of memcpy's it is t_memcpy / t.
        frac = {m: t["memcpy"] / t[m] for m in MODES}
        print(
            f"{fmt_bytes(n):>8} "
            + " ".join(f"{t[m] * 1e6:>13.1f}" for m in MODES)
            + " "
            + " ".join(f"{frac[m]:>15.2f}" for m in MODES[1:])
        )
        rows.append({"bytes": n, "seconds": t, "busbw_over_memcpy": frac})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "iters": args.iters, "cpus": os.cpu_count()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
