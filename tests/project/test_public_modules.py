"""Every public module declares its API in ``__all__``, and the package ships ``py.typed``
(PEP 561) and the ``_core`` stub, so type checkers read pytfcomm's annotations."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import pytfcomm

CORE_MODULES = ["pytfcomm", "pytfcomm.communicator", "pytfcomm.launcher", "pytfcomm.timeline"]
TF_MODULES = [
    "pytfcomm.tf",
    "pytfcomm.tf.backup",
    "pytfcomm.tf.callback_files",
    "pytfcomm.tf.collectives",
    "pytfcomm.tf.cross_device_ops",
    "pytfcomm.tf.distributed",
    "pytfcomm.tf.grad_accum",
    "pytfcomm.tf.keras",
    "pytfcomm.tf.placement",
    "pytfcomm.tf.strategy",
    "pytfcomm.tf.towers",
    "pytfcomm.tf.uneven_data",
]
HOROVOD_MODULES = [
    "pytfcomm.horovod._basics",
    "pytfcomm.horovod.keras",
    "pytfcomm.horovod.keras.callbacks",
    "pytfcomm.horovod.keras.elastic",
    "pytfcomm.horovod.tensorflow",
    "pytfcomm.horovod.tensorflow.compression",
    "pytfcomm.horovod.tensorflow.elastic",
    "pytfcomm.horovod.tensorflow.functions",
    "pytfcomm.horovod.tensorflow.keras",
    "pytfcomm.horovod.tensorflow.keras.callbacks",
    "pytfcomm.horovod.tensorflow.keras.elastic",
    "pytfcomm.horovod.tensorflow.mpi_ops",
    "pytfcomm.horovod.tensorflow.sync_batch_norm",
]


@pytest.mark.parametrize("name", CORE_MODULES + TF_MODULES + HOROVOD_MODULES)
def test_all_lists_only_names_the_module_has(name: str) -> None:
    module = importlib.import_module(name)
    names = module.__all__
    assert names, f"{name}.__all__ is empty"
    assert len(set(names)) == len(names), f"{name}.__all__ repeats a name"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it lacks: {missing}"


def test_typing_markers_are_installed() -> None:
    package = Path(pytfcomm.__file__).parent
    assert (package / "py.typed").is_file(), f"no py.typed in {package}"
    assert (package / "_core.pyi").is_file(), f"no _core.pyi in {package}"
