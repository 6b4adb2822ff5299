"""Compile the TensorFlow op library on first use (for builds made without TF).

A plain ``pip install .`` builds in an isolated environment that has no
TensorFlow, so the wheel cannot contain an op library; it ships the op
sources and headers under ``pytfcomm/_tf_src`` instead. This module compiles
them with the flags of the TensorFlow that is installed, linking the
installed ``libpytfcomm_core.so``, into a per-user cache keyed by the
pytfcomm version, the TF version and a digest of sources and flags. The
compiler is ``$CXX`` or ``c++``; the cache is ``$PYTFCOMM_CACHE_DIR`` or
``~/.cache/pytfcomm``. Concurrent processes compile once (a file lock), and
the library appears atomically.

GPU kernels (``_tf_src/tf_gpu``) join when the installed TensorFlow is a
CUDA build and pytfcomm's core was built with CUDA, as the CMake build's
``PYTFCOMM_TF_GPU=AUTO`` does; the ``PYTFCOMM_TF_GPU`` environment variable
(``auto``/``on``/``off``) overrides that here too.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from ..errors import ConfigError

PACKAGE = Path(__file__).resolve().parent.parent
SOURCES = PACKAGE / "_tf_src"
# -Wundef: an #if on a tf_config.h setting without the header is a warning, not a
# silently disabled feature (TF's own headers are clean of it).
EXTRA_FLAGS = [
    "-O2",
    "-fPIC",
    "-Wno-deprecated-declarations",
    "-Wno-interference-size",
    "-Wundef",
]


def cache_root() -> Path:
    """Where compiled op libraries are kept."""
    env = os.environ.get("PYTFCOMM_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pytfcomm"


def _key(tf_version: str, pytfcomm_version: str, cflags: list[str], lflags: list[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(SOURCES.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(SOURCES)).encode())
            h.update(f.read_bytes())
    h.update("\0".join([*cflags, *lflags, str(PACKAGE)]).encode())
    return f"tf-ops-{pytfcomm_version}-tf{tf_version}-{h.hexdigest()[:16]}"


def want_gpu_kernels() -> bool:
    """Whether an op library compiled here gets GPU kernels (see the module doc)."""
    mode = os.environ.get("PYTFCOMM_TF_GPU", "auto").lower()
    if mode not in ("auto", "on", "off"):
        raise ConfigError(f"PYTFCOMM_TF_GPU must be auto, on or off, got {mode!r}")
    if mode == "off":
        return False
    from .. import _core

    if not _core.build_info()["cuda"]:
        if mode == "on":
            raise ConfigError(
                "PYTFCOMM_TF_GPU=on needs a CUDA build of pytfcomm: reinstall with "
                "PYTFCOMM_WITH_CUDA=ON (docs/gpu.md)"
            )
        return False
    if mode == "on":
        return True
    import tensorflow as tf

    return bool(tf.sysconfig.get_build_info().get("is_cuda_build", False))


def build_op_library(tf_version: str, pytfcomm_version: str) -> Path:
    """Path of an op library built for the running TF, compiling it if needed."""
    import tensorflow as tf

    cflags = list(tf.sysconfig.get_compile_flags())
    lflags = list(tf.sysconfig.get_link_flags())
    srcs = sorted((SOURCES / "tf").glob("*.cc"))
    if srcs and want_gpu_kernels():
        srcs += sorted((SOURCES / "tf_gpu").glob("*.cc"))
        # GOOGLE_CUDA as in TF's own GPU kernels (no layout depends on it here).
        cflags += ["-DGOOGLE_CUDA=1"]
    if not srcs:
        raise ConfigError(
            f"pytfcomm's TF op sources are missing from {SOURCES}; reinstall pytfcomm"
        )
    out_dir = cache_root() / _key(tf_version, pytfcomm_version, cflags, lflags)
    lib = out_dir / "_tf_ops.so"
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if lib.exists():  # another process built it while we waited
            return lib
        _compile(srcs, lib, cflags, lflags, tf_version)
    return lib


def _write_config(out_dir: Path, tf_version: str, gpu_kernels: bool) -> None:
    """tf_config.h from the template CMake uses too (cmake/tf_config.h.in)."""
    text = (SOURCES / "tf_config.h.in").read_text()
    text = text.replace("@PYTFCOMM_TF_VERSION@", tf_version)
    text = text.replace(
        "#cmakedefine01 PYTFCOMM_TF_GPU_KERNELS",
        f"#define PYTFCOMM_TF_GPU_KERNELS {int(gpu_kernels)}",
    )
    if "@" in text or "#cmakedefine" in text:
        raise ConfigError(f"{SOURCES / 'tf_config.h.in'} has a setting _build.py does not fill in")
    (out_dir / "tf_config.h").write_text(text)


def _compile(srcs: list[Path], lib: Path, cflags: list[str], lflags: list[str], tfv: str) -> None:
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    gpu = any(src.parent.name == "tf_gpu" for src in srcs)
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        _write_config(Path(tmp), tfv, gpu)
        common = [*cflags, *EXTRA_FLAGS, f"-I{tmp}", f"-I{SOURCES}"]
        objs, procs = [], []
        for src in srcs:  # one compiler per file, in parallel
            obj = Path(tmp) / (src.stem + ".o")
            objs.append(obj)
            cmd = [*cxx, *common, "-c", str(src), "-o", str(obj)]
            procs.append((cmd, subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)))
        for cmd, p in procs:
            _, err = p.communicate()
            if p.returncode:
                _fail(cmd, err)
        tmp_lib = Path(tmp) / lib.name
        link = [
            *cxx,
            "-shared",
            *map(str, objs),
            "-o",
            str(tmp_lib),
            f"-L{PACKAGE}",
            "-l:libpytfcomm_core.so",
            f"-Wl,-rpath,{PACKAGE}",
            *lflags,
        ]
        res = subprocess.run(link, stderr=subprocess.PIPE, text=True, check=False)
        if res.returncode:
            _fail(link, res.stderr)
        os.replace(tmp_lib, lib)


def _fail(cmd: list[str], err: str) -> None:
    raise ConfigError(
        "pytfcomm could not compile its TensorFlow op library for the installed TensorFlow.\n"
        f"command: {shlex.join(cmd)}\n{err[-3000:]}\n"
        "Fix: install a C++17 compiler (g++ >= 9) or set CXX, or reinstall pytfcomm with "
        "TensorFlow present at build time: pip install --no-build-isolation pytfcomm"
    )
