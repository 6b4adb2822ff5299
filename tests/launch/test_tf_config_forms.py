"""The cluster variables Kubernetes operators, Vertex AI and Ray Train write, exactly as
they write them, give each process the right rank and one rendezvous address
(pytfcomm/_cluster/tf_config.py; docs/launching.md#kubernetes-vertex-ai-and-ray).

Forms: Kubeflow TFJob (``chief`` + ``worker`` + ``evaluator``, ``"environment":
"cloud"``), AI Platform / Vertex AI TF_CONFIG (``master`` + ``worker``), Vertex AI's
CLUSTER_SPEC alone (``workerpool0``/``workerpool1``), Ray Train (``worker`` only). The
chief (or master, or workerpool0) is rank 0, then the workers in order.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _harness import run_ranks

from pytfcomm._cluster import resolve
from pytfcomm._launch.ports import free_port
from pytfcomm._secret import secret_file
from pytfcomm.errors import ConfigError

_CLEAN = ("PYTFCOMM_", "SLURM_", "OMPI_", "PMI", "TF_CONFIG", "CLUSTER_SPEC", "MPI_LOCAL")


def _tf_ports(n: int) -> tuple[list[int], int]:
    """n TF ports for 127.0.0.1 such that pytfcomm's derived port (rank 0's + 1000)
    is free too: what the job will listen on without PYTFCOMM_ADDR or PYTFCOMM_PORT."""
    for _ in range(50):
        rendezvous = free_port()
        if rendezvous - 1000 >= 1024:
            others = [free_port() for _ in range(n - 1)]
            if rendezvous not in others and rendezvous - 1000 not in others:
                return [rendezvous - 1000, *others], rendezvous
    raise AssertionError("no free port above 2024")


def _tfjob(ports: list[int]) -> tuple[list[dict[str, str]], list[int]]:
    """TFJob: one chief, two workers and an evaluator (which never starts pytfcomm);
    the processes are started worker 1, chief, worker 0."""
    hosts = [f"127.0.0.1:{p}" for p in ports]
    cluster = {"chief": hosts[:1], "worker": hosts[1:3], "evaluator": hosts[3:]}
    tasks = [("worker", 1), ("chief", 0), ("worker", 0)]
    envs = [
        {
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": t, "index": i}, "environment": "cloud"}
            )
        }
        for t, i in tasks
    ]
    return envs, [2, 0, 1]


def _vertex_master(ports: list[int]) -> tuple[list[dict[str, str]], list[int]]:
    """AI Platform / Vertex AI TF_CONFIG with ``master``, plus the CLUSTER_SPEC beside it."""
    hosts = [f"localhost:{p}" for p in ports]
    cluster = {"master": hosts[:1], "worker": hosts[1:2]}
    spec = {"workerpool0": hosts[:1], "workerpool1": hosts[1:2]}
    envs = []
    for t, pool, i in [("worker", "workerpool1", 0), ("master", "workerpool0", 0)]:
        job = {"python_module": "trainer.task"}
        envs.append(
            {
                "TF_CONFIG": json.dumps(
                    {
                        "cluster": cluster,
                        "task": {"type": t, "index": i, "trial": ""},
                        "environment": "cloud",
                        "job": job,
                    }
                ),
                "CLUSTER_SPEC": json.dumps(
                    {
                        "cluster": spec,
                        "environment": "cloud",
                        "task": {"type": pool, "index": i},
                        "job": json.dumps(job),
                    }
                ),
            }
        )
    return envs, [1, 0]


def _vertex_cluster_spec(ports: list[int]) -> tuple[list[dict[str, str]], list[int]]:
    """Vertex AI's CLUSTER_SPEC alone (a custom container that reads no TF_CONFIG)."""
    hosts = [f"127.0.0.1:{p}" for p in ports]
    spec = {"workerpool0": hosts[:1], "workerpool1": hosts[1:3]}
    tasks = [("workerpool1", 1), ("workerpool1", 0), ("workerpool0", 0)]
    envs = [
        {
            "CLUSTER_SPEC": json.dumps(
                {
                    "cluster": spec,
                    "environment": "cloud",
                    "task": {"type": t, "index": i},
                    "job": "{}",
                }
            )
        }
        for t, i in tasks
    ]
    return envs, [2, 1, 0]


