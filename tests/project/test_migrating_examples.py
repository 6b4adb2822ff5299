"""The examples of docs/migrating.md run as documented, and the TF facts the page states hold.

Each example trains a small model for a few steps on synthetic data, checks its own result
(workers bitwise equal, equal within rtol to the reference setup or to one process on the
global batch) and prints a last ``RESULT <name> ok ...`` line; it exits 1 when a check
fails. Multi-process examples run under ``pytfcomm-run -np 2`` (the venv's launcher, its
own ``--timeout``), single-process ones with logical CPU devices. Every run is bounded and
killed with its process group if it overstays; everything stays on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _paths import ROOT

EXAMPLES = ROOT / "examples" / "migrating"
DOC = ROOT / "docs" / "migrating.md"
LAUNCHER = Path(sys.executable).with_name("pytfcomm-run")
PY = sys.executable
TIMEOUT = 120  # seconds per run; the launcher's own --timeout is shorter
RESULT_RE = re.compile(r"^(?:\[(\d+)\] )?RESULT (\S+) (ok|FAILED)(.*)$", re.MULTILINE)


def _env(**extra: str) -> dict[str, str]:
    """This environment minus any job description, so a run is one process unless launched."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTFCOMM_", "SLURM_", "OMPI_", "PMI", "TF_CONFIG"))
    }
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2", PYTFCOMM_CONNECT_TIMEOUT="60", PYTFCOMM_TIMEOUT="60", **extra
    )
    return env


def _run(argv: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> str:
    """Run to completion within TIMEOUT; return stdout; fail with both streams' tails."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"{argv} ran past {TIMEOUT} s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}")
    assert proc.returncode == 0, (
        f"{argv} exited {proc.returncode}\nstdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}"
    )
    return out


def _example(name: str, *args: str) -> list[str]:
    return [PY, str(EXAMPLES / name), *args]


def _launch(np_: int, name: str, *args: str) -> list[str]:
    return [str(LAUNCHER), "-np", str(np_), "--timeout", "100", *_example(name, *args)]


def _results(out: str, name: str) -> dict[int, dict[str, str]]:
    """rank (0 without the launcher) -> the fields of its RESULT line for ``name``."""
    found: dict[int, dict[str, str]] = {}
    for rank, got, status, rest in RESULT_RE.findall(out):
        if got != name:
            continue
        assert status == "ok", f"rank {rank or 0}: RESULT {got} {status}{rest}"
        found[int(rank or 0)] = dict(kv.split("=", 1) for kv in rest.split())
    assert found, f"no RESULT {name} line in:\n{out[-3000:]}"
    return found


def _trained(fields: dict[str, str]) -> None:
    """The loss went down: the steps did train something."""
    assert float(fields["loss"]) < 0.6 * float(fields["first_loss"]), fields


def _same_on_every_worker(res: dict[int, dict[str, str]], workers: int) -> dict[str, str]:
    assert sorted(res) == list(range(workers)), res
    for fields in res.values():
        assert fields == res[0], res  # loss, checksum, ... printed identically
        assert fields["workers"] == str(workers)
    return res[0]


def test_ps_worker_tf1_becomes_graph_mode_allreduce() -> None:
    out = _run(_launch(2, "ps_worker_tf1.py", "--steps", "20"))
    fields = _same_on_every_worker(_results(out, "ps_worker_tf1"), 2)
    assert fields["steps"] == "20"
    _trained(fields)
    assert re.search(
        r"^\[0\] rank 0 checkpoint: .*model\.ckpt-20 \(global_step 20\)$", out, re.MULTILINE
    ), out[-2000:]


def test_tower_trainer_tf1_uses_pytfcomm_average_gradients() -> None:
    out = _run(_example("tower_tf1.py", "--towers", "2", "--steps", "20"))
    fields = _results(out, "tower_tf1")[0]
    assert (fields["towers"], fields["steps"]) == ("2", "20")
    _trained(fields)
    assert "pytfcomm all-reduce ops run: 20 (one per step)" in out


def test_central_storage_becomes_mirrored_with_ring_allreduce() -> None:
    out = _run(_example("central_storage.py", "--devices", "2"))
    fields = _results(out, "central_storage")[0]
    assert fields["devices"] == "2"
    _trained(fields)
    assert "pytfcomm all-reduce ops: 0 before, 8 after" in out  # 4 steps x 2 epochs


def test_parameter_server_becomes_synchronous_and_evaluator_reads_checkpoints(
    tmp_path: Path,
) -> None:
    ckpt = tmp_path / "ckpt"
    out = _run(_launch(2, "parameter_server.py", "--steps", "10", "--ckpt-dir", str(ckpt)))
    fields = _same_on_every_worker(_results(out, "parameter_server"), 2)
    _trained(fields)
    assert (ckpt / "ckpt-10.index").is_file(), sorted(p.name for p in ckpt.iterdir())
    # The sidecar: TF_CONFIG says "evaluator"; it never joins pytfcomm (init() would refuse).
    tf_config = {
        "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"], "evaluator": ["127.0.0.1:3"]},
        "task": {"type": "evaluator", "index": 0},
    }
    out = _run(
        _example("parameter_server.py", "--ckpt-dir", str(ckpt), "--eval-timeout", "1"),
        env=_env(TF_CONFIG=json.dumps(tf_config)),
    )
    evaluated = _results(out, "parameter_server_eval")[0]
    assert evaluated["checkpoints"] == "1"
    assert evaluated["eval_loss"] == fields["eval_loss"]  # the chief's final weights


def test_mirrored_and_multiworker_mirrored_move_to_pytfcomm() -> None:
    one = _results(_run(_example("mirrored_mwms.py", "--devices", "2")), "mirrored_mwms")[0]
    assert (one["mode"], one["workers"]) == ("mirrored", "1")
    _trained(one)
    out = _run(_launch(2, "mirrored_mwms.py", "--devices", "2"))
    many = _same_on_every_worker(_results(out, "mirrored_mwms"), 2)
    assert many["mode"] == "multiworker"
    assert "4 replicas in sync" in out
    # 2 workers x 2 devices and 1 process x 2 devices train on the same global batches
    # from the same weights: the same model, up to the order of float additions.
    assert float(many["loss"]) == pytest.approx(float(one["loss"]), rel=1e-4)
    assert float(many["checksum"]) == pytest.approx(float(one["checksum"]), rel=1e-4)


# What docs/migrating.md says about TensorFlow 2.21, checked where it can be without a
# cluster (nothing here starts a server or opens a port).
FACTS = r"""
import os, pathlib
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import pytfcomm
v1 = tf.compat.v1
assert tf.__version__.startswith("2.21."), tf.__version__

# TF1 ps/worker: the pieces still exist; replica_device_setter needs tf.compat.v1.device.
assert v1.train.Server is tf.distribute.Server
cluster = tf.train.ClusterSpec({"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]})
with tf.Graph().as_default():
    setter = v1.train.replica_device_setter(worker_device="/job:worker/task:0", cluster=cluster)
    try:
        with tf.device(setter):
            pass
        raise AssertionError("tf.device accepted a device function")
    except RuntimeError as exc:
        assert "does not support functions" in str(exc), exc
    with v1.device(setter):
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", [2])
    assert w.device == "/job:ps/task:0", w.device
    sync = v1.train.SyncReplicasOptimizer(v1.train.GradientDescentOptimizer(0.1),
                                          replicas_to_aggregate=2, total_num_replicas=2)
    sync.minimize(tf.reduce_sum(w * w), global_step=step)
    sync.make_session_run_hook(is_chief=True)
try:
    pytfcomm.keras.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.1))
    raise AssertionError("DistributedOptimizer wrapped a tf.compat.v1 optimizer")
except pytfcomm.InvalidArgumentError:
    pass

# CentralStorageStrategy: experimental only; variables on one device, ReductionToOneDevice.
assert not hasattr(tf.distribute, "CentralStorageStrategy")
css = tf.distribute.experimental.CentralStorageStrategy(
    compute_devices=["/cpu:0", "/cpu:1"], parameter_device="/cpu:0")
assert css.num_replicas_in_sync == 2
assert type(css.extended._cross_device_ops).__name__ == "ReductionToOneDevice"

# ParameterServerStrategy: the same class in both places; a cluster needs ps and workers.
assert tf.distribute.ParameterServerStrategy is tf.distribute.experimental.ParameterServerStrategy
assert tf.distribute.coordinator.ClusterCoordinator
def pss_error(jobs):
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(jobs), task_type="chief", task_id=0)
    try:
        tf.distribute.ParameterServerStrategy(resolver)
    except ValueError as exc:
        return str(exc)
