"""pytfcomm's Python API on CUDA tensors: every collective, dtype and op, NCCL
and staged, 2 and 3 ranks, hierarchical over 2 hosts, mismatches, deadlines,
lost ranks and GPU faults.

On a real GPU (CuPy or PyTorch tensors, ranks sharing GPU 0: NCCL >= 2.30
with NCCL_MULTI_RANK_GPU_ENABLE=1, else the NCCL runs use 1 rank); without
one, on the CPU stand-ins of libcuda/libnccl with fake_cuda tensors
(tests/gpu/conftest.py). Fault injection needs the stand-ins' knobs
(PTCSI_*): those tests say so and skip on a real GPU.
"""

from __future__ import annotations

import pytest
from _gpu_env import GpuEnv, real_gpu_only
from _harness import run_ranks

pytestmark = pytest.mark.gpu

COUNTS = [1, 1000]  # every dtype x op
BIG = [700_001]  # float32 and int64 sum, and the other collectives: 2.8 / 5.6 MiB


def _stand_in_only(gpu_env: GpuEnv, knob: str) -> None:
    if not gpu_env.standin:
        pytest.skip(f"{knob} is a fault knob of the CPU stand-ins; a real GPU has none")


def _hosts(n: int, hosts: int) -> list[dict[str, str]]:
    """PYTFCOMM_HOST_ID per rank: ranks split into `hosts` consecutive blocks."""
    per = -(-n // hosts)
    return [{"PYTFCOMM_HOST_ID": f"simulated-host-{r // per}"} for r in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_collectives_match_numpy(gpu_env: GpuEnv, transport: str, n: int) -> None:
    """All-reduce (every dtype x op, 1 element to a few MiB, in place too), broadcast
    from each root, all-gather, reduce-scatter against NumPy. The 2-rank runs
    delay every stream operation of the stand-in (PTCSI_CUDA_DELAY_US) so that a
    missing wait reads stale memory."""
    n = gpu_env.ranks_for_nccl(n) if transport == "nccl" else n
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport, PYTFCOMM_GPU_STAGE_BYTES="65536")
    if n == 2:
        env["PTCSI_CUDA_DELAY_US"] = "100"
    opts = {"big_counts": BIG, "in_place": True, "no_out": True}
    out = run_ranks(n, "gpu_workers:collectives", None, COUNTS, opts, env=env, timeout=280)
    for r, res in enumerate(out):
        assert res["failures"] == [], f"rank {r}: {res['failures'][:20]}"
        assert res["backend"] == transport


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_empty_tensors(gpu_env: GpuEnv, transport: str) -> None:
    """0 elements: every collective returns an empty tensor of the right shape."""
    n = gpu_env.ranks_for_nccl(2) if transport == "nccl" else 2
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport)
    opts = {"dtypes": ["float32", "int64"], "ops": ["sum", "max"]}
    out = run_ranks(n, "gpu_workers:collectives", None, [0], opts, env=env, timeout=120)
    for r, res in enumerate(out):
        assert res["failures"] == [], f"rank {r}: {res['failures'][:20]}"


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_hierarchical_over_two_simulated_hosts(gpu_env: GpuEnv, transport: str) -> None:
    """4 ranks as 2 hosts x 2 (PYTFCOMM_HOST_ID): algorithm="hierarchical" reduces
    within each host, across hosts, then shares within the host."""
    n = 4
    if transport == "nccl":
        gpu_env.skip_unless_nccl_ranks(n)
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport, PYTFCOMM_GPU_STAGE_BYTES="65536")
    opts = {
        "dtypes": ["float32", "float16", "int64", "uint8", "bool"],
        "ops": ["sum", "mean", "max", "prod"],
        "algorithms": ["hierarchical", "auto"],
    }
    out = run_ranks(
        n,
        "gpu_workers:collectives",
        None,
        [1, 1001, 65_536 * 3],
        opts,
        env=env,
        per_rank_env=_hosts(n, 2),
        timeout=280,
    )
    for r, res in enumerate(out):
        assert res["failures"] == [], f"rank {r}: {res['failures'][:20]}"
        assert res["backend"] == transport


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_large_buffers_are_chunked(gpu_env: GpuEnv, transport: str) -> None:
    """32 MiB: 8 chunks of the default 4 MiB staging buffers; 32 slots of the
    stand-in NCCL's 1 MiB exchange."""
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport)
    n = gpu_env.ranks_for_nccl(2) if transport == "nccl" else 2
    out = run_ranks(n, "gpu_workers:big_allreduce", 8 << 20, env=env, timeout=240)
    for res in out:
        assert res["ok"] and res["broadcast_ok"] and res["backend"] == transport, res


