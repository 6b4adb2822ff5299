"""The examples run as their docstrings say (under pytfcomm-run) and do what they claim."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _paths import ROOT

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")

EXAMPLES = ROOT / "examples"
LAUNCHER = Path(sys.executable).with_name("pytfcomm-run")


def _run_under_launcher(
    cwd: Path, script: str, *args: str, np_: int = 2, timeout: float = 240
) -> str:
    env = dict(os.environ, PYTFCOMM_TIMEOUT="60")
    proc = subprocess.run(
        [str(LAUNCHER), "-np", str(np_), sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_multiworker_mixed_precision(tmp_path):
    out = _run_under_launcher(tmp_path, "multiworker_mixed_precision.py", "--epochs", "2")
    results = re.findall(
        r"result: worker (\d)/2 loss ([\d.]+) test_accuracy ([\d.]+) "
        r"loss_scale (\S+) weights ([0-9a-f]{16})",
        out,
    )
    assert sorted(r[0] for r in results) == ["0", "1"], out[-3000:]
    assert len({r[4] for r in results}) == 1, f"workers' weights differ: {results}"
    assert len({r[1] for r in results}) == 1
    assert float(results[0][2]) > 0.8, f"did not learn: {results}"
    assert float(results[0][3]) >= 1.0


def test_horovod_keras_mnist_example(tmp_path):
    out = _run_under_launcher(tmp_path, "horovod/tensorflow2_keras_mnist.py", "3")
    (loss, acc) = re.findall(r"final: loss ([\d.]+) accuracy ([\d.]+)", out)[0]
    assert float(acc) > 0.8 and float(loss) < 1.0, out[-3000:]
    assert "finished gradual learning rate warmup" in out
    assert (tmp_path / "checkpoint-3.keras").exists()
    # Only the import line differs from Horovod's example.
    text = (EXAMPLES / "horovod" / "tensorflow2_keras_mnist.py").read_text()
    assert "import pytfcomm.horovod.tensorflow.keras as hvd" in text
    assert (
        "pytfcomm"
        not in text.replace("import pytfcomm.horovod.tensorflow.keras as hvd", "")[
            text.index('"""', 3) :
        ]
    )


def test_horovod_custom_loop_example(tmp_path):
    out = _run_under_launcher(tmp_path, "horovod/tensorflow2_mnist.py", "200")
    (loss,) = re.findall(r"final: loss ([\d.]+)", out)
    assert float(loss) < 1.0, out[-3000:]
    sums = re.findall(r"rank (\d) weights checksum (\S+)", out)
    assert sorted(r for r, _ in sums) == ["0", "1"] and len({s for _, s in sums}) == 1, sums


def test_horovod_synthetic_benchmark_example(tmp_path):
    out = _run_under_launcher(
        tmp_path,
        "horovod/tensorflow2_synthetic_benchmark.py",
        *("--model", "MobileNetV2", "--image-size", "32", "--batch-size", "4"),
        *("--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2"),
        "--fp16-allreduce",
        "--check-weights",
        timeout=120,
    )
    # Horovod's lines, printed once (rank 0).
    assert "Model: MobileNetV2" in out and "Number of CPUs: 2" in out, out[-3000:]
    assert len(re.findall(r"Iter #\d+: [\d.]+ img/sec per CPU", out)) == 2, out[-3000:]
    ((per, per_pm),) = re.findall(r"Img/sec per CPU: ([\d.]+) \+-([\d.]+)", out)
    ((total, total_pm),) = re.findall(r"Total img/sec on 2 CPU\(s\): ([\d.]+) \+-([\d.]+)", out)
    assert float(per) > 0 and float(total) > 0, out[-3000:]
    assert float(per_pm) >= 0 and float(total_pm) >= 0
    assert abs(float(total) - 2 * float(per)) <= 0.2  # both rounded to 0.1
    # Rank 0's broadcast and the averaged gradients left one model on both ranks.
    sums = re.findall(r"rank (\d) weights checksum (\S+)", out)
    assert sorted(r for r, _ in sums) == ["0", "1"] and len({s for _, s in sums}) == 1, sums
    # Horovod's flags, all of them.
    text = (EXAMPLES / "horovod" / "tensorflow2_synthetic_benchmark.py").read_text()
    for flag in ("--fp16-allreduce", "--model", "--batch-size", "--num-warmup-batches"):
        assert f'"{flag}"' in text
    for flag in ("--num-batches-per-iter", "--num-iters", "--no-cuda"):
        assert f'"{flag}"' in text
    assert "import pytfcomm.horovod.tensorflow as hvd" in text
