"""Ranks that report how they were started (tests/project/test_warm_harness.py; not a test module).

The module names tensorflow, so tests/_warm.py forks its ranks from the zygote.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import time
import weakref
from pathlib import Path


class _Node:
    """An object to make a reference cycle of."""

    def __init__(self) -> None:
        self.me = self


def _collects_cycles() -> bool:
    """Whether the cyclic collector is on and frees a cycle made here (the zygote
    freezes only what TF's import left, tests/_zygote.py)."""
    node = _Node()
    ref = weakref.ref(node)
    del node
    gc.collect()
    return gc.isenabled() and ref() is None


def describe(rank: int, size: int, addr: str, marker_dir: str) -> dict:
    """What a cold ``python _rank_entry.py`` rank would also see, and whether TF was loaded."""
    import numpy as np

    preloaded = "tensorflow" in sys.modules
    print(f"rank {rank} says hello", flush=True)
    atexit.register(lambda: (Path(marker_dir) / f"atexit{rank}").write_text("ran"))
    return {
        "preloaded": preloaded,
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "pgid": os.getpgid(0),
        "cwd": os.getcwd(),
        "argv": sys.argv[1:5],
        "env": {k: os.environ.get(k) for k in ("PYTFCOMM_TIMEOUT", "PYTEST_CURRENT_TEST")},
        "random": np.random.rand(4).tolist(),
        "stdin": os.read(0, 10),
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "collects": _collects_cycles(),
        "keras": _keras_of_tf(),
    }


def _keras_of_tf() -> str:
    """Which Keras tf.keras is (TF_USE_LEGACY_KERAS at import decides: tf-keras or Keras 3)."""
    import tensorflow as tf

    return str(tf.keras.layers.Dense.__module__)


def sleep(rank: int, size: int, addr: str, seconds: float) -> None:
    time.sleep(seconds)


def exit_hard(rank: int, size: int, addr: str, code: int) -> None:
    sys.stdout.flush()
    os._exit(code)
