"""Loading pytfcomm's TensorFlow op library, and the TF-version check.

The check runs when :mod:`pytfcomm.tf` is imported (it only compares version
strings); the library itself is loaded on first use. ``PYTFCOMM_TF_BUILD``
chooses where the library comes from:

* ``auto`` (default): the library built with the wheel when TensorFlow was
  present at build time, else one compiled on first use (``_build.py``);
* ``always``: always compile into the cache (for testing the fallback);
* ``never``: never compile; fail if no prebuilt library fits.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import __version__
from ..errors import ConfigError, InvalidArgumentError

PACKAGE = Path(__file__).resolve().parent.parent
PREBUILT = PACKAGE / "_tf_ops.so"

COUNTERS = (
    "allreduce_ops",
    "broadcast_ops",
    "allgather_ops",
    "reduced_bytes",
    "cross_worker_ops",
    "fused_packs",
    "in_place_inputs",
    "output_cache_hits",
    "output_cache_misses",
    "output_cache_idle_bytes",
)


class TFVersionMismatchError(ConfigError, ImportError):
    """pytfcomm's op library was built against another TensorFlow than the one running."""


def _build_info() -> tuple[str, str]:
    try:
        from .. import _tf_build_info as info
    except ImportError:  # built without cmake/tensorflow.cmake
        return "", ""
    return info.TF_VERSION, info.TF_GIT_VERSION


def _mode() -> str:
    mode = os.environ.get("PYTFCOMM_TF_BUILD", "auto").lower()
    if mode not in ("auto", "always", "never"):
        raise ConfigError(f"PYTFCOMM_TF_BUILD must be auto, always or never, got {mode!r}")
    return mode


def check_tf_version() -> None:
    """Raise TFVersionMismatchError if the prebuilt library does not fit this TF."""
    import tensorflow as tf

    built, built_git = _build_info()
    if not built or _mode() == "always":
        return  # compiled on first use, for exactly this TF
    if built != tf.__version__ or (built_git and built_git != tf.__git_version__):
        raise TFVersionMismatchError(
            f"pytfcomm {__version__} was built against TensorFlow {built} ({built_git}) but "
            f"TensorFlow {tf.__version__} ({tf.__git_version__}) is installed; a TF op library "
            "only works with the TF it was compiled for.\nFix: rebuild pytfcomm against this "
            "TensorFlow: pip install --no-build-isolation --force-reinstall --no-deps pytfcomm "
            "(from its source), or set PYTFCOMM_TF_BUILD=always to compile the ops on first "
            "use into ~/.cache/pytfcomm."
        )


_lock = threading.Lock()


@functools.cache
def _library_path() -> Path:
    import tensorflow as tf

    built, _ = _build_info()
    mode = _mode()
    if mode != "always" and built and PREBUILT.exists():
        check_tf_version()
        return PREBUILT
    if mode == "never":
        raise ConfigError(
            "pytfcomm was built without TensorFlow and PYTFCOMM_TF_BUILD=never forbids "
            "compiling the op library; unset it or reinstall with "
            "pip install --no-build-isolation pytfcomm"
        )
    from ._build import build_op_library

    return build_op_library(tf.__version__, __version__)


@functools.cache
def _load() -> tuple[ModuleType, ctypes.CDLL]:
    import tensorflow as tf

    path = _library_path()
    module = tf.load_op_library(str(path))
    clib = ctypes.CDLL(str(path))  # the same handle; for the C entry points
    clib.pytfcomm_tf_counter.restype = ctypes.c_int64
    clib.pytfcomm_tf_counter.argtypes = [ctypes.c_int]
    clib.pytfcomm_tf_compiled_version.restype = ctypes.c_char_p
    if hasattr(clib, "pytfcomm_tf_gpu_kernels"):
        clib.pytfcomm_tf_gpu_kernels.restype = ctypes.c_int
    _watch_sigint()
    return module, clib


def _watch_sigint() -> None:
    """Let Ctrl-C stop the collectives TF ops wait for (docs/reliability.md): their caller
    waits inside TensorFlow, where Python runs no signal handler. Only while SIGINT
    raises KeyboardInterrupt: a program's own SIGINT handler is left as it is."""
    import signal

    from .. import _core

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        _core.watch_sigint()


class _KeyedOps:
    """The generated op wrappers, each given the ``instance_key`` of its call site.

    Across processes an op's collectives are matched by that key (see
    ``_ordering.instance_key``), never by the order TF runs ops in; every op
    built through here gets one, so no call site can forget it.
    """

    _KEYED = (
        "pytfcomm_all_reduce",
        "pytfcomm_broadcast",
        "pytfcomm_all_gather",
        "pytfcomm_reduce_scatter",
        "pytfcomm_alltoall",
    )

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._module, name)
        if name not in self._KEYED:
            return fn
        from ._ordering import instance_key

        def keyed(*args: Any, **kwargs: Any) -> Any:
            _refuse_under_xla(name)
            if kwargs.get("comm_handle"):
                kwargs.setdefault("instance_key", instance_key())
            return fn(*args, **kwargs)

        return keyed


def _refuse_under_xla(name: str) -> None:
    """A clear error, at trace time, for an op that XLA would refuse (no XLA kernel)."""
    from tensorflow.python.framework import ops as tf_ops
    from tensorflow.python.ops import control_flow_util

    if not control_flow_util.GraphOrParentsInXlaContext(tf_ops.get_default_graph()):
        return
    op = "".join(part.title() for part in name.split("_"))
    raise InvalidArgumentError(
        f"pytfcomm's {op} cannot run inside a function compiled with XLA (jit_compile=True "
        "on a tf.function, or Keras' model.compile(jit_compile=True)): pytfcomm's ops have "
        "no XLA kernel. Compile that function without XLA (Keras: "
        "model.compile(jit_compile=False)), or keep the collective outside it: jit-compile "
        "only the computation that needs none (e.g. the gradients) and reduce or apply "
        "them in a function without jit_compile. (A tf.distribute strategy with one "
        "replica in one process emits no collective and runs under XLA.) "
        "docs/tensorflow.md#xla"
    )


def ops() -> Any:
    """The generated op wrappers (``pytfcomm_all_reduce`` and friends), keyed."""
    with _lock:
        return _KeyedOps(_load()[0])


def library_path() -> Path:
    """The op library this process uses (loading it if needed)."""
    with _lock:
        _load()
        return _library_path()


def counters() -> dict[str, int]:
    """The engine's counters: how many pytfcomm ops ran and how much they reduced."""
    with _lock:
        clib = _load()[1]
    return {name: int(clib.pytfcomm_tf_counter(i)) for i, name in enumerate(COUNTERS)}


def has_gpu_kernels() -> bool:
    """Whether the op library this process uses has GPU kernels (loading it if needed).

    They are built when pytfcomm is built against a CUDA TensorFlow with
    ``PYTFCOMM_WITH_CUDA=ON`` (docs/gpu.md); without them, ops placed on a GPU
    run on the CPU (TF copies the tensors).
    """
    with _lock:
        clib = _load()[1]
    return bool(getattr(clib, "pytfcomm_tf_gpu_kernels", lambda: 0)())


def compiled_tf_version() -> str:
    """The TF version the loaded op library was compiled against (its own record, not
    _tf_build_info's: a library compiled on first use has none there)."""
    with _lock:
        return _load()[1].pytfcomm_tf_compiled_version().decode()
