"""The shared-memory transport: it is used, and it never leaves anything in /dev/shm,
whether the job ends normally, by an exception, or by a rank killed with SIGKILL."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from _harness import collect, more_ranks_than_cores, run_ranks, start_ranks
from shm_workers import segments_of

import pytfcomm

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("transport", ["shm", "auto"])
def test_segments_are_mapped_but_never_left_linked(n: int, transport: str) -> None:
    results = run_ranks(n, "shm_workers:normal_run", transport, timeout=90)
    pids = [r["pid"] for r in results]
    for r, res in enumerate(results):
        assert res["ok"], r
        # Its own segment and one per peer, all already unlinked while in use.
        assert len(res["mapped"]) == n, res["mapped"]
        assert all(m.endswith("(deleted)") for m in res["mapped"]), res["mapped"]
        assert res["after"] == [], res["after"]  # close() unmaps everything
    assert segments_of(pids) == []


def test_tcp_transport_uses_no_shared_memory() -> None:
    results = run_ranks(2, "shm_workers:normal_run", "tcp", timeout=60)
    assert all(res["ok"] and res["mapped"] == [] for res in results)


def test_exception_in_one_rank_leaves_nothing() -> None:
    outcomes = run_ranks(3, "shm_workers:raise_after_init", timeout=60, allow_failure=True)
    assert not outcomes[1][0] and "on purpose" in outcomes[1][1]
    pids = []
    for r in (0, 2):
        ok, res = outcomes[r]
        assert ok, res
        assert res["type"] == "PeerLostError", res
        pids.append(res["pid"])
    assert segments_of(pids) == []


def test_mismatch_over_shared_memory_is_reported_everywhere() -> None:
    results = run_ranks(3, "shm_workers:mismatch", timeout=60)
    # Every rank sees the disagreement itself (no rank learns it from a
    # peer's abort) and the communicator stays usable (shm_workers.mismatch).
    assert all(res["type"] == "MismatchError" for res in results), results
    assert all("disagree" in res["message"] for res in results), results
    assert all(res["after"] == 3.0 for res in results), results
    assert segments_of([res["pid"] for res in results]) == []


def test_killed_rank_is_detected_and_leaves_nothing() -> None:
    with tempfile.TemporaryDirectory(prefix="pytfcomm-test-") as tmp:
        workdir = Path(tmp)
        pid_dir = workdir / "pids"
        pid_dir.mkdir()
        procs, results, _ = start_ranks(3, "shm_workers:killed", str(pid_dir), workdir=workdir)
        outcomes = collect(procs, results, workdir, timeout=90)
        pids = [int((pid_dir / f"{r}.pid").read_text()) for r in range(3)]
    for r in range(2):
        ok, res = outcomes[r]
        assert ok, res
        assert res["type"] == "PeerLostError", res
        # Named with its address by both survivors, even the one that learns
        # of it from the other's abort note.
        assert re.search(r"rank 2 \(127\.0\.0\.1[:,)]", res["message"]), res
        assert res["seconds"] < 5, res
    assert not outcomes[2][0]  # killed: no result
    assert segments_of(pids) == []


def test_blocked_rank_sleeps_instead_of_spinning() -> None:
    results = run_ranks(2, "shm_workers:idle_wait", 1.5, timeout=60)
    waiting = results[0]
    assert waiting["wall"] > 1.0, waiting
    assert waiting["cpu"] < 0.3 * waiting["wall"], waiting


def test_auto_uses_tcp_between_hosts_and_shm_within() -> None:
    envs = [{"PYTFCOMM_HOST_ID": f"host{r // 2}"} for r in range(4)]
    results = run_ranks(4, "shm_workers:host_ids", "auto", per_rank_env=envs, timeout=90)
    for res in results:
        assert res["ok"], res
        assert len(res["mapped"]) == 2, res  # own segment + the one local peer's


def test_forced_shm_across_hosts_is_a_config_error() -> None:
    envs = [{"PYTFCOMM_HOST_ID": f"host{r}"} for r in range(2)]
    results = run_ranks(2, "shm_workers:host_ids", "shm", per_rank_env=envs, timeout=60)
    for res in results:
        assert res["type"] == "ConfigError", res
        assert "another host" in res["message"], res


def test_bad_transport_names_are_refused() -> None:
    with pytest.raises(pytfcomm.InvalidArgumentError, match="transport"):
        pytfcomm.init(rank=0, size=1, addr="127.0.0.1:1", transport="udp")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_single_copy_by_reference_path(n: int) -> None:
    # Payloads >= 4 KiB travel by address (process_vm_readv) instead of through the ring.
    env = {
        "PYTFCOMM_TRANSPORT": "shm",
        "PYTFCOMM_SHM_BYREF_BYTES": "4096",
        "PYTFCOMM_SEGMENT_BYTES": "65536",
    }
    results = run_ranks(
        n,
        "core_workers:allreduce_matrix",
        [7, 5000, 300_001],
        ["ring", "recursive_doubling", "halving_doubling"],
        False,
        env=env,
        timeout=120,
    )
    for r, res in enumerate(results):
        assert not res["failures"], f"rank {r}: " + "\n".join(res["failures"][:20])
        assert res["digests"] == results[0]["digests"]


MIB = 1 << 20
KIB = 1 << 10


def _rank_logs(tmp_path: Path, n: int) -> list[str]:
    return [(tmp_path / f"rank{r}.log").read_text() for r in range(n)]


@pytest.mark.parametrize("setting", ["default", "off"])
def test_ranks_outnumbering_cores_read_by_reference_from_64_kib_per_rank(
    tmp_path: Path, setting: str
) -> None:
    # With more ranks than cores a piece read from the sender's memory (one copy) beats two
    # copies through the ring from 64 KiB per rank (docs/transports.md): each rank's log
    # says from where it lends by reference, and all-reduces from 64 KiB to 2 MiB per rank
    # are exact.
    n = more_ranks_than_cores()
    env = {"PYTFCOMM_TRANSPORT": "shm", "PYTFCOMM_LOG_LEVEL": "2"}
    if setting == "off":
        env["PYTFCOMM_OVERSUB_SHM_BYREF_BYTES"] = "off"
    counts = [n * per // 4 for per in (64 * KIB, MIB, 2 * MIB)]  # float32
    procs, results, _ = start_ranks(n, "shm_workers:large_sums", counts, env=env, workdir=tmp_path)
    outcomes = collect(procs, results, tmp_path, 120)
    assert all(ok and value == [True] * 3 for ok, value in outcomes.values()), outcomes
    want = 64 * KIB if setting == "default" else 2 * MIB
    for log in _rank_logs(tmp_path, n):
        assert f"by reference from {want} bytes per rank" in log, log


def test_ranks_with_a_core_each_keep_2_mib_per_rank(tmp_path: Path) -> None:
    if (os.cpu_count() or 1) < 2:
        pytest.fail("this test needs a machine with 2 cores or more")
    env = {"PYTFCOMM_TRANSPORT": "shm", "PYTFCOMM_LOG_LEVEL": "2"}
    procs, results, _ = start_ranks(
        2, "shm_workers:large_sums", [MIB // 2], env=env, workdir=tmp_path
    )
    outcomes = collect(procs, results, tmp_path, 120)
    assert all(ok and value == [True] for ok, value in outcomes.values()), outcomes
    for log in _rank_logs(tmp_path, 2):
        assert f"by reference from {2 * MIB} bytes per rank" in log, log
