"""Multi-process: every rank of a job reads its place from its own environment, and
``init()`` never runs processes that disagree about the job as one job.

Each rank's launcher variables are written by the test (tests/workers/job_env_workers.py
removes the inherited ones first).  A disagreement must be a ConfigError on every rank,
naming what each rank read, long before the connect timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _harness import free_port, run_ranks
from _paths import WORKERS

# Every process of these tests waits at most this long to connect; a disagreement must be
# reported well before, within _PROMPT seconds of init().
_CONNECT_TIMEOUT = "90"
_PROMPT = 45.0
_BASE = {"PYTFCOMM_CONNECT_TIMEOUT": _CONNECT_TIMEOUT, "PYTFCOMM_HOST_ID": "one-host"}


def _run(envs: list[dict[str, str]], port: int | None = None) -> list[dict]:
    return run_ranks(
        len(envs), "job_env_workers:init_from", envs, timeout=150, env=_BASE, port=port
    )


def _rendezvous() -> tuple[str, int]:
    """A free loopback address: PYTFCOMM_ADDR, and the port (MASTER_PORT is one below)."""
    port = free_port()
    return f"127.0.0.1:{port}", port


def _assert_refused_everywhere(results: list[dict], *words: str) -> None:
    for r, res in enumerate(results):
        assert "error" in res, f"rank {r} ran as {res}: the disagreement went unnoticed"
        assert res["seconds"] < _PROMPT, f"rank {r} took {res['seconds']:.1f} s: {res['error']}"
        for word in words:
            assert word in res["error"], f"rank {r}: {word!r} not in {res['error']!r}"


def test_torchrun_variables_make_one_job() -> None:
    _, port = _rendezvous()
    envs = [
        {
            "RANK": str(r),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(r),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port - 1),
            "TORCHELASTIC_RUN_ID": "run-7",
        }
        for r in range(2)
    ]
    results = _run(envs)
    assert [(x.get("rank"), x.get("size"), x.get("source")) for x in results] == [
        (0, 2, "torchrun"),
        (1, 2, "torchrun"),
    ], results
    assert all(x["sum"] == 3 and x["job"] == "TORCHELASTIC_RUN_ID=run-7" for x in results)


def test_size_4_from_pytfcomm_and_8_from_world_size_is_refused() -> None:
    addr, port = _rendezvous()
    envs = [
        {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "4", "PYTFCOMM_ADDR": addr},
        {"RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port - 1)},
    ]
    results = _run(envs, port=port)
    _assert_refused_everywhere(results, "size")
    assert "rank 0 of 4 from PYTFCOMM" in results[0]["error"]
    assert "rank 1 of 8 from torchrun" in results[1]["error"]


def test_a_rank_number_used_twice_is_refused_on_every_rank() -> None:
    addr, port = _rendezvous()
    envs = [
        {"PYTFCOMM_RANK": str(r), "PYTFCOMM_SIZE": "3", "PYTFCOMM_ADDR": addr} for r in (0, 1, 1)
    ]
    results = _run(envs, port=port)
    _assert_refused_everywhere(results, "rank 1", "from PYTFCOMM")


def test_two_launches_sharing_a_rendezvous_address_are_refused() -> None:
    # Two srun steps of different jobs whose derived ports meet (here: PYTFCOMM_PORT on
    # both): each contributes one task and believes the job is complete.
    _, port = _rendezvous()

    def task(rank: int, job: str) -> dict[str, str]:
        return {
            "SLURM_PROCID": str(rank),
            "SLURM_STEP_ID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_LOCALID": str(rank),
            "SLURM_STEP_NODELIST": "localhost",
            "SLURM_JOB_ID": job,
            "PYTFCOMM_PORT": str(port),
        }

    results = _run([task(0, "100"), task(1, "200")], port=port)
    _assert_refused_everywhere(
        results, "not one job", "SLURM_JOB_ID=100", "SLURM_JOB_ID=200", "different launcher jobs"
    )


def test_ranks_reading_different_sources_are_refused() -> None:
    addr, port = _rendezvous()
    envs = [
        {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": addr},
        {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port - 1)},
    ]
    results = _run(envs, port=port)
    _assert_refused_everywhere(
        results, "different sources", "rank 0 read rank 0 of 2 from PYTFCOMM", "from torchrun"
    )


_SLURM_WORKER = WORKERS / "slurm_worker.py"
_OURS = ("PYTFCOMM_", "SLURM_", "TF_CONFIG", "OMPI_", "PMI", "MPI_LOCAL", "I_MPI_", "PRTE_")


_NO_MPIRUN = "no mpirun (apt-get install openmpi-bin)"


def _launch(argv: list[str], tmp_path: Path, **extra: str) -> tuple[int, list[dict], str]:
    """Runs slurm_worker.py under an MPI launcher with no inherited launcher variables:
    its exit code, each process's record (from its own file, in rank order, errors
    first) and what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR"):
        env.pop(name, None)
    env.update(PYTFCOMM_CONNECT_TIMEOUT="60", PYTFCOMM_TIMEOUT="60", **extra)
    env["PTC_RESULT_DIR"] = str(tmp_path)
    res = subprocess.run(
        [*argv, sys.executable, str(_SLURM_WORKER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd="/",
    )
    views = [json.loads(f.read_text()) for f in sorted(tmp_path.glob("*.json"))]
    views.sort(key=lambda v: v.get("rank", -1))
    return res.returncode, views, res.stdout + res.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason=_NO_MPIRUN)
def test_real_mpirun_ranks_agree_on_its_job_id(tmp_path: Path) -> None:
    argv = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    rc, views, output = _launch(argv, tmp_path)
    assert rc == 0, output
    assert [(v["rank"], v["size"], v["source"], v["local_size"]) for v in views] == [
        (0, 2, "mpi", 2),
        (1, 2, "mpi", 2),
    ], views
    assert views[0]["job"] == views[1]["job"], views
    assert str(views[0]["job"]).startswith("OMPI_MCA_ess_base_jobid="), views


_HYDRA = shutil.which("mpiexec.hydra")


@pytest.mark.skipif(_HYDRA is None, reason="no mpiexec.hydra (apt-get install mpich)")
@pytest.mark.parametrize("port", [False, True], ids=["no_port", "port"])
def test_real_mpich_hydra_ranks_form_one_job(port: bool, tmp_path: Path) -> None:
    """MPICH's Hydra sets PMI_RANK/PMI_SIZE/MPI_LOCALRANKID but no job id: without
    PYTFCOMM_PORT every rank refuses, saying to set it; with it, one job of 2."""
    assert _HYDRA is not None
    extra = {"PYTFCOMM_PORT": str(free_port())} if port else {}
    rc, views, output = _launch([_HYDRA, "-n", "2"], tmp_path, **extra)
    assert len(views) == 2, output
    if not port:
        assert rc != 0
        for v in views:
            assert v["error"] == "ConfigError", v
            assert "PMI_RANK" in v["message"] and "PYTFCOMM_PORT" in v["message"], v
        return
    assert rc == 0, output
    assert [(v["rank"], v["size"], v["source"], v["local_size"], v["sum"]) for v in views] == [
        (0, 2, "mpi", 2, [3, 3, 3, 3]),
        (1, 2, "mpi", 2, [3, 3, 3, 3]),
    ], views


# torchrun is torch's: scripts/setup.sh installs torch's CPU wheel where one is on hand
# (pip finds it among its local wheels); elsewhere PTC_TORCHRUN names one in another
# environment, and it starts this interpreter with --no-python.
_TORCHRUN = (
    os.environ.get("PTC_TORCHRUN")
    or shutil.which("torchrun", path=str(Path(sys.executable).parent))
    or shutil.which("torchrun")
)


@pytest.mark.skipif(_TORCHRUN is None, reason="no torchrun (pip install torch; or PTC_TORCHRUN)")
def test_real_torchrun_ranks_form_one_job(tmp_path: Path) -> None:
    """torchrun's own agent sets RANK/WORLD_SIZE/LOCAL_*/MASTER_* and its run id; its
    store keeps MASTER_PORT, pytfcomm meets on the port above it."""
    assert _TORCHRUN is not None
    master = free_port()
    argv = [_TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    argv += ["--master-port", str(master), "--rdzv-id", "ptc-7", "--no-python"]
    rc, views, output = _launch(argv, tmp_path)
    assert rc == 0, output
    assert [(v["rank"], v["size"], v["source"], v["local_size"], v["sum"]) for v in views] == [
        (0, 2, "torchrun", 2, [3, 3, 3, 3]),
        (1, 2, "torchrun", 2, [3, 3, 3, 3]),
    ], views
    assert views[0]["addr"] == f"127.0.0.1:{master + 1}", views
    assert views[0]["job"] == views[1]["job"], views
    assert str(views[0]["job"]).startswith("TORCHELASTIC_RUN_ID="), views
