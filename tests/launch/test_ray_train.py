"""Ray Train's TensorflowTrainer runs pytfcomm untouched (docs/launching.md#ray-train).

One local Ray cluster for the module, on 127.0.0.1, in network and PID namespaces the
test makes: the only interface is loopback (Ray's servers listen on every interface),
and no Ray process outlives the run. Two Ray Train workers run
tests/workers/ray_train_workers.py: a Keras 3 fit and a tf-keras fit under
pytfcomm.MultiWorkerMirroredStrategy (Ray sets TF_USE_LEGACY_KERAS=1 in its workers)
and a Horovod-API loop; the same job then runs under pytfcomm-run, and both must train
to the same weights. Every worker must hold the same job secret, shared through Ray
Train (pytfcomm/_ray_train.py), although no one set one: on a real Ray cluster the
workers' addresses are not loopback and a job without a secret is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import ray  # requirements-dev.txt
from _paths import WORKERS

LAUNCHER = Path(sys.executable).with_name("pytfcomm-run")
_CLEAN = ("PYTFCOMM_", "SLURM_", "OMPI_", "PMI", "TF_CONFIG", "RAY_")
_ENV = {"PYTFCOMM_CONNECT_TIMEOUT": "120", "PYTFCOMM_TIMEOUT": "120"}
_DEADLINE = 540


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEAN)}
    env.update(_ENV, **extra)
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run ``argv`` in its own process group, killed with the group at the deadline."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=_DEADLINE)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        text = out[-4000:].decode(errors="replace")
        raise AssertionError(f"{argv[0]} passed {_DEADLINE} s:\n{text}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{text[-6000:]}"
    return text


def _read(out: Path) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def under_ray(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """What each worker of the Ray Train job wrote (one Ray cluster for the module)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("this test needs root and unshare(1): Ray listens on every interface")
    out = tmp_path_factory.mktemp("ray")
    os.chmod(out, 0o755)
    script = f"ip link set lo up && exec {sys.executable} {WORKERS / 'ray_train_driver.py'} {out}"
    # Own network and PID namespaces: only loopback, and every Ray process dies with it.
    namespaces = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
    _run([*namespaces, "sh", "-c", script], out, _env(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"))
    return _read(out)


def test_tensorflow_trainer_runs_pytfcomm_untouched(under_ray: list[dict], tmp_path: Path) -> None:
    got = under_ray
    assert ray.__version__  # the version the suite pins in requirements-dev.txt
    assert [g["rank"] for g in got] == [0, 1]
    assert all(g["size"] == 2 and g["replicas"] == 2 for g in got)
    assert all(g["legacy_env"] == "1" for g in got)  # Ray's setting: both Keras flavours ran
    # The job secret reached every worker through Ray Train and the communicator uses it:
    # 64 hex characters, the same on both workers.
    assert [g["secret_len"] for g in got] == [64, 64], "no job secret in the Ray Train job"
    assert got[0]["secret_sha256"] == got[1]["secret_sha256"]

    argv = [str(LAUNCHER), "-np", "2", sys.executable, str(WORKERS / "ray_train_workers.py")]
    _run([*argv, str(tmp_path)], tmp_path, _env(TF_USE_LEGACY_KERAS="1"))  # as Ray sets it
    ref = _read(tmp_path)
    assert [r["secret_len"] for r in ref] == [64, 64]  # pytfcomm-run's own secret
    for key in ("keras3", "tf_keras", "horovod"):
        for r in range(2):
            for a, b in zip(got[r][key], ref[r][key], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{key} rank {r}")
