"""``import pytfcomm.horovod.keras as hvd``: Horovod's ``horovod.keras`` API.

Keras is Keras 3 (or tf-keras) on TensorFlow here, so this is
:mod:`pytfcomm.horovod.tensorflow.keras` under Horovod's other name.
"""

from __future__ import annotations

from ..tensorflow.keras import *  # noqa: F403
from ..tensorflow.keras import __all__, callbacks, elastic  # noqa: F401
