"""``pytfcomm.horovod.keras.callbacks``: the classes of ``horovod.tensorflow.keras.callbacks``."""

from __future__ import annotations

from ..tensorflow.keras.callbacks import *  # noqa: F403
from ..tensorflow.keras.callbacks import __all__  # noqa: F401