def _ray(ports: list[int]) -> tuple[list[dict[str, str]], list[int]]:
    """Ray Train: workers only, in world-rank order."""
    hosts = [f"127.0.0.1:{p}" for p in ports]
    envs = [
        {
            "TF_CONFIG": json.dumps(
                {"cluster": {"worker": hosts[:2]}, "task": {"type": "worker", "index": i}}
            )
        }
        for i in (1, 0)
    ]
    return envs, [1, 0]


FORMS: dict[str, tuple[Callable[[list[int]], Any], int]] = {
    "tfjob": (_tfjob, 4),
    "vertex-master": (_vertex_master, 2),
    "vertex-cluster-spec": (_vertex_cluster_spec, 3),
    "ray": (_ray, 2),
}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(_CLEAN)}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_form_ranks_and_allreduce(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, nports = FORMS[form]
    ports, rendezvous = _tf_ports(nports)
    envs, ranks = make(ports)
    for name in list(os.environ):
        if name.startswith(_CLEAN):
            monkeypatch.delenv(name)
    for env, rank in zip(envs, ranks, strict=True):  # in-process: rank and address
        spec = resolve(environ={**_clean_env(), **env})
        assert (spec.rank, spec.size) == (rank, len(envs)), form
        assert spec.rendezvous[1] == rendezvous, form
    results = run_ranks(
        len(envs), "tf_config_forms_workers:allreduce", per_rank_env=envs, timeout=120
    )
    n = len(envs)
    assert [r["rank"] for r in results] == ranks
    assert all(r["size"] == n and r["total"] == n * (n + 1) // 2 for r in results)


def test_tfjob_keras_fit() -> None:
    """A TFJob's chief and worker fit a Keras 3 model to the same weights."""
    ports, _ = _tf_ports(2)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    cluster = {"chief": hosts[:1], "worker": hosts[1:]}
    envs = [
        {
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": t, "index": 0}, "environment": "cloud"}
            )
        }
        for t in ("chief", "worker")
    ]
    results = run_ranks(2, "tf_config_forms_workers:keras_fit", per_rank_env=envs, timeout=300)
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["replicas"] == 2 for r in results)
    for a, b in zip(results[0]["weights"], results[1]["weights"], strict=True):
        np.testing.assert_array_equal(a, b)


def _spec(**variables: str):
    return resolve(environ={"PYTFCOMM_HOST_ID": "test-host", **variables})


def _refused(fragments: tuple[str, ...], **variables: str) -> str:
    with pytest.raises(ConfigError) as info:
        _spec(**variables)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def _tf(cluster: dict, ttype: str, index: int = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": ttype, "index": index}})


def test_tfjob_port_2222_derives_3222_on_the_chief() -> None:
    cluster = {
        "chief": ["job-chief-0.ns.svc:2222"],
        "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"],
    }
    spec = _spec(TF_CONFIG=_tf(cluster, "worker", 1))
    assert (spec.rank, spec.size, spec.addr) == (2, 3, "job-chief-0.ns.svc:3222")
    assert spec.bind_host == "job-worker-1.ns.svc"


def test_tf_config_wins_over_cluster_spec() -> None:
    spec = _spec(
        TF_CONFIG=_tf({"worker": ["a:2222", "b:2222"]}, "worker", 1),
        CLUSTER_SPEC=_tf({"workerpool0": ["x:2222"], "workerpool1": ["y:2222"]}, "workerpool0"),
    )
    assert (spec.rank, spec.addr, spec.source) == (1, "a:3222", "TF_CONFIG")


