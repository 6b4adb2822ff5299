"""Which Keras the program uses: tf-keras under ``TF_USE_LEGACY_KERAS``, else Keras 3.

One reading of the variable for every part of pytfcomm that subclasses Keras.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["keras_module", "legacy_keras"]


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
