from unittest.mock import *  # noqa: F403  (Horovod's tests import the old mock package)