@pytest.mark.parametrize(
    ("variables", "fragments"),
    [
        (
            {"TF_CONFIG": _tf({"chief": ["a:1"], "master": ["b:1"], "worker": ["c:1"]}, "chief")},
            ('both "chief"', '"master"', "keep one"),
        ),
        (
            {"CLUSTER_SPEC": _tf({"workerpool0": ["a:1"], "workerpool2": ["p:1"]}, "workerpool0")},
            ("CLUSTER_SPEC", '"workerpool2" (parameter server)', "docs/migrating.md"),
        ),
        (
            {"CLUSTER_SPEC": _tf({"workerpool0": ["a:1"], "workerpool3": ["e:1"]}, "workerpool3")},
            ("CLUSTER_SPEC task", "is an evaluator", "must not initialise pytfcomm"),
        ),
        (
            {"CLUSTER_SPEC": _tf({"workerpool0": ["a:1"], "pool": ["e:1"]}, "workerpool0")},
            ("CLUSTER_SPEC cluster has unsupported task type(s) 'pool'", '"workerpool1" (worker)'),
        ),
        ({"CLUSTER_SPEC": "{oops"}, ("CLUSTER_SPEC is not valid JSON", "Example: CLUSTER_SPEC=")),
    ],
)
def test_forms_refused_clearly(variables: dict[str, str], fragments: tuple[str, ...]) -> None:
    _refused(fragments, **variables)


def test_vertex_evaluator_listed_but_not_counted() -> None:
    spec = _spec(
        CLUSTER_SPEC=_tf(
            {"workerpool0": ["c:2222"], "workerpool1": ["w:2222"], "workerpool3": ["e:2222"]},
            "workerpool1",
        )
    )
    assert (spec.rank, spec.size, spec.addr, spec.source) == (1, 2, "c:3222", "CLUSTER_SPEC")


SECRET = "0123456789abcdef" * 4


def _secret_volume(root: Path, mode: int) -> Path:
    """The layout the kubelet writes for a Secret volume with one key ``secret``:
    ``root`` (mode 1777) / ``secret -> ..data/secret``, ``..data -> ..<timestamp>``,
    the file itself in ``..<timestamp>/`` with the volume's ``defaultMode``."""
    root.mkdir()
    stamp = root / "..2026_01_02_03_04_05.123456789"
    stamp.mkdir()
    (stamp / "secret").write_text(SECRET)
    os.chmod(stamp / "secret", mode)
    os.chmod(stamp, 0o755)
    (root / "..data").symlink_to(stamp.name)
    (root / "secret").symlink_to("..data/secret")
    os.chmod(root, 0o1777)
    return root / "secret"


def test_kubernetes_secret_volume_mode_0400(tmp_path: Path) -> None:
    """The documented recipe (docs/launching.md#the-job-secret-in-a-pod): a Secret volume
    with defaultMode 0400, read through its ..data links, gives every rank the secret."""
    path = _secret_volume(tmp_path / "pytfcomm", 0o400)
    ports, _ = _tf_ports(2)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    envs = [
        {
            "TF_CONFIG": json.dumps(
                {
                    "cluster": {"chief": hosts[:1], "worker": hosts[1:]},
                    "task": {"type": t, "index": 0},
                    "environment": "cloud",
                }
            ),
            "PYTFCOMM_SECRET_FILE": str(path),
        }
        for t in ("chief", "worker")
    ]
    results = run_ranks(2, "tf_config_forms_workers:allreduce", per_rank_env=envs, timeout=120)
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    assert [r["secret_sha256"] for r in results] == [digest, digest]


def test_kubernetes_secret_volume_default_mode_refused(tmp_path: Path) -> None:
    """Kubernetes' default 0644 lets every user of the pod read the secret: refused,
    saying which mode passes and the alternative."""
    path = _secret_volume(tmp_path / "pytfcomm", 0o644)
    with pytest.raises(ConfigError) as info:
        secret_file(str(path))
    message = str(info.value)
    for fragment in ("mode 0644", "defaultMode: 0400", "secretKeyRef"):
        assert fragment in message, message