@pytest.mark.parametrize("stream", ["side", "default"])
@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_the_producers_pending_work_comes_first(
    gpu_env: GpuEnv, transport: str, stream: str
) -> None:
    """The producer's writes to the input are still pending on the tensor library's
    current stream, a side stream or the default one (20 ms per stand-in stream
    operation), when the collective starts: the all-reduce, broadcast and all-gather
    results include them on every rank (the hand-off of __dlpack__(stream=) to
    pytfcomm's stream)."""
    n = gpu_env.ranks_for_nccl(2) if transport == "nccl" else 2
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport, PYTFCOMM_GPU_STAGE_BYTES="65536")
    if gpu_env.standin:
        env["PTCSI_CUDA_DELAY_US"] = "20000"
    out = run_ranks(n, "gpu_workers:pending_producer_work", stream, 70_001, env=env, timeout=120)
    for r, res in enumerate(out):
        assert res["failures"] == [], f"rank {r}: {res['failures']}"
        assert res["backend"] == transport


def test_init_transport_tcp_stages(gpu_env: GpuEnv) -> None:
    out = run_ranks(2, "gpu_workers:collectives", "tcp", [4097], {}, env=gpu_env.env, timeout=280)
    assert [r["backend"] for r in out] == ["staged", "staged"]
    assert all(r["failures"] == [] for r in out), out


@pytest.mark.parametrize(
    ("what", "n"),
    [("count", 2), ("count", 3), ("empty", 2), ("dtype", 2), ("op", 3), ("root", 2), ("kind", 2)],
)
@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_mismatch_is_detected_on_every_rank(
    gpu_env: GpuEnv, transport: str, what: str, n: int
) -> None:
    if transport == "nccl":
        gpu_env.skip_unless_nccl_ranks(n)
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport)
    out = run_ranks(n, "gpu_workers:mismatch", None, what, env=env, timeout=120)
    for r, said in enumerate(out):
        assert said.startswith("MismatchError"), f"rank {r}: {said}"
        assert "disagree" in said or "different" in said, f"rank {r}: {said}"


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_missing_rank_times_out(gpu_env: GpuEnv, transport: str) -> None:
    if transport == "nccl":
        gpu_env.skip_unless_nccl_ranks(3)
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport)
    out = run_ranks(3, "gpu_workers:one_rank_missing", None, env=env, timeout=120)
    for said in out[:2]:
        assert said.startswith(("CommTimeoutError", "PeerLostError")), out
        seconds = float(said.split(" after ")[1].split("s:")[0])
        assert seconds < 12, out


@pytest.mark.parametrize("n", [2, 3])
def test_hung_rank_inside_nccl_hits_the_deadline(gpu_env: GpuEnv, n: int) -> None:
    """The last rank's second collective never reaches NCCL (PTCSI_NCCL_HANG_AT):
    every rank raises CommTimeoutError at its 4 s deadline (init(timeout=4)),
    aborting NCCL, and the communicator refuses later calls at once."""
    _stand_in_only(gpu_env, "PTCSI_NCCL_HANG_AT")
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT="nccl", PTCSI_NCCL_HANG_AT=f"2:{n - 1}")
    out = run_ranks(n, "gpu_workers:failing", 4.0, env=env, timeout=90)
    for r, res in enumerate(out):
        assert res["call"] == 1, (r, res)
        assert res["outcome"].startswith("CommTimeoutError"), (r, res)
        assert "timed out" in res["outcome"] and "NCCL was aborted" in res["outcome"], (r, res)
        assert 3.5 < res["took"] < 12, (r, res)
        assert "closed" in res["after"] and res["after_took"] < 2, (r, res)


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_rank_lost_mid_collective(gpu_env: GpuEnv, transport: str) -> None:
    """The last of 3 ranks dies (os._exit) while the others wait inside the
    collective: they raise a pytfcomm error within a bound instead of hanging.
    On the NCCL path the dying rank's collective never reaches NCCL's barrier
    (PTCSI_NCCL_HANG_AT), so the survivors are inside ncclAllReduce."""
    if transport == "nccl":
        _stand_in_only(gpu_env, "PTCSI_NCCL_HANG_AT")
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport)
    per_rank = [{}, {}, {"PTCSI_NCCL_HANG_AT": "2"}]
    out = run_ranks(
        3, "gpu_workers:lost_rank", 8.0, transport == "nccl", env=env, per_rank_env=per_rank,
        timeout=90,
        allow_failure=True,
    )  # fmt: skip
    assert out[2][0] is False and "exited with code 17" in out[2][1], out[2]
    for r in (0, 1):
        ok, res = out[r]
        assert ok, res
        assert res["outcome"].startswith(("PeerLostError", "CommTimeoutError")), (r, res)
        assert "rank 2" in res["outcome"] or "NCCL" in res["outcome"], (r, res)
        assert res["took"] < 12, (r, res)


