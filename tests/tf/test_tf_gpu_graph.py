"""How pytfcomm.tf builds GPU all-reduces, checked on graphs that are traced, never run.

With an op library that has GPU kernels, replicas on distinct GPUs get one op
per GPU (a group that NCCL reduces together); the members must not be
chained to each other (they wait for each other: a chain deadlocks), while
successive collectives stay ordered for the other processes. Tracing needs no
GPU (placement happens at run time), so this runs everywhere; the library's
GPU-kernel flag is patched on, since the CPU build here has none. Running
the kernels is tests/gpu/test_tf_gpu.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from _paths import ROOT

pytest.importorskip("tensorflow")
from tf_setup import tf_with_devices

tf = tf_with_devices()
import pytfcomm.tf as ptf  # noqa: E402
from pytfcomm.tf import _ops  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GPUS = [f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(2)]
SPEC = tf.TensorSpec([4], tf.float32)


@pytest.fixture
def gpu_kernels(monkeypatch):
    monkeypatch.setattr(_ops, "has_gpu_kernels", lambda: True)


def _allreduces(graph):
    return [op for op in graph.get_operations() if op.type == "PytfcommAllReduce"]


def _trace(fn, n_args=2):
    return tf.function(fn).get_concrete_function(*[SPEC] * n_args).graph


def test_gpu_replicas_get_one_op_per_gpu(gpu_kernels):
    def step(a, b):
        out = ptf.allreduce_replicas([[a, 2 * a], [b, 2 * b]], "mean", devices=GPUS)
        return [t for r in out for t in r]

    ops = _allreduces(_trace(step))
    assert len(ops) == 2
    assert [op.get_attr("group_rank") for op in ops] == [0, 1]
    assert {op.get_attr("group_size") for op in ops} == {2}
    assert len({op.get_attr("group_key") for op in ops}) == 1
    assert {op.get_attr("num_devices") for op in ops} == {1}
    assert [op.device for op in ops] == GPUS
    assert [len(op.inputs) for op in ops] == [2, 2]
    # tf.function's automatic control dependencies must not chain the members.
    assert ops[0] not in ops[1].control_inputs and ops[1] not in ops[0].control_inputs


def test_cpu_replicas_keep_one_op(gpu_kernels):
    cpus = ["/device:CPU:0", "/device:CPU:1"]
    ops = _allreduces(_trace(lambda a, b: ptf.allreduce_replicas([[a], [b]], devices=cpus)))
    assert len(ops) == 1
    assert ops[0].get_attr("num_devices") == 2 and ops[0].get_attr("group_size") == 1


def test_replicas_sharing_a_gpu_run_on_the_host(gpu_kernels):
    # Not a group (one GPU twice): the one-op form, which the GPU kernel refuses, goes to the CPU.
    same = [GPUS[0], GPUS[0]]
    ops = _allreduces(_trace(lambda a, b: ptf.allreduce_replicas([[a], [b]], devices=same)))
    assert len(ops) == 1 and ops[0].get_attr("num_devices") == 2
    assert tf.DeviceSpec.from_string(ops[0].device).device_type == "CPU"


def test_gradient_of_a_group_is_a_group(gpu_kernels):
    def step(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            out = ptf.allreduce_replicas([[a], [b]], "sum", devices=GPUS)
            loss = tf.reduce_sum(out[0][0] * 3.0) + tf.reduce_sum(out[1][0])
        return tape.gradient(loss, [a, b])

    ops = _allreduces(_trace(step))
    assert len(ops) == 4
    fwd = {op.get_attr("group_key") for op in ops[:2]}
    grad = {op.get_attr("group_key") for op in ops[2:]}
    assert len(fwd) == 1 and len(grad) == 1 and fwd != grad
    assert sorted(op.get_attr("group_rank") for op in ops[2:]) == [0, 1]
    assert {op.get_attr("group_size") for op in ops[2:]} == {2}
    assert sorted(op.device for op in ops[2:]) == GPUS


def test_groups_are_ordered_for_other_processes(gpu_kernels):
    # A stand-in communicator of 2 processes: tracing only reads its handle.
    comm = SimpleNamespace(size=2, rank=0, closed=False, native_handle=424242)

    def step(a, b):
        first = ptf.allreduce_replicas([[a], [b]], devices=GPUS, communicator=comm)
        second = ptf.allreduce_replicas([[a], [b]], devices=GPUS, communicator=comm)
        return [first[0][0], second[1][0]]

    ops = _allreduces(_trace(step))
    g1, g2 = ops[:2], ops[2:]
    assert g1[0] not in g1[1].control_inputs and g1[1] not in g1[0].control_inputs
    assert g2[0] not in g2[1].control_inputs and g2[1] not in g2[0].control_inputs
    for member in g2:
        assert set(g1) <= set(member.control_inputs), member.control_inputs


def test_only_one_source_includes_tf_internals():
    # XLA/TSL headers move between TF releases (what broke Horovod): one small file may use them.

    tf_dir = ROOT / "csrc" / "tf"
    users = sorted(
        f.name
        for f in [*tf_dir.glob("*.cc"), *tf_dir.glob("*.h")]
        if any(
            line.startswith(('#include "xla/', '#include "tsl/', '#include "third_party/'))
            for line in f.read_text().splitlines()
        )
    )
    assert users == ["tf_gpu_stream.cc"], users


def test_cpu_build_reports_no_gpu_kernels():
    assert ptf.has_gpu_kernels() is False
    r = subprocess.run(
        [sys.executable, "-m", "pytfcomm", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
        check=True,
    )
    tf_ops = json.loads(r.stdout)["tf_ops"]
    assert tf_ops["gpu_kernels"] is False, tf_ops
