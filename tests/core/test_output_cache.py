"""Results of NumPy collectives called without ``out=`` come from the output-buffer cache
(PYTFCOMM_TF_BUFFER_CACHE) from 1 MiB, those the core allocates once it knows their size
(unequal all-gathers, alltoall) too: every result right while others are alive, freed
buffers reused, and a forked child free to release and take them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _harness import check_matrix, free_port, run_ranks

from pytfcomm import _core

# Below the cache's 1 MiB (NumPy's allocation), the ring's sizes, and 16 MiB (over shared
# memory, read from the sender's memory).
COUNTS = [70_001, 1 << 20, 4 << 20]


@pytest.mark.parametrize(("n", "transport"), [(2, "shm"), (2, "tcp"), (3, "shm"), (3, "tcp")])
def test_results_without_out_are_right_while_others_are_alive(
    n: int, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTFCOMM_TRANSPORT", transport)
    check_matrix(run_ranks(n, "output_cache_workers:results_without_out", COUNTS, timeout=240))


def test_a_freed_result_buffer_is_taken_again() -> None:
    f32 = np.dtype(np.float32)
    a = _core.cached_empty((4, 1 << 20), f32)
    a[:] = 1.0
    where = a.ctypes.data
    del a
    b = _core.cached_empty((1 << 22,), f32)
    assert b.ctypes.data == where
    c = _core.cached_empty((1 << 22,), f32)  # b is alive: a buffer of its own
    assert not np.shares_memory(b, c)
    assert _core.cached_empty((0, 3), np.dtype(np.float64)).shape == (0, 3)


def test_a_result_the_core_allocates_is_a_cached_buffer() -> None:
    import pytfcomm

    with pytfcomm.init(rank=0, size=1, addr=f"127.0.0.1:{free_port()}") as comm:
        x = np.arange(13 << 18, dtype=np.float32)  # 13 MiB: alltoall's result is the core's
        got, received = comm.alltoall(x, [x.size])
        assert received.tolist() == [x.size]
        assert np.array_equal(got, x)
        held = _core.output_cache_stats()["in_use_bytes"]
        del got
        after = _core.output_cache_stats()
        # Its buffer (13 MiB, in the 14 MiB class) was the cache's and went back to it.
        assert held - after["in_use_bytes"] == 14 << 20
        assert after["idle_bytes"] >= 14 << 20


def test_a_bad_shape_is_refused() -> None:
    import pytfcomm

    with pytest.raises(pytfcomm.InvalidArgumentError, match="negative dimension"):
        _core.cached_empty((-1,), np.dtype(np.float32))


FORK_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    import numpy as np
    from pytfcomm import _core

    f32 = np.dtype(np.float32)
    inherited = [_core.cached_empty((1 << 20,), f32) for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        del inherited
        ys = [_core.cached_empty((1 << 20,), f32) for _ in range(3)]
        for i, y in enumerate(ys):
            y[:] = i
        os._exit(0 if [float(y[-1]) for y in ys] == [0.0, 1.0, 2.0] else 3)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            sys.exit(os.waitstatus_to_exitcode(status))
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sys.exit("the child hung")
        time.sleep(0.01)
    """
)


def test_a_forked_child_releases_what_it_inherited_and_takes_buffers(tmp_path: Path) -> None:
    # Run outside the checkout: `python -c` puts its directory first on sys.path, and the
    # checkout's pytfcomm/ has no _core.
    r = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
