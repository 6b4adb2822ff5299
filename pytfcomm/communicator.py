"""The NumPy-facing communicator: ``pytfcomm.init()`` and its collectives.

This module is the public home of those names; the code lives by job in
``_comm`` (the :class:`Communicator` class), ``_args`` (argument checks),
``_secret`` (the job secret) and ``_init`` (joining a job).
"""

from __future__ import annotations

# shape_tag and last_communicator stay importable from here, outside __all__.
from ._comm import Communicator
from ._comm import shape_tag as shape_tag
from ._init import default_communicator, init
from ._init import last_communicator as last_communicator

__all__ = ["Communicator", "default_communicator", "init"]
