"""pytfcomm.tf.pin_gpu: one process per GPU.

TF's CPU wheel sees no GPU, so the no-GPU path runs for real here; the GPU paths run in
a subprocess whose tf.config functions are replaced by fakes that list N GPUs and record
what pin_gpu asks of them (tests/workers/placement_probe.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _paths import WORKERS

tf = pytest.importorskip("tensorflow")

import pytfcomm  # noqa: E402
import pytfcomm.tf as ptf  # noqa: E402

PROBE = WORKERS / "placement_probe.py"
JOB = {"PYTFCOMM_RANK": "1", "PYTFCOMM_SIZE": "4", "PYTFCOMM_ADDR": "127.0.0.1:29500"}


def probes(*specs: tuple) -> list[dict]:
    """Run pin_gpu in one fresh process per spec, all at once (each spends seconds
    importing TensorFlow on one core); their outcomes in order.

    A spec is ``(gpus, env, call)`` or ``(gpus, env, call, fakes)``: pin_gpu(**call)
    in a process that sees ``gpus`` fake GPUs, with ``env`` on top of a clean one."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTFCOMM_", "SLURM_", "OMPI_", "PMI", "TF_CONFIG"))
    }
    procs = []
    try:
        for gpus, env, call, *fakes in specs:
            spec = {"gpus": gpus, "call": call, "fakes": fakes[0] if fakes else {}}
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(PROBE), json.dumps(spec)],
                    env={**clean, **env, "TF_CPP_MIN_LOG_LEVEL": "3"},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outs = []
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=120)
            assert proc.returncode == 0, stderr
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
        return outs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def probe(gpus: int, env: dict[str, str], call: dict, fakes: dict | None = None) -> dict:
    """Run pin_gpu(**call) in a fresh process that sees ``gpus`` fake GPUs."""
    return probes((gpus, env, call, fakes or {}))[0]


def test_without_gpus_it_returns_nothing_and_changes_nothing() -> None:
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow sees a GPU")
    before = tf.config.get_visible_devices()
    assert ptf.pin_gpu() == []
    assert ptf.pin_gpu(local_rank=3, gpus_per_rank=2) == []
    assert tf.config.get_visible_devices() == before
    assert pytfcomm.pin_gpu is ptf.pin_gpu


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpus_per_rank": 0},
        {"gpus_per_rank": -2},
        {"gpus_per_rank": 1.5},
        {"gpus_per_rank": True},
        {"local_rank": -1},
        {"local_rank": "0"},
    ],
)
def test_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(pytfcomm.InvalidArgumentError, match=r"pin_gpu: \w+ must be an integer"):
        ptf.pin_gpu(**kwargs)
    with pytest.raises(ValueError):
        ptf.pin_gpu(**kwargs)


def test_each_local_rank_gets_its_slice_with_memory_growth() -> None:
    env = {**JOB, "PYTFCOMM_LOCAL_RANK": "1", "PYTFCOMM_LOCAL_SIZE": "2"}
    out, first = probes(
        (4, env, {"gpus_per_rank": 2}),
        (4, {**JOB, "PYTFCOMM_LOCAL_RANK": "0", "PYTFCOMM_LOCAL_SIZE": "4"}, {}),
    )
    assert out["returned"] == ["GPU:2", "GPU:3"]
    assert out["set_visible"] == [[["GPU:2", "GPU:3"], "GPU"]]
    assert out["growth"] == [["GPU:2", True], ["GPU:3", True]]
    assert first["returned"] == ["GPU:0"]


def test_explicit_local_rank_single_process_and_options() -> None:
    explicit, default, no_growth, logical = probes(
        (4, {}, {"local_rank": 3}),  # a single-process job: no launcher variables
        (2, {}, {}),
        (2, {}, {"memory_growth": False}),
        # A GPU split into logical devices keeps its configuration (growth would be refused).
        (2, {}, {"local_rank": 1}, {"logical": ["GPU:1"]}),
    )
    assert explicit["set_visible"] == [[["GPU:3"], "GPU"]]
    assert default["returned"] == ["GPU:0"]
    assert no_growth["growth"] == []
    assert logical["returned"] == ["GPU:1"] and logical["growth"] == []


def test_too_few_gpus_is_a_config_error_naming_the_layout() -> None:
    env = {**JOB, "PYTFCOMM_LOCAL_RANK": "0", "PYTFCOMM_LOCAL_SIZE": "2"}
    out, unknown_size = probes((3, env, {"gpus_per_rank": 2}), (2, {}, {"local_rank": 2}))
    assert out["error"] == "ConfigError"
    for fragment in (
        "local rank 0 of local size 2",
        "gpus_per_rank=2 needs 4 GPUs",
        "TensorFlow sees 3 (",
        "/physical_device:GPU:2",
        "start fewer ranks",
    ):
        assert fragment in out["message"], out["message"]
    assert out["set_visible"] == []  # nothing changed
    assert unknown_size["error"] == "ConfigError"
    assert "local rank 2 (local size unknown) needs at least 3 GPUs" in unknown_size["message"]


def test_unknown_local_rank_is_a_config_error() -> None:
    out = probe(4, JOB, {})
    assert out["error"] == "ConfigError"
    assert "local rank is unknown" in out["message"] and "local_rank=" in out["message"]


def test_after_the_launcher_placed_the_rank_it_keeps_every_visible_gpu() -> None:
    env = {**JOB, "PYTFCOMM_LOCAL_RANK": "1", "PYTFCOMM_LOCAL_SIZE": "2"}
    env["PYTFCOMM_GPUS_PER_RANK"] = "2"
    placed, one_each = probes((2, env, {"gpus_per_rank": 2}), (2, env, {}))
    assert placed["returned"] == ["GPU:0", "GPU:1"]
    assert one_each["error"] == "ConfigError"
    assert "--gpus-per-rank 2" in one_each["message"]
    assert "gpus_per_rank=1" in one_each["message"]


def test_too_late_is_a_runtime_error_saying_what_to_do() -> None:
    out = probe(2, {}, {}, {"initialized": True})
    assert out["error"] == "RuntimeError"
    assert "already initialised" in out["message"]
    assert "right after importing TensorFlow" in out["message"]
