"""What the machine itself allows, measured in the same run as a benchmark's table.

Three "limit" figures put every busbw in proportion:

* ``memcpy``: one core copying ``n`` bytes from one warm buffer to another
  (NumPy ``copyto``, one thread); the ceiling for shared-memory transports,
  which move every byte at least once through a copy.
* ``bound``: what memory allows an all-reduce of N ranks on one host. Every
  rank must at least read its input and write its output, N copies of ``n``
  bytes in all, and the cores share the memory system: ``memcpy_all``, the
  aggregate bandwidth of min(N, cores) threads copying ``n`` bytes each at
  once, makes that at least ``N * n / memcpy_all`` seconds, so busbw is at
  most ``memcpy_all * 2(N-1) / N**2``. Where one core alone saturates memory
  (``memcpy_all`` close to ``memcpy``) this is about half of ``memcpy`` at
  N=2, and no shared-memory all-reduce can reach ``memcpy``.
* ``tcp``: one TCP stream over loopback between two processes, ``n`` bytes
  sent and one byte acknowledged per round; the ceiling for a single
  connection over ``lo`` (the peers' TCP paths and pytfcomm's TCP transport
  with one stream).

Both are medians over rounds that together take at least ``min_time_s``
(but at most ``max_rounds``), measured right before the table is printed, so
they see the same machine load. ``None`` means the probe could not run (the
reason is in ``errors``).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# The receiving side of the TCP probe: connects, then for each round reads
# exactly n bytes into one buffer and answers with one byte.
_TCP_PEER = r"""
import socket, sys
port, n, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port), timeout=60)
buf = bytearray(n)
view = memoryview(buf)
for _ in range(rounds):
    got = 0
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if k == 0:
            sys.exit("peer closed")
        got += k
    s.sendall(b"k")
s.close()
"""


@dataclass
class Limits:
    """Per-size bandwidths (GB/s, 1e9 bytes) of the two probes."""

    memcpy_gbs: dict[int, float | None] = field(default_factory=dict)
    tcp_gbs: dict[int, float | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    memcpy_all_gbs: dict[int, float | None] = field(default_factory=dict)
    ranks: int = 2  # the N of the all-reduce bound

    def for_kind(self, kind: str, nbytes: int) -> float | None:
        """The limit that applies to a backend whose ceiling is ``kind`` ("memcpy"/"tcp")."""
        table = self.memcpy_gbs if kind == "memcpy" else self.tcp_gbs
        return table.get(nbytes)

    def bound(self, nbytes: int) -> float | None:
        """The memory bound on a one-host all-reduce's busbw at ``nbytes`` (module doc)."""
        agg = self.memcpy_all_gbs.get(nbytes)
        n = self.ranks
        return None if agg is None or n < 2 else agg * 2 * (n - 1) / n**2

    def as_json(self) -> dict:
        return {
            "memcpy_gbs": {str(k): v for k, v in self.memcpy_gbs.items()},
            "tcp_gbs": {str(k): v for k, v in self.tcp_gbs.items()},
            "memcpy_all_gbs": {str(k): v for k, v in self.memcpy_all_gbs.items()},
            "ranks": self.ranks,
            "errors": self.errors,
            "method": "\n\n".join(__doc__.strip().split("\n\n")[1:3]),
        }


def _rounds_for(seconds_per_round: float, min_time_s: float, max_rounds: int) -> int:
    return max(3, min(max_rounds, int(min_time_s / max(seconds_per_round, 1e-9)) + 1))


def memcpy_gbs(nbytes: int, min_time_s: float = 0.05, max_rounds: int = 200) -> float:
    """Median single-thread copy bandwidth of ``nbytes`` between two warm buffers."""
    import numpy as np

    src = np.ones(max(nbytes, 1), np.uint8)
    dst = np.zeros_like(src)
    np.copyto(dst, src)  # touch every page of both
    t0 = time.perf_counter()
    np.copyto(dst, src)
    rounds = _rounds_for(time.perf_counter() - t0, min_time_s, max_rounds)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        np.copyto(dst, src)
        times.append(time.perf_counter_ns() - t0)
    return nbytes / max(statistics.median(times), 1)


# Below this the concurrent-copy probe would time Python, not memory: each
# copy is too short for the threads to overlap (they take the GIL to call it).
MIN_ALL_BYTES = 256 << 10