assert pss_error({"chief": ["c:1"], "worker": ["w:1"]}) == "There must be at least one ps."
assert pss_error({"chief": ["c:1"], "ps": ["p:1"]}) == "There must be at least one worker."
# Keras 3 has no ClusterCoordinator code; tf-keras' fit drives one, and it has a sidecar.
src = pathlib.Path(keras.__file__).parent
assert not [p for p in src.rglob("*.py") if "ClusterCoordinator" in p.read_text(errors="ignore")]
try:
    import tf_keras
except ImportError:
    print("tf-keras is not installed: its facts are not checked")
else:
    training = pathlib.Path(tf_keras.__file__).parent / "src" / "engine" / "training.py"
    assert "ClusterCoordinator" in training.read_text()
    assert tf_keras.utils.SidecarEvaluator

# MirroredStrategy's default on CPUs: TF's collective ops (RING).
mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert type(mirrored.extended._cross_device_ops).__name__ == "CollectiveAllReduce"
print("FACTS ok")
"""


def test_tf_facts_the_page_states(tmp_path: Path) -> None:
    # Not from the checkout: `python -c` there would import its unbuilt pytfcomm/.
    assert "FACTS ok" in _run([PY, "-c", FACTS], cwd=tmp_path)


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for the Markdown headings of ``text`` (code blocks skipped)."""
    anchors, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} +(.+?) *$", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-"))
    return anchors


def test_page_names_every_example_and_its_links_resolve() -> None:
    text = DOC.read_text()
    for path in sorted(EXAMPLES.glob("*.py")):
        assert f"examples/migrating/{path.name}" in text, path.name
    anchors = _anchors(text)
    assert {"no-parameter-servers", "no-evaluator-task"} <= anchors  # the errors point there
    for target, anchor in re.findall(r"\]\(([\w./-]*)#([\w-]+)\)", text):
        other = _anchors((DOC.parent / target).read_text()) if target else anchors
        assert anchor in other, f"link to {target}#{anchor}: no such heading"
