"""Horovod's ``horovod.tensorflow.util``: the helpers its tests and some user code
reach as ``hvd.util.*`` (and ``hvd._executing_eagerly``, ``hvd.gpu_available``)."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["gpu_available", "refs_to_vars", "vars_to_refs"]

_TF_NAMES = ("tensorflow", "keras", "tensorflow.keras")


def _executing_eagerly() -> bool:
    """Whether TF runs eagerly here (False inside ``tf.function`` and TF1 graphs)."""
    return tf.executing_eagerly()


def gpu_available(ext_base_name: str, verbose: bool = False) -> bool:
    """Whether the framework ``ext_base_name`` ("tensorflow", "keras") has a GPU here.

    As Horovod's: True only where TF sees a GPU. pytfcomm has no extensions for
    other frameworks (PyTorch, MXNet), so for them it is False.
    """
    if ext_base_name.split(".")[-1] not in {n.split(".")[-1] for n in _TF_NAMES}:
        return False
    return bool(tf.config.list_physical_devices("GPU"))


def vars_to_refs(vars: Any) -> Any:
    """Horovod's helper: variables -> hashable references (``v.ref()``), nested lists too."""
    if isinstance(vars, list):
        return tuple(vars_to_refs(v) for v in vars)
    return vars.ref()


def refs_to_vars(refs: Any) -> Any:
    """The inverse of :func:`vars_to_refs`."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
