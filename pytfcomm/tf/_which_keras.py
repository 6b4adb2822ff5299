"""Which Keras the program uses: tf-keras under ``TF_USE_LEGACY_KERAS``, else Keras 3.

One reading of the variable for every part of pytfcomm that subclasses Keras.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

__all__ = ["keras3_module_if_loaded", "keras_module", "legacy_keras"]


def legacy_keras() -> bool:
    """Whether ``TF_USE_LEGACY_KERAS`` asks for tf-keras (``1``, ``true`` or ``yes``)."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")


def keras_module() -> ModuleType:
    """The Keras package in use: ``tf_keras`` when :func:`legacy_keras`, else ``keras``."""
    if legacy_keras():
        import tf_keras

        return tf_keras
    import keras

    return keras


def keras3_module_if_loaded(name: str) -> ModuleType | None:
    """Keras 3's module ``name`` (e.g. ``keras.src.callbacks.tensorboard``) when Keras 3 is
    already imported (``import tensorflow`` does that unless ``TF_USE_LEGACY_KERAS=1``),
    else None: what pytfcomm patches in Keras 3 never makes a program import it."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    if "keras" not in sys.modules:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:  # not Keras 3 (or no TF backend in it)
        return None
