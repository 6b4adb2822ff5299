"""The NCCL stand-in (tests/gpu/standin/nccl, libnccl.so.2 on host memory).

Builds the stand-ins (CUDA driver and NCCL) with their test program
(nccl/test/nccl_test.cc) and runs that program as 1, 2 or 3 processes: every
collective x type x op against an independent reference, 16 MiB buffers,
group calls over several ranks per process, non-blocking init and settling,
mismatch detection, abort of a waiting rank, init misuse and each fault
knob. No GPU needed; skipped without cmake, ninja, cuda.h or nccl.h.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "standin"
CUDA_INCLUDE = Path("/usr/local/cuda/include")
NCCL_INCLUDE = (
    Path(__file__).resolve().parents[2] / ".venv/lib/python3.11/site-packages/nvidia/nccl/include"
)
if not (NCCL_INCLUDE / "nccl.h").is_file():
    NCCL_INCLUDE = Path("/work/main/.venv/lib/python3.11/site-packages/nvidia/nccl/include")
SHM = Path("/dev/shm")

EXPORTS = {
    "ncclGetVersion",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclGetUniqueId",
    "ncclCommInitRankConfig",
    "ncclCommGetAsyncError",
    "ncclCommFinalize",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclAllReduce",
    "ncclReduceScatter",
    "ncclAllGather",
    "ncclBroadcast",
}
REVOKE = "ncclCommRevoke"  # NCCL 2.28+; pytfcomm's blocking mode needs it
SHRINK = "ncclCommShrink"  # NCCL 2.27+; the survivors of a lost rank shrink with it
OPTIONAL = {REVOKE, SHRINK}


def _missing() -> str | None:
    for tool in ("cmake", "ninja", "nm"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not (CUDA_INCLUDE / "cuda.h").is_file():
        return f"no cuda.h in {CUDA_INCLUDE}"
    if not (NCCL_INCLUDE / "nccl.h").is_file():
        return "no nccl.h (pip install nvidia-nccl-cu13)"
    return None


REASON = _missing()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def build(standin_libs: Path) -> Path:
    """The session's stand-in build (tests/conftest.py), test program included."""
    return standin_libs


def _segments() -> set[str]:
    return {p.name for p in SHM.glob("ptcsi-nccl-*")} if SHM.is_dir() else set()


def run(
    build: Path,
    tmp_path: Path,
    mode: str,
    nprocs: int,
    arg: str = "",
    timeout: float = 60,
    **env: str,
) -> list[str]:
    """Runs nccl_standin_test as nprocs processes; asserts all succeed; their output."""
    before = _segments()
    meet = tmp_path / f"meet-{mode}-{nprocs}-{arg}"
    meet.mkdir()
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PTCSI_") and k != "CUDA_VISIBLE_DEVICES"
    }
    full_env.update(env)
    procs = []
    logs = []
    try:
        for p in range(nprocs):
            cmd = [str(build / "nccl_standin_test"), mode, str(nprocs), str(p), str(meet)]
            if arg:
                cmd.append(arg)
            log = open(meet / f"log{p}.txt", "w+")
            logs.append(log)
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env))
        deadline = time.monotonic() + timeout
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    report = "\n".join(
        f"--- process {i} (exit {c}) ---\n{o}"
        for i, (c, o) in enumerate(zip(codes, outputs, strict=True))
    )
    assert all(c == 0 for c in codes), report
    # Every communicator was destroyed or aborted: no segment may be left.
    leaked = _segments() - before
    if leaked:
        time.sleep(0.5)  # a concurrent run's segment lives only while it joins
        leaked &= _segments()
    assert not leaked, f"shared-memory segments left behind: {leaked}\n{report}"
    return outputs


