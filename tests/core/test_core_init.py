"""Joining a job from the environment, host identity, and the info command."""

from __future__ import annotations

import json
import subprocess
import sys

from _harness import free_port, run_ranks


def test_init_from_pytfcomm_variables() -> None:
    port = free_port()
    envs = [
        {"PYTFCOMM_RANK": str(r), "PYTFCOMM_SIZE": "3", "PYTFCOMM_ADDR": f"127.0.0.1:{port}"}
        for r in range(3)
    ]
    results = run_ranks(3, "error_workers:from_environment", per_rank_env=envs)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["total"] == 6 for r in results)


def test_init_from_tf_config() -> None:
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    envs = [
        {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
        for i in range(2)
    ]
    results = run_ranks(2, "error_workers:from_environment", per_rank_env=envs)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["total"] == 3 for r in results)


def test_local_rank_and_hierarchical_over_simulated_hosts() -> None:
    envs = [{"PYTFCOMM_HOST_ID": f"host{r // 2}"} for r in range(4)]
    results = run_ranks(4, "error_workers:local_identity", per_rank_env=envs)
    assert [r["local_rank"] for r in results] == [0, 1, 0, 1]
    assert all(r["local_size"] == 2 and r["num_hosts"] == 2 for r in results)
    assert all(r["hierarchical_ok"] for r in results)
    assert all(r["auto"] == "hierarchical" for r in results)


def test_one_host_auto_is_ring() -> None:
    results = run_ranks(2, "error_workers:local_identity")
    assert all(r["local_size"] == 2 and r["num_hosts"] == 1 for r in results)
    assert all(r["auto"] == "ring" for r in results)


def test_info_command_prints_build_config() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytfcomm", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["transports"] == ["tcp", "shm"]
    assert data["reduce_isa"] in ("avx2", "generic")
    assert "PYTFCOMM_TIMEOUT" in data["params"]


def test_a_corrected_environment_counts_at_the_next_init() -> None:
    """PYTFCOMM_TIMEOUT=1e300 fails init(); fixing the variable in the same process
    must make the next init() use the new value (it kept reporting '1e300')."""
    code = (
        "import os, pytfcomm\n"
        "from pytfcomm import _core\n"
        "os.environ['PYTFCOMM_TIMEOUT'] = '1e300'\n"
        "try:\n"
        "    pytfcomm.init(rank=0, size=1)\n"
        "    print('NO ERROR')\n"
        "except pytfcomm.ConfigError as e:\n"
        "    print('FIRST', e)\n"
        "os.environ['PYTFCOMM_TIMEOUT'] = '7'\n"
        "comm = pytfcomm.init(rank=0, size=1)\n"
        "print('SECOND', dict(_core.params())['PYTFCOMM_TIMEOUT'])\n"
        "os.environ['PYTFCOMM_TIMEOUT'] = '9'\n"
        "pytfcomm.init(rank=0, size=1)\n"
        "print('THIRD', dict(_core.params())['PYTFCOMM_TIMEOUT'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert "FIRST PYTFCOMM_TIMEOUT='1e300' is not valid" in out.stdout, out
    assert "SECOND 7 s" in out.stdout, out
    assert "THIRD 9 s" in out.stdout, out