# The NCCL path's opt-in modes (docs/gpu.md): each must notice the lost peer as
# the default does, through the host side's liveness, not at the deadline.
KILLED_MODES = {
    "nccl": ("nccl", {}),
    "staged": ("staged", {}),
    # The stand-in's launch then waits for every peer's (as NCCL's connection
    # set-up does): a blocking launch is held inside NCCL when the peer dies.
    "nccl-blocking": (
        "nccl",
        {"PYTFCOMM_GPU_NCCL_MODE": "blocking", "PTCSI_NCCL_LAUNCH_WAITS": "1"},
    ),
    "nccl-verify-cache": ("nccl", {"PYTFCOMM_GPU_VERIFY_CACHE": "1"}),
}


@pytest.mark.parametrize("mode", list(KILLED_MODES))
def test_rank_killed_mid_stream(gpu_env: GpuEnv, mode: str) -> None:
    """The last of 3 ranks is SIGKILLed in a stream of 64 MiB all-reduces, 0.3 s
    after its 8th, at no chosen point (no fault knob: on a GPU mostly inside NCCL's kernel or the
    staging copies). Every result the survivors checked before is right, and they
    raise a pytfcomm error naming the loss within a bound (15 s, the deadline being
    20 s) instead of hanging: staged, NCCL, and NCCL with blocking communicators or
    the compact verification."""
    transport, setting = KILLED_MODES[mode]
    if transport == "nccl":
        gpu_env.skip_unless_nccl_ranks(3)
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport, **setting)
    out = run_ranks(3, "gpu_workers:killed_in_stream", 20.0, env=env, timeout=150,
                    allow_failure=True)  # fmt: skip
    assert out[2][0] is False and "exited with code -9" in out[2][1], out[2]
    for r in (0, 1):
        ok, res = out[r]
        assert ok, res
        assert res["wrong"] == 0 and res["right"] > 0, (r, res)
        assert res["outcome"].startswith(("PeerLostError", "CommTimeoutError")), (r, res)
        assert res["took"] < 15, (r, res)
        if "blocking" in mode:
            assert res["nccl_mode"] == "blocking", (r, res)
        if "verify-cache" in mode:  # the stream's calls took the compact check
            assert res["verify"]["compact"] > 0, (r, res)


@pytest.mark.parametrize("transport", ["nccl", "staged"])
def test_more_than_2_gib(gpu_env: GpuEnv, transport: str) -> None:
    """2 GiB + 4099 uint8 elements (a count past int32) all-reduced on 2 ranks, the
    result allocated by pytfcomm and in place: every element right."""
    real_gpu_only(gpu_env, "2 x 4 GiB of device memory per rank")
    n = gpu_env.ranks_for_nccl(2) if transport == "nccl" else 2
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT=transport)
    out = run_ranks(n, "gpu_workers:huge_allreduce", (1 << 31) + 4099, env=env, timeout=280)
    for r, res in enumerate(out):
        assert res["wrong"] == 0 and res["wrong_in_place"] == 0, (r, res)
        assert res["backend"] == transport, (r, res)


def _async_error(gpu_env: GpuEnv, knob: str) -> list[dict]:
    _stand_in_only(gpu_env, "PTCSI_NCCL_ASYNC_ERROR_AT")
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT="nccl", PTCSI_NCCL_ASYNC_ERROR_AT=knob)
    return run_ranks(3, "gpu_workers:failing", 6.0, env=env, timeout=90)


@pytest.mark.parametrize("where", ["every rank", "rank 1"])
def test_nccl_async_error_fails_every_rank(gpu_env: GpuEnv, where: str) -> None:
    """NCCL fails the second collective asynchronously (ncclSystemError,
    PTCSI_NCCL_ASYNC_ERROR_AT) on every rank or on rank 1 only: the failing
    ranks raise at once naming NCCL, the others at their 6 s deadline at the
    latest; nobody hangs and the communicator refuses later calls."""
    out = _async_error(gpu_env, "2" if where == "every rank" else "2:1")
    failed = [0, 1, 2] if where == "every rank" else [1]
    for r, res in enumerate(out):
        assert res["call"] == 1, (r, res)
        if r in failed:
            assert "NCCL" in res["outcome"] and res["took"] < 3, (r, res)
        else:
            assert res["outcome"].startswith(("PeerLostError", "CommTimeoutError")), (r, res)
            assert res["took"] < 12, (r, res)
        assert "closed" in res["after"] and res["after_took"] < 2, (r, res)