@pytest.mark.parametrize(
    ("where", "want"),
    [
        ("", EXPORTS | OPTIONAL),
        ("norevoke", EXPORTS),
        ("noshrink", EXPORTS | {REVOKE}),
        ("shrink227", EXPORTS | {SHRINK}),
    ],
)
def test_exports_exactly_what_pytfcomm_loads(build: Path, where: str, want: set[str]) -> None:
    """libnccl.so.2 exports what pytfcomm loads, ncclCommRevoke and ncclCommShrink
    included; norevoke/libnccl.so.2 (an NCCL before 2.27) the same without either,
    noshrink/ without ncclCommShrink, shrink227/ (NCCL 2.27) without ncclCommRevoke."""
    lib = build / where / "libnccl.so.2"
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert names == want
    needed = subprocess.run(
        ["readelf", "-d", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    assert "libcuda.so.1" in needed  # the driver stand-in, through $ORIGIN


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_every_collective_type_and_op(build: Path, tmp_path: Path, nprocs: int) -> None:
    """AllReduce and ReduceScatter x 5 ops, AllGather, Broadcast; 10 types; in place too."""
    outs = run(build, tmp_path, "all", nprocs)
    assert all("240 collectives correct" in o for o in outs)


@pytest.mark.parametrize(("nprocs", "count"), [(3, "37"), (2, "1000")])
def test_chunked_through_small_slots(build: Path, tmp_path: Path, nprocs: int, count: str) -> None:
    """A 64-byte exchange slot: every collective runs in many chunks."""
    run(build, tmp_path, "all", nprocs, count, PTCSI_NCCL_SLOT_BYTES="64")


def test_16_mib_buffers(build: Path, tmp_path: Path) -> None:
    outs = run(build, tmp_path, "big", 3, timeout=120)
    assert all("16 MiB collectives correct" in o for o in outs)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_group_calls_several_ranks_per_process(build: Path, tmp_path: Path, nprocs: int) -> None:
    """Two ranks per process inside (nested) groups on two streams; blocking init in threads."""
    run(build, tmp_path, "group", nprocs)


def test_in_progress_knob_settles(build: Path, tmp_path: Path) -> None:
    run(build, tmp_path, "settle", 2, PTCSI_NCCL_INPROGRESS="1")


@pytest.mark.parametrize("what", ["count", "datatype", "op", "root", "kind"])
def test_mismatched_calls_fail_every_rank(build: Path, tmp_path: Path, what: str) -> None:
    outs = run(build, tmp_path, "mismatch", 3 if what == "count" else 2, what)
    assert any("mismatched collective" in o and what in o for o in outs), outs


@pytest.mark.parametrize("nprocs", [2, 3])
def test_abort_unblocks_a_waiting_rank(build: Path, tmp_path: Path, nprocs: int) -> None:
    """Only the aborted rank's work ends (quickly); its peers keep waiting, as with NCCL."""
    outs = run(build, tmp_path, "abort", nprocs)
    assert "abort ended the waiting work" in outs[0]


def test_never_join_knob(build: Path, tmp_path: Path) -> None:
    run(build, tmp_path, "never_join", 3, PTCSI_NCCL_NEVER_JOIN="1")


def test_async_error_knob_every_rank(build: Path, tmp_path: Path) -> None:
    run(build, tmp_path, "error_at", 2, PTCSI_NCCL_ASYNC_ERROR_AT="2")


def test_async_error_knob_one_rank(build: Path, tmp_path: Path) -> None:
    run(build, tmp_path, "error_at", 3, "1", PTCSI_NCCL_ASYNC_ERROR_AT="2:1")


def test_hang_knob(build: Path, tmp_path: Path) -> None:
    run(build, tmp_path, "hang", 2, PTCSI_NCCL_HANG_AT="1:1")


@pytest.mark.parametrize("what", ["nranks", "range", "twice"])
@pytest.mark.parametrize("nprocs", [2, 3])
def test_init_misuse_fails_every_rank(build: Path, tmp_path: Path, what: str, nprocs: int) -> None:
    outs = run(build, tmp_path, "badinit", nprocs, what)
    assert all("NCCL stand-in:" in o for o in outs), outs


# ---- pytfcomm's NCCL GPU path end to end on both stand-ins -------------------

REPO = Path(__file__).resolve().parents[2]


def _rank_env(build: Path, package: Path, **extra: str) -> dict[str, str]:
    return {
        "PYTHONPATH": os.pathsep.join(
            [str(package), str(STANDIN), str(STANDIN / "nccl"), str(HERE)]
        ),
        # The driver next to libnccl.so.2: one loaded copy for both.
        "PYTFCOMM_CUDA_DRIVER": str(build / "libcuda.so.1"),
        "PYTFCOMM_NCCL_LIBRARY": str(build / "libnccl.so.2"),
        "PYTFCOMM_GPU_TRANSPORT": "nccl",
        "PTCSI_GPUS": "2",
        **extra,
    }


@pytest.mark.parametrize("inprogress", ["0", "1"])
def test_pytfcomm_nccl_collectives_end_to_end(
    build: Path, cuda_package: Path, inprogress: str
) -> None:
    """pytfcomm's CUDA core, 2 ranks, transport nccl: every dtype x op, broadcast,
    all-gather, reduce-scatter on fake_cuda tensors with out= (standin_workers:staged)."""
    from _harness import run_ranks

    before = _segments()
    env = _rank_env(build, cuda_package, PTCSI_NCCL_INPROGRESS=inprogress)
    out = run_ranks(2, "standin_workers:staged", [1, 1000, 40_003], env=env, timeout=240)
    for r, res in enumerate(out):
        assert res["failures"] == [], f"rank {r}: {res['failures']}"
        assert res["backend"] == "nccl"
    assert not (_segments() - before)


def test_pytfcomm_nccl_async_error(build: Path, cuda_package: Path) -> None:
    """Rank 0's first collective fails in NCCL: it raises at once; its peer, blocked in
    NCCL (which, as real NCCL, does not wake it), raises by its deadline, not later."""
    from _harness import run_ranks

    env = _rank_env(build, cuda_package, PYTFCOMM_TIMEOUT="8")
    per_rank = [{"PTCSI_NCCL_ASYNC_ERROR_AT": "1:0"}, {}]
    out = run_ranks(
        2, "standin_nccl_workers:failing", 8.0, env=env, per_rank_env=per_rank, timeout=120
    )
    assert out[0]["outcome"].startswith("PeerLostError"), out
    assert "injected" in out[0]["outcome"] and out[0]["took"] < 5, out
    assert out[1]["outcome"] != "no error" and out[1]["took"] < 20, out


def test_pytfcomm_nccl_error_reaches_the_peer_promptly(build: Path, cuda_package: Path) -> None:
    from _harness import run_ranks

    env = _rank_env(build, cuda_package, PYTFCOMM_TIMEOUT="12")
    per_rank = [{"PTCSI_NCCL_ASYNC_ERROR_AT": "1:0"}, {}]
    out = run_ranks(
        2, "standin_nccl_workers:failing", 12.0, env=env, per_rank_env=per_rank, timeout=120
    )
    assert out[1]["outcome"] != "no error" and out[1]["took"] < 6, out


def test_pytfcomm_nccl_hung_peer_times_out(build: Path, cuda_package: Path) -> None:
    """Rank 1's collective never reaches NCCL's barrier: both ranks time out (NCCL aborted)."""
    from _harness import run_ranks

    env = _rank_env(build, cuda_package, PYTFCOMM_TIMEOUT="5")
    per_rank = [{}, {"PTCSI_NCCL_HANG_AT": "1"}]
    out = run_ranks(
        2, "standin_nccl_workers:failing", 5.0, env=env, per_rank_env=per_rank, timeout=120
    )
    for res in out:
        assert "CommTimeoutError" in res["outcome"] and res["took"] < 15, out
