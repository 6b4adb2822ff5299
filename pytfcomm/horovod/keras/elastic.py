"""``pytfcomm.horovod.keras.elastic``: not supported (``pytfcomm.horovod.tensorflow.elastic``)."""

from __future__ import annotations

from ..tensorflow.keras.elastic import *  # noqa: F403
from ..tensorflow.keras.elastic import __all__  # noqa: F401
