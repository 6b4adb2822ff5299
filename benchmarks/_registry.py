"""The backends the benchmark knows: how to launch each one and whether it is installed.

Adding a backend = one worker module under benchmarks/backends/ + one entry in BACKENDS.
A variant of an existing worker only needs an entry with different ``env`` or ``mpi_args``
(see pytfcomm-tcp / pytfcomm-shm below).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Same MCA settings for both MPI paths except the BTL list: ob1 PML (so the BTL choice is
# honoured even if UCX is installed), loopback only, no binding of MPI's own: with
# --bind-to core the benchmark binds every backend's ranks alike (benchmarks/_pin.py).
MPI_COMMON = (
    "--mca", "pml", "ob1",
    "--mca", "btl_tcp_if_include", "lo",
    "--mca", "oob_tcp_if_include", "lo",
    "--bind-to", "none",
    "--oversubscribe",
)  # fmt: skip


@dataclass(frozen=True)
class Spec:
    name: str
    module: str
    launcher: str  # "spawn": N python processes; "mpirun": one mpirun -np N
    env: dict[str, str] = field(default_factory=dict)
    mpi_args: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()  # python modules that must be importable
    capped_by_tf_max: bool = False  # sizes above --tf-max-size are not run
    # The machine's ceiling for this backend's transport (benchmarks/_limits.py):
    # "memcpy" for shared memory, "tcp" for one loopback TCP stream.
    limit: str = "tcp"
    # Put before the workers' PYTHONPATH: another build of pytfcomm (see baseline_spec()).
    pythonpath: str = ""


BACKENDS: list[Spec] = [
    # "pytfcomm" is the default (auto: shared memory between local ranks, TCP between hosts);
    # the variants force one transport, for comparison in the same table.
    Spec(
        "pytfcomm",
        "benchmarks.backends.pytfcomm_backend",
        "spawn",
        requires=("pytfcomm",),
        limit="memcpy",  # auto is shared memory between ranks on one host
    ),
    Spec(
        "pytfcomm-tcp",
        "benchmarks.backends.pytfcomm_backend",
        "spawn",
        env={"PYTFCOMM_TRANSPORT": "tcp"},
        requires=("pytfcomm",),
    ),
    Spec(
        "pytfcomm-shm",
        "benchmarks.backends.pytfcomm_backend",
        "spawn",
        env={"PYTFCOMM_TRANSPORT": "shm"},
        requires=("pytfcomm",),
        limit="memcpy",
    ),
    Spec("gloo", "benchmarks.backends.gloo", "spawn", requires=("torch",)),
    Spec(
        "mpi-shm",
        "benchmarks.backends.mpi",
        "mpirun",
        mpi_args=("--mca", "btl", "self,vader", *MPI_COMMON),
        requires=("mpi4py",),
        limit="memcpy",
    ),
    Spec(
        "mpi-tcp",
        "benchmarks.backends.mpi",
        "mpirun",
        mpi_args=("--mca", "btl", "self,tcp", *MPI_COMMON),
        requires=("mpi4py",),
    ),
    Spec(
        "tf-ring",
        "benchmarks.backends.tf_ring",
        "spawn",
        env={"TF_CPP_MIN_LOG_LEVEL": "2"},
        requires=("tensorflow",),
        capped_by_tf_max=True,
    ),
]


BASELINE_SUFFIX = "@base"


def by_name(name: str, baseline: str = "") -> Spec | None:
    """The backend called ``name``; ``NAME@base`` (with a ``baseline`` directory) is
    pytfcomm backend NAME run with the build of pytfcomm installed there."""
    if name.endswith(BASELINE_SUFFIX) and baseline:
        spec = by_name(name.removesuffix(BASELINE_SUFFIX))
        if spec is None or not spec.name.startswith("pytfcomm"):
            return None
        return baseline_spec(spec, baseline)
    return next((s for s in BACKENDS if s.name == name), None)


def baseline_spec(spec: Spec, directory: str) -> Spec:
    """``spec`` run with the pytfcomm installed in ``directory`` (``pip install --target``
    of another commit): the same benchmark, before and after a change, in one sitting."""
    return replace(spec, name=spec.name + BASELINE_SUFFIX, pythonpath=os.path.abspath(directory))


def _pytfcomm_reason() -> str | None:
    """Import it the way the workers will: from a neutral directory (see worker_pythonpath),
    and require ``init`` (a half-built package can import without it)."""
    code = "import pytfcomm; pytfcomm.init"
    try:
        r = subprocess.run(
            [sys.executable, "-c", code], check=False, cwd=tempfile.gettempdir(),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return "`import pytfcomm` timed out"
    if r.returncode == 0:
        return None
    last = (r.stderr.strip().splitlines() or ["unknown error"])[-1]
    return f"`import pytfcomm` failed: {last} (install it, e.g. scripts/setup.sh)"


def open_mpi_mpirun() -> str | None:
    """Open MPI's ``mpirun``, the MPI peer the tables name, or None.

    Debian installs it as ``mpirun.openmpi`` and lets ``mpirun`` point at whichever MPI has
    the highest alternatives priority; with MPICH installed too (the launcher tests need
    its ``mpiexec.hydra``) and Open MPI absent, ``mpirun`` is MPICH's, which takes none of
    the MCA arguments above. So: ``mpirun.openmpi`` when it exists, else ``mpirun`` only
    if it says it is Open MPI.
    """
    named = shutil.which("mpirun.openmpi")
    if named:
        return named
    plain = shutil.which("mpirun")
    if plain is None:
        return None
    try:
        out = subprocess.run(
            [plain, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return plain if "Open MPI" in out else None


def unavailable_reason(spec: Spec) -> str | None:
    """None if the backend can run here, else why not (shown in the skipped list)."""
    for mod in spec.requires:
        if mod == "pytfcomm":
            reason = _pytfcomm_reason()
            if reason:
                return reason
        elif importlib.util.find_spec(mod) is None:
            return f"python module {mod!r} not installed (see scripts/setup_bench.sh)"
    if spec.launcher == "mpirun" and open_mpi_mpirun() is None:
        other = " (mpirun here is another MPI's)" if shutil.which("mpirun") else ""
        return (
            f"Open MPI's mpirun not found{other}: run scripts/setup_bench.sh"
            " (apt-get install openmpi-bin libopenmpi-dev)"
        )
    return None


def worker_pythonpath(shim_dir: str) -> str:
    """PYTHONPATH for workers, which run with a neutral cwd: ``shim_dir`` holds only a
    ``benchmarks`` symlink, so the checkout's ``pytfcomm/`` source directory (whose extension
    may be missing or stale) never shadows the installed pytfcomm. To benchmark an in-place
    build instead, put the repository root on PYTHONPATH yourself; it is kept."""
    link = os.path.join(shim_dir, "benchmarks")
    if not os.path.exists(link):
        os.makedirs(shim_dir, exist_ok=True)
        os.symlink(os.path.join(REPO_ROOT, "benchmarks"), link)
    old = os.environ.get("PYTHONPATH", "")
    return shim_dir + (os.pathsep + old if old else "")


def import_installed_pytfcomm():
    """``import pytfcomm`` for a benchmark that runs it in its own process (``tf_local``):
    the installed package, never the checkout's ``pytfcomm/`` that ``python -m`` from the
    repository root puts first on ``sys.path`` (its extension may be missing or stale), unless
    the repository root is on PYTHONPATH, as for workers (worker_pythonpath)."""
    root = os.path.realpath(REPO_ROOT)
    given = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    saved = sys.path[:]
    if root not in given:
        sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != root]
    try:
        import pytfcomm
    finally:
        sys.path[:] = saved
    return pytfcomm
