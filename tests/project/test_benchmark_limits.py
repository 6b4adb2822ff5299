"""benchmarks/_limits.py: the machine's memcpy and loopback-TCP ceilings, and the
table that holds every backend's busbw against the ceiling of its transport."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _paths import ROOT

sys.path.append(str(ROOT))  # after the installed pytfcomm
from benchmarks import _limits, _registry, _report


def test_probes_measure_a_plausible_bandwidth() -> None:
    # Any machine copies and sends faster than 10 MB/s and slower than 10 TB/s;
    # a probe that timed nothing (or the wrong thing) lands outside that.
    for n in (4096, 1 << 20):
        bw = _limits.memcpy_gbs(n, min_time_s=0.01)
        assert 0.01 < bw < 10_000, (n, bw)
    bw = _limits.tcp_gbs(1 << 20, rounds=3, timeout_s=30)
    assert 0.01 < bw < 10_000, bw


def test_a_failing_probe_is_recorded_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(nbytes: int, rounds: int = 0, timeout_s: float = 0) -> float:
        raise OSError("no loopback here")

    monkeypatch.setattr(_limits, "tcp_gbs", broken)
    lim = _limits.measure([4096])
    assert lim.tcp_gbs == {4096: None}
    assert lim.memcpy_gbs[4096] > 0
    assert lim.errors == ["tcp probe at 4096 bytes failed: no loopback here"]
    assert _limits.fmt_gbs(lim.tcp_gbs[4096]) == "-"


def _run(name: str, busbw: dict[int, float | None]) -> dict:
    rows = {
        n: {"ok": b is not None, "busbw_gbs": b if b is not None else math.nan}
        for n, b in busbw.items()
    }
    return {"name": name, "rows": rows}


def test_each_backend_is_held_against_its_own_transport() -> None:
    lim = _limits.Limits(
        memcpy_gbs={1024: 10.0, 4096: 8.0},
        tcp_gbs={1024: 2.0, 4096: 4.0},
        errors=[],
        memcpy_all_gbs={1024: 12.0, 4096: 8.0},
        ranks=2,
    )
    runs = [
        _run("pytfcomm", {1024: 5.0, 4096: 6.0}),
        _run("mpi-tcp", {1024: 1.0, 4096: None}),  # a failed row has no fraction
    ]
    kinds = {"pytfcomm": "memcpy", "mpi-tcp": "tcp"}
    out = _report.limit_table(runs, [1024, 4096], lim, kinds)
    rows = [line.split() for line in out.splitlines() if not line.startswith("#")]
    # shared memory is also held against the bound, TCP is not
    assert rows[0][-3:] == ["pytfcomm/memcpy", "mpi-tcp/tcp", "pytfcomm/bound"]
    # bound at N=2: half the cores' aggregate copy bandwidth
    assert rows[1][2:] == ["10.00", "2.00", "6.00", "0.50", "0.50", "0.83"]
    assert rows[2][2:] == ["8.00", "4.00", "4.00", "0.75", "-", "1.50"]


def test_allreduce_bound_is_every_rank_copying_once_through_shared_memory() -> None:
    lim = _limits.Limits(memcpy_all_gbs={1: 16.0, 2: None}, ranks=4)
    # 4 ranks copy n bytes each at 16 GB/s in all: n/4 GB/s of algbw, x 2(N-1)/N of busbw
    assert lim.bound(1) == pytest.approx(16.0 / 4 * 2 * 3 / 4)
    assert lim.bound(2) is None  # the probe failed
    assert _limits.Limits(memcpy_all_gbs={1: 16.0}, ranks=1).bound(1) is None


def test_concurrent_copy_probe_runs_every_worker() -> None:
    one = _limits.memcpy_all_gbs(1 << 20, workers=1, rounds=3)
    two = _limits.memcpy_all_gbs(1 << 20, workers=2, rounds=3)
    assert 0.01 < one < 10_000 and 0.01 < two < 10_000, (one, two)
    with pytest.raises(ValueError, match="too small"):
        _limits.memcpy_all_gbs(4096, workers=2)
    # where it cannot be measured the table shows no bound rather than a wrong one
    assert _limits.measure([4096], kinds=("bound",)).memcpy_all_gbs == {4096: None}


def test_registry_names_the_limit_of_each_transport() -> None:
    kinds = {s.name: s.limit for s in _registry.BACKENDS}
    assert kinds["pytfcomm"] == kinds["pytfcomm-shm"] == kinds["mpi-shm"] == "memcpy"
    assert kinds["pytfcomm-tcp"] == kinds["mpi-tcp"] == kinds["gloo"] == "tcp"


def test_tf_multiworker_limit_row_is_the_time_at_memcpy_speed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import tf_multiworker as tm

    def canned(sizes: list[int], kinds: tuple[str, ...] = ()) -> _limits.Limits:
        return _limits.Limits(
            memcpy_gbs={n: 4.0 for n in sizes}, tcp_gbs={n: 2.0 for n in sizes}, errors=[]
        )

    monkeypatch.setattr(_limits, "measure", canned)
    row = tm._limit_row(4)
    # 16 MiB, 3/2 of it through memory at 4 GB/s
    assert row["reduce-16MiB"] == pytest.approx((16 << 20) * 1.5 / 4e9)
    assert row["train"] == row["keras-fit"] == "-"
    res = {"pytfcomm-mwms": {k: 1.0 for k in tm.KEYS}, tm.LIMIT: row}
    tm._print_table(res, 4, "")
    out = capsys.readouterr().out
    limit_line = next(x for x in out.splitlines() if x.startswith(f"| {tm.LIMIT}"))
    assert "x)" not in limit_line  # the machine's row carries no ratio
    assert "16 MiB: memcpy 4.00, TCP 2.00" in out


def test_in_process_benchmarks_import_the_installed_pytfcomm() -> None:
    # `python -m benchmarks.tf_local` from the repository root puts the checkout
    # first on sys.path; its pytfcomm/ has no extension in a fresh clone.
    root = ROOT
    code = (
        "import sys; sys.path.insert(0, '');"
        "from benchmarks._registry import import_installed_pytfcomm as f;"
        "m = f(); print(m.__file__); import pytfcomm._core"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True)

    assert out.returncode == 0, out.stderr.decode()
    where = Path(out.stdout.decode().strip()).resolve()
    assert not where.is_relative_to(root / "pytfcomm"), where


def test_the_shared_memory_ceiling_runs_every_pass_it_times() -> None:
    # benchmarks/shm_ceiling.py checks each mode's result after an iteration that starts
    # from NaN; a pass that skipped work or read the wrong piece raises there.
    from benchmarks import shm_ceiling

    t = shm_ceiling.measure(256 << 10, iters=2, timeout_s=120)
    assert set(t) == set(shm_ceiling.MODES)
    assert all(0 < v < 10 for v in t.values()), t


def test_the_shared_memory_ceiling_catches_a_piece_read_before_it_is_reduced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks import shm_ceiling

    def gather_first(rank, progress, base, pieces, reduce_piece, gather_piece, timeout_s=60.0):
        for i in range(pieces):
            gather_piece(i)  # without waiting for the peer's counter
        for i in range(pieces):
            reduce_piece(i)
            progress[rank] = base + i + 1

    monkeypatch.setattr(shm_ceiling, "_pipelined", gather_first)  # the forked ranks inherit it
    # Whichever rank gathers first reads a piece its peer has not reduced: NaN, or in
    # "private" mode the peer's input alone when the read lands between its copy and add.
    with pytest.raises(RuntimeError, match=r"(private|shared): rank \d element \d+ is "):
        shm_ceiling.measure(256 << 10, iters=1, modes=["private", "shared"], timeout_s=120)


def test_the_shared_memory_ceiling_reports_both_ranks_errors_in_rank_order() -> None:
    """A rank that finds a wrong element exits; its peer's next read of its memory then
    fails, and that error can reach the parent first. Both are reported, in rank
    order; a lone error is reported within the grace the relay gives the other rank."""
    import multiprocessing as mp
    import threading

    from benchmarks import shm_ceiling

    ranks = [mp.Pipe() for _ in range(2)]
    ranks[1][1].send(("error", "rank 1: ProcessLookupError: process_vm_readv: No such process"))
    late = ("error", "rank 0: AssertionError: private: rank 0 element 3 is nan")
    threading.Timer(0.3, ranks[0][1].send, args=(late,)).start()
    with pytest.raises(RuntimeError) as info:
        shm_ceiling._relay(ranks[0][0], ranks[1][0], timeout_s=10)
    assert str(info.value) == (
        "rank 0: AssertionError: private: rank 0 element 3 is nan; "
        "rank 1: ProcessLookupError: process_vm_readv: No such process"
    )
    alone = [mp.Pipe() for _ in range(2)]
    alone[0][1].send(("error", "rank 0: ValueError: x"))
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^rank 0: ValueError: x$"):
        shm_ceiling._relay(alone[0][0], alone[1][0], timeout_s=10)
    assert time.monotonic() - t0 < shm_ceiling.ERROR_GRACE_S + 5