def memcpy_all_gbs(nbytes: int, workers: int, rounds: int = 7) -> float:
    """Aggregate copy bandwidth of ``workers`` threads copying ``nbytes`` each, all at once.

    NumPy releases the GIL while it copies, so the threads really run
    together. Each round starts them at a barrier, each copies its buffer
    enough times for the round to outlast the barrier's cost many times, and
    the round lasts until the last one is done; the median round counts.
    Sizes below MIN_ALL_BYTES raise ValueError.
    """
    import numpy as np

    if nbytes < MIN_ALL_BYTES:
        raise ValueError(f"too small to copy concurrently from Python (< {MIN_ALL_BYTES} B)")
    workers = max(1, workers)
    reps = max(1, (64 << 20) // nbytes)
    bufs = [(np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)) for _ in range(workers)]
    for s, d in bufs:
        np.copyto(d, s)  # touch every page
    start, end = threading.Barrier(workers + 1), threading.Barrier(workers + 1)

    def copier(src: np.ndarray, dst: np.ndarray) -> None:
        for _ in range(rounds):
            start.wait(timeout=60)
            for _ in range(reps):
                np.copyto(dst, src)
            end.wait(timeout=60)

    threads = [threading.Thread(target=copier, args=b, daemon=True) for b in bufs]
    for t in threads:
        t.start()
    times = []
    try:
        for _ in range(rounds):
            start.wait(timeout=60)
            t0 = time.perf_counter_ns()
            end.wait(timeout=60)
            times.append(time.perf_counter_ns() - t0)
    finally:
        for t in threads:
            t.join(timeout=60)
    return workers * reps * nbytes / max(statistics.median(times), 1)


def tcp_gbs(nbytes: int, rounds: int = 20, timeout_s: float = 60.0) -> float:
    """Median one-stream loopback TCP bandwidth of ``nbytes`` rounds to another process."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(timeout_s)
    port = srv.getsockname()[1]
    from benchmarks._launch import local_jobs

    local = local_jobs()
    with tempfile.TemporaryDirectory(prefix="tcp-probe-") as tmp:
        log = Path(tmp) / "peer.log"
        argv = [sys.executable, "-c", _TCP_PEER, str(port), str(nbytes), str(rounds + 1)]
        peer = local.start(argv, os.environ, cwd=tmp, log=log)
        try:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(timeout_s)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                payload = memoryview(bytes(nbytes))
                ack = bytearray(1)
                times = []
                for i in range(rounds + 1):  # the first round warms the connection up
                    t0 = time.perf_counter_ns()
                    conn.sendall(payload)
                    if conn.recv_into(ack, 1) != 1:
                        raise OSError("TCP probe peer closed the connection")
                    if i:
                        times.append(time.perf_counter_ns() - t0)
            peer.wait(timeout=timeout_s)
            if peer.returncode != 0:
                why = log.read_text(errors="replace")[-2000:]
                raise OSError(f"TCP probe peer exited {peer.returncode}: {why!r}")
            return nbytes / max(statistics.median(times), 1)
        finally:
            srv.close()
            local.kill_tree([peer], term_grace_s=0)


def measure(sizes: list[int], kinds: tuple[str, ...] = ("memcpy", "tcp"), ranks: int = 2) -> Limits:
    """The probes at every size (a probe that fails is recorded, never fatal).

    ``kinds``: "memcpy", "tcp", and "bound" (``memcpy_all``, for the bound of a
    ``ranks``-rank all-reduce; only tables that print the bound ask for it).
    """
    lim = Limits(ranks=ranks)
    workers = min(ranks, os.cpu_count() or 1)
    for kind, fn, out in (
        ("memcpy", memcpy_gbs, lim.memcpy_gbs),
        ("bound", lambda n: _all_or_none(n, workers), lim.memcpy_all_gbs),
        ("tcp", lambda n: tcp_gbs(n, rounds=_tcp_rounds(n)), lim.tcp_gbs),
    ):
        if kind not in kinds:
            continue
        for n in sizes:
            try:
                out[n] = fn(n)
            except (OSError, subprocess.SubprocessError, ValueError, RuntimeError) as exc:
                out[n] = None
                lim.errors.append(f"{kind} probe at {n} bytes failed: {exc}")
    return lim


def _all_or_none(nbytes: int, workers: int) -> float | None:
    """memcpy_all_gbs, or None (no bound shown) where it cannot be measured."""
    return None if nbytes < MIN_ALL_BYTES else memcpy_all_gbs(nbytes, workers)


def _tcp_rounds(nbytes: int) -> int:
    """Enough rounds for a stable median, about 0.1-0.3 s per size at loopback speeds."""
    return max(5, min(50, (256 << 20) // max(nbytes, 1)))


def fmt_gbs(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def summary_line(sizes: list[int], kinds: tuple[str, ...] = ("memcpy", "tcp")) -> str:
    """One line for a table's foot: both probes at ``sizes``, measured now."""
    from benchmarks._units import fmt_bytes

    lim = measure(sizes, kinds)
    cells = []
    for n in sizes:
        parts = []
        if "memcpy" in kinds:
            parts.append(f"memcpy {fmt_gbs(lim.memcpy_gbs.get(n))}")
        if "tcp" in kinds:
            parts.append(f"TCP {fmt_gbs(lim.tcp_gbs.get(n))}")
        name = fmt_bytes(n) if n % 1024 == 0 else f"{n / 2**20:.1f} MiB"
        cells.append(f"{name}: " + ", ".join(parts))
    line = "# limit (this machine, same run; GB/s, one core's memcpy, one loopback TCP stream): "
    return line + "; ".join(cells) + "".join(f"\n# limit: {e}" for e in lim.errors)
