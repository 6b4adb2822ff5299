"""The TF op library with GPU kernels compiles, links and loads here, without a GPU.

A CUDA TensorFlow gets these kernels by default (PYTFCOMM_TF_GPU=AUTO); here
the installed CPU wheel stands in for it (PYTFCOMM_TF_GPU=ON): the kernels
need TF's framework headers plus xla/stream_executor/stream.h, which every
TF 2.21 wheel ships, and no symbol that only a CUDA TF exports. The core is
the CUDA variant (nvcc, nccl.h from the nvidia-nccl wheel): the session's
one (tests/conftest.py ``cuda_build``, shared with tests/builds/test_cuda_build.py
and tests/gpu), here with the op library built too.

Checked: the build; no CUDA library is DT_NEEDED and every symbol resolves
against libtensorflow_framework.so.2 and libpytfcomm_core.so; in the CPU TF's
kernel registry the three ops have CPU and GPU kernels; pytfcomm.tf loads this
library, says it has GPU kernels, and its CPU kernels still compute;
`python -m pytfcomm info` reports it. Not checked: running the GPU kernels
(tests/gpu/test_tf_gpu.py, on a machine with a GPU and a CUDA TensorFlow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

# The first test also builds the op library (1-3 minutes on 2 cores).
pytestmark = pytest.mark.timeout(900)
OPS = ("PytfcommAllReduce", "PytfcommBroadcast", "PytfcommAllGather")


@pytest.fixture(scope="module")
def build(cuda_configure: tuple[Path, str], cuda_build: Path) -> Path:
    """The session's CUDA build with _tf_ops (GPU kernels) built too; the build directory."""
    from _gpu_builds import build_targets

    _, out = cuda_configure
    assert "the TF op library gets GPU kernels" in out, out[-3000:]
    build_targets(cuda_build, "_tf_ops")
    return cuda_build


@pytest.fixture(scope="module")
def package(build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pytfcomm package made of this checkout's Python files and the libraries just built."""
    libs = [
        *build.glob("_core*.so"),
        build / "libpytfcomm_core.so",
        build / "_tf_ops.so",
        build / "_tf_build_info.py",
    ]
    from _gpu_builds import make_package

    return make_package(tmp_path_factory.mktemp("tf-gpu-pkg"), libs)


def _run(package: Path, code: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=str(package),
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTFCOMM_CUDA_DRIVER="/nonexistent/libcuda.so.1",
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=package,
        env=env,
    )


def test_links_no_cuda_library_and_resolves_every_symbol(build: Path) -> None:
    lib = build / "_tf_ops.so"
    out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True)
    needed = [
        line.split("[")[-1].rstrip("]") for line in out.stdout.splitlines() if "(NEEDED)" in line
    ]
    assert "libtensorflow_framework.so.2" in needed and "libpytfcomm_core.so" in needed, needed
    assert not [n for n in needed if n.startswith(("libcuda", "libcudart", "libnccl"))], needed
    import tensorflow as tf

    env = dict(os.environ, LD_LIBRARY_PATH=f"{tf.sysconfig.get_lib()}:{build}")
    r = subprocess.run(["ldd", "-r", str(lib)], capture_output=True, text=True, env=env)
    undefined = [line for line in (r.stdout + r.stderr).splitlines() if "undefined" in line]
    assert r.returncode == 0 and not undefined, undefined[:20] or r.stderr


def test_gpu_kernels_register_and_cpu_kernels_still_compute(package: Path) -> None:
    code = f"""
import json
import tensorflow as tf
from tensorflow.python.framework import kernels
import pytfcomm.tf as ptf
res = {{"gpu_kernels": ptf.has_gpu_kernels(), "path": str(ptf.library_path())}}
registered = kernels.get_registered_kernels_for_op
res["devices"] = {{op: sorted(k.device_type for k in registered(op).kernel) for op in {OPS!r}}}
a, b = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
res["sum"] = [t.numpy().tolist() for t in ptf.allreduce([a, b])]
print(json.dumps(res))
"""
    r = _run(package, code)
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["gpu_kernels"] is True, res
    assert res["path"].startswith(str(package)), res
    assert res["devices"] == {op: ["CPU", "GPU"] for op in OPS}, res
    assert res["sum"] == [[4.0, 6.0], [4.0, 6.0]], res


def test_info_reports_gpu_kernels(package: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "pytfcomm", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=package,
        env=dict(os.environ, PYTHONPATH=str(package)),
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["tf_ops"] == {
        "library": "prebuilt",
        "built_against": data["tensorflow"],
        "gpu_kernels": True,
    }, data["tf_ops"]
    assert data["cuda"] is True
