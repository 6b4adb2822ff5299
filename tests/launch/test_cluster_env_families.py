"""pytfcomm._cluster by exact launcher environments: torchrun-style variables, Open MPI 4
and 5, MPICH/Intel MPI, Slurm's compressed host lists, uneven tasks per node and
heterogeneous jobs, and what ``python -m pytfcomm info`` says about them.

Pure Python, no network.  The environments are what each launcher sets (Open MPI 4's as
``mpirun -np 2 env`` printed here; the others from their documentation); the real
launchers are exercised in tests/launch/test_slurm.py and tests/launch/test_job_agreement.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import test_cluster_config
from test_cluster_config import Env

from pytfcomm._cluster import explain, resolve, slurm_first_host
from pytfcomm._cluster.slurm import slurm_tasks_per_node
from pytfcomm._cluster.torchrun import torchrun_port
from pytfcomm.errors import ConfigError

# The fixtures of tests/launch/test_cluster_config.py: launcher variables removed, resolve() by env.
clean_env = test_cluster_config.clean_env
env = test_cluster_config.env

_TORCHRUN_2 = {
    "RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.5",
    "MASTER_PORT": "29500",
    "TORCHELASTIC_RUN_ID": "abc",
}


def test_torchrun_variables(env: Env) -> None:
    spec = env(**_TORCHRUN_2)
    assert (spec.rank, spec.size, spec.source) == (1, 4, "torchrun")
    assert (spec.local_rank, spec.local_size) == (1, 2)
    assert spec.addr == "10.0.0.5:29501"  # MASTER_PORT + 1: torchrun's store has MASTER_PORT
    assert spec.job == "TORCHELASTIC_RUN_ID=abc"
    assert torchrun_port(65535) == 65534


def test_torchrun_port_and_addr_overrides(env: Env) -> None:
    assert env(**_TORCHRUN_2, PYTFCOMM_PORT="31000").addr == "10.0.0.5:31000"
    assert env(PYTFCOMM_ADDR="10.0.0.9:4000").addr == "10.0.0.9:4000"


@pytest.mark.parametrize(
    ("variables", "words"),
    [
        ({"RANK": "0"}, ["RANK is set but WORLD_SIZE is not"]),
        ({"WORLD_SIZE": "2"}, ["WORLD_SIZE is set but RANK is not"]),
        ({"RANK": "1", "WORLD_SIZE": "2"}, ["MASTER_ADDR and MASTER_PORT are not set"]),
        ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, ["MASTER_PORT is not set"]),
        ({"RANK": "2", "WORLD_SIZE": "2"}, ["RANK=2 is out of range"]),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a b", "MASTER_PORT": "1"}, ["host"]),
        ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "0"}, ["1..65535"]),
    ],
)
def test_partial_torchrun_environment_is_an_error(
    env: Env, variables: dict[str, str], words: list[str]
) -> None:
    with pytest.raises(ConfigError) as err:
        env(**variables)
    for word in words:
        assert word in str(err.value)


def test_torchrun_one_process_needs_no_master(env: Env) -> None:
    spec = env(RANK="0", WORLD_SIZE="1")
    assert (spec.rank, spec.size, spec.source, spec.addr) == (0, 1, "torchrun", "127.0.0.1:0")


def test_torchrun_order_among_sources(env: Env) -> None:
    # torchrun inside an srun step: the ranks it started carry the step's Slurm variables.
    slurm = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"}
    assert env(**_TORCHRUN_2, **slurm).source == "torchrun"
    pytfcomm = {"PYTFCOMM_RANK": "0", "PYTFCOMM_SIZE": "2", "PYTFCOMM_ADDR": "h:1"}
    assert env(**pytfcomm).source == "PYTFCOMM"


def test_open_mpi_4_as_mpirun_sets_it(env: Env) -> None:
    spec = env(
        OMPI_COMM_WORLD_RANK="1",
        OMPI_COMM_WORLD_SIZE="2",
        OMPI_COMM_WORLD_LOCAL_RANK="1",
        OMPI_COMM_WORLD_LOCAL_SIZE="2",
        OMPI_MCA_ess_base_jobid="2130575361",
        PMIX_RANK="1",
        PMIX_NAMESPACE="2130575361",
    )
    assert (spec.rank, spec.size, spec.source, spec.local_size) == (1, 2, "mpi", 2)
    assert spec.job == "OMPI_MCA_ess_base_jobid=2130575361"


def test_open_mpi_5_prrte(env: Env) -> None:
    # Open MPI 5 (PRRTE): no ORTE job id; PMIX_NAMESPACE names the job.
    spec = env(
        OMPI_COMM_WORLD_RANK="0",
        OMPI_COMM_WORLD_SIZE="2",
        OMPI_COMM_WORLD_LOCAL_RANK="0",
        OMPI_COMM_WORLD_LOCAL_SIZE="2",
        PMIX_RANK="0",
        PMIX_NAMESPACE="prterun-vm-4242@1",
        PRTE_MCA_prte_tmpdir_base="/tmp",
    )
    assert (spec.rank, spec.size, spec.source) == (0, 2, "mpi")
    assert spec.job == "PMIX_NAMESPACE=prterun-vm-4242@1"
    assert spec.addr.startswith("127.0.0.1:")


def test_mpich_hydra_and_intel_mpi(env: Env) -> None:
    spec = env(
        PMI_RANK="2",
        PMI_SIZE="3",
        MPI_LOCALRANKID="2",
        MPI_LOCALNRANKS="3",
        PMI_FD="5",
        I_MPI_HYDRA_UUID="6c1c0000-4a3b",
    )
    assert (spec.rank, spec.size, spec.local_rank, spec.source) == (2, 3, 2, "mpi")
    assert spec.job == "I_MPI_HYDRA_UUID=6c1c0000-4a3b"


@pytest.mark.parametrize(
    ("variables", "missing"),
    [
        ({"PMI_RANK": "0"}, "PMI_SIZE"),
        ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE"),
        ({"PMIX_RANK": "0"}, "OMPI_COMM_WORLD_SIZE / PMI_SIZE"),
    ],
)
def test_partial_mpi_environment_is_an_error(
    env: Env, variables: dict[str, str], missing: str
) -> None:
    with pytest.raises(ConfigError, match="world size is not") as err:
        env(**variables)
    assert missing in str(err.value)


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("r4i2n[2-4,7]", "r4i2n2"),
        ("a[1-2]b[3-4]", "a1b3"),
        ("n[01-03],m5", "n01"),
        ("gpu[007-010]", "gpu007"),
        ("m5,n[01-03]", "m5"),
    ],
)
def test_compressed_slurm_host_lists(nodelist: str, first: str) -> None:
    assert slurm_first_host(nodelist) == first


def _srun(**extra: str) -> dict[str, str]:
    return {
        "SLURM_PROCID": "4",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "5",
        "SLURM_LOCALID": "0",
        "SLURM_STEP_NODELIST": "n[01-03]",
        "SLURM_JOB_ID": "77",
        **extra,
    }


def test_uneven_tasks_per_node(env: Env) -> None:
    assert slurm_tasks_per_node("2(x2),1") == [2, 2, 1]
    spec = env(**_srun(SLURM_STEP_TASKS_PER_NODE="2(x2),1", SLURM_NODEID="2"))
    assert (spec.rank, spec.size, spec.local_rank, spec.local_size) == (4, 5, 0, 1)
    assert spec.addr.startswith("n01:")
    assert spec.job == "SLURM_JOB_ID=77 SLURM_STEP_ID=0"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "0"}, "6 tasks on 3 nodes"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_NODEID": "3"}, "SLURM_NODEID=3"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(y2)", "SLURM_NODEID": "0"}, "not a Slurm tasks"),
        ({"SLURM_HET_SIZE": "2"}, "heterogeneous job (SLURM_HET_SIZE is set)"),
        ({"SLURM_NTASKS_HET_GROUP_1": "3"}, "SLURM_NTASKS_HET_GROUP_1 is set"),
        ({"SLURM_DISTRIBUTION": "arbitrary"}, "set PYTFCOMM_ADDR"),
    ],
)
def test_slurm_forms_pytfcomm_refuses(env: Env, extra: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        env(**_srun(**extra))
    assert words in str(err.value)


def test_explain_names_what_was_read_and_what_was_ignored(env: Env) -> None:
    slurm = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "9"}
    env(**_TORCHRUN_2, **slurm, PYTFCOMM_PORT="31000")
    out = explain()
    assert out["source"] == "torchrun" and out["error"] is None
    assert out["read"]["WORLD_SIZE"] == "4"
    assert out["ignored"]["slurm"]["why"].startswith("not an srun task")
    assert out["overrides"] == {"PYTFCOMM_PORT": "31000", "PYTFCOMM_HOST_ID": "test-host"}


def test_explain_reports_a_partial_environment(env: Env) -> None:
    out = explain({"RANK": "1", "OMPI_COMM_WORLD_RANK": "1"})
    assert out["source"] is None and "WORLD_SIZE is not" in str(out["error"])


def test_info_command_shows_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    child = dict(os.environ, **_TORCHRUN_2, PYTFCOMM_RANK="0", PYTFCOMM_SIZE="1")
    out = subprocess.run(
        [sys.executable, "-m", "pytfcomm", "info", "--json"],
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd="/",
    )
    cluster = json.loads(out.stdout)["cluster"]
    assert cluster["source"] == "PYTFCOMM"
    assert cluster["ignored"]["torchrun"]["why"] == "PYTFCOMM comes first in the order of sources"


def test_resolve_ignores_torchrun_names_it_does_not_read(env: Env) -> None:
    assert resolve(environ={"MASTER_ADDR": "h", "MASTER_PORT": "1"}).source == "single"