def test_nccl_async_error_is_a_lost_peer(gpu_env: GpuEnv) -> None:
    out = _async_error(gpu_env, "2")
    for r, res in enumerate(out):
        assert res["outcome"].startswith("PeerLostError"), (r, res)
        assert "system error" in res["outcome"], (r, res)


def test_gpu_call_after_a_failure_is_comm_closed(gpu_env: GpuEnv) -> None:
    out = _async_error(gpu_env, "2")
    for r, res in enumerate(out):
        assert res["after"].startswith("CommClosedError"), (r, res)


def test_staged_copy_error_fails_every_rank(gpu_env: GpuEnv) -> None:
    """Rank 0's third asynchronous copy fails (PTCSI_CUDA_FAIL_COPY: an illegal
    address on the staging stream): rank 0 raises naming the CUDA error, its
    peers raise too (the communicator was closed), nobody hangs."""
    _stand_in_only(gpu_env, "PTCSI_CUDA_FAIL_COPY")
    env = gpu_env.with_env(PYTFCOMM_GPU_TRANSPORT="staged")
    per_rank = [{"PTCSI_CUDA_FAIL_COPY": "5"}, {}, {}]
    out = run_ranks(3, "gpu_workers:failing", 20.0, env=env, per_rank_env=per_rank, timeout=90)
    assert "illegal memory access" in out[0]["outcome"], out[0]
    for r, res in enumerate(out):
        assert res["outcome"] != "no error" and res["took"] < 12, (r, res)
        assert res["after"] != "no error" and res["after_took"] < 2, (r, res)
    for r in (1, 2):
        assert out[r]["outcome"].startswith(("PeerLostError", "CommClosedError")), out[r]
        assert "rank 0" in out[r]["outcome"], out[r]


def test_info_names_the_driver_it_loaded(gpu_env: GpuEnv) -> None:
    """`python -m pytfcomm info`'s GPU section reports the driver file it loaded (a
    PYTFCOMM_CUDA_DRIVER path as given, not prefixed again) and the GPUs it sees."""
    import json
    import os
    import subprocess
    import sys

    _stand_in_only(gpu_env, "PYTFCOMM_CUDA_DRIVER")
    code = (
        "import json, pytfcomm._core as c; from pytfcomm._dlpack import nccl_candidates;"
        "print(json.dumps(c.gpu_info(nccl_candidates())))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **gpu_env.env},
        cwd=os.path.dirname(gpu_env.env["PYTFCOMM_CUDA_DRIVER"]),
    )
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["cuda_driver"] == gpu_env.env["PYTFCOMM_CUDA_DRIVER"], info
    assert info["gpus"] == 2 and info["nccl"] == gpu_env.env["PYTFCOMM_NCCL_LIBRARY"], info


def test_init_names_the_nccl_wheel_for_every_gpu_path(gpu_env: GpuEnv, tmp_path) -> None:
    """init() names the nvidia-nccl wheel's libnccl.so.2 before anything can load NCCL
    (once per process), so a load that names no library (TF's GPU kernels, gpu_info())
    takes the wheel's and not the loader path's (an older system NCCL on the H200)."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    env = {**os.environ, **gpu_env.env}
    env.pop("PYTFCOMM_NCCL_LIBRARY", None)
    if gpu_env.standin:  # a wheel's layout holding the stand-in NCCL
        lib = tmp_path / "site" / "nvidia" / "nccl" / "lib"
        lib.mkdir(parents=True)
        shutil.copy(gpu_env.env["PYTFCOMM_NCCL_LIBRARY"], lib / "libnccl.so.2")
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(tmp_path / "site")])
        want = str(lib / "libnccl.so.2")
    else:
        from pytfcomm._dlpack import nccl_candidates

        if not nccl_candidates():
            pytest.skip("no nvidia-nccl-cu13/-cu12 wheel is importable here")
        want = nccl_candidates()[0]
    code = (
        "import json, pytfcomm, pytfcomm._core as c\n"
        "from pytfcomm._launch.ports import free_port\n"
        "port = free_port()\n"
        "comm = pytfcomm.init(rank=0, size=1, addr=f'127.0.0.1:{port}')\n"
        "print(json.dumps(c.gpu_info()))\n"
        "comm.close()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=env, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.splitlines()[-1])
    assert info["nccl"] == want, info
