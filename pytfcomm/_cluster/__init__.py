"""Work out where this process sits in a pytfcomm job.

``resolve()`` turns explicit arguments or the environment into a :class:`ClusterSpec`:
this process's rank, the job size, rank 0's rendezvous address, the local address to
bind, and an identity for the machine.  Sources, highest precedence first:

1. explicit arguments ``resolve(rank=..., size=..., addr=...)``   -> source ``"explicit"``
2. ``PYTFCOMM_RANK`` / ``PYTFCOMM_SIZE`` / ``PYTFCOMM_ADDR``       -> ``"PYTFCOMM"``
3. ``TF_CONFIG`` (MultiWorkerMirroredStrategy layout)            -> ``"TF_CONFIG"``
4. torchrun-style ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` -> ``"torchrun"``
5. Slurm (a task started by ``srun``)                            -> ``"slurm"``
6. MPI launchers (Open MPI 4/5, MPICH/Hydra, Intel MPI, PMIx)    -> ``"mpi"``
7. nothing found: a single-process job                           -> ``"single"``

Rendezvous address per source: explicit ``addr`` / PYTFCOMM_ADDR; TF_CONFIG: rank 0's TF
host, a derived port; torchrun: MASTER_ADDR and MASTER_PORT + 1 (torchrun's agent keeps
its store on MASTER_PORT); Slurm: the first host of the step's node list, a port derived
from the job and step ids; MPI: 127.0.0.1 when all ranks share the host, a port derived
from the launcher's job id, across hosts PYTFCOMM_ADDR.  PYTFCOMM_ADDR overrides every
derived address, PYTFCOMM_PORT every derived port.  Rank and size always come from the
first source present; a source present only in part (RANK without WORLD_SIZE,
PMI_RANK without PMI_SIZE) is a ConfigError naming what is missing, never a one-process
job.  Every spec carries a ``job`` label (``job_label``) that ``init()`` checks, with
the size and source, across all ranks (pytfcomm/_job_check.py); ``explain`` says what
was read and what was ignored, why (``python -m pytfcomm info``).

This package is pure Python: it imports no TensorFlow and opens no sockets.  Its only
name lookups are in :func:`is_loopback_host`, for host names (bounded in time, cached).
Every error is a :class:`pytfcomm.errors.ConfigError` whose message names
the argument or variable at fault and what to set.  docs/launching.md is the user guide.

One module per concern:

- ``address``: ``"host:port"`` parsing and loopback detection;
- ``explicit``: sources 1 and 2 (arguments, PYTFCOMM_* variables);
- ``tf_config``, ``torchrun``, ``slurm``, ``mpi``: sources 3 to 6;
- ``job_label``: the launcher's job name every rank of one launch shares;
- ``explain``: what was read and ignored, for ``python -m pytfcomm info``;
- ``resolver``: :func:`resolve`, which asks them in order;
- shared by them: ``spec`` (:class:`ClusterSpec`, the overrides every source honours),
  ``host_id`` (:func:`default_host_id`) and ``_env`` (reading and range-checking values).

This ``__init__`` re-exports what the rest of pytfcomm and the tests import from
``pytfcomm._cluster``; module constants (``address.DNS_TIMEOUT_S``,
``host_id._BOOT_ID_PATH``, ...) are read where they are defined, so patch them there.
"""

from __future__ import annotations

from pytfcomm.errors import ConfigError

from ._env import MAX_SIZE
from ._env import _int_text as _int_text
from .address import _host_problem as _host_problem
from .address import format_addr, is_loopback_host, parse_addr
from .explain import explain
from .host_id import default_host_id
from .resolver import resolve
from .slurm import slurm_first_host, slurm_port
from .spec import ClusterSpec
from .tf_config import tf_rendezvous_port

__all__ = [
    "MAX_SIZE",
    "ClusterSpec",
    "ConfigError",
    "default_host_id",
    "explain",
    "format_addr",
    "is_loopback_host",
    "parse_addr",
    "resolve",
    "slurm_first_host",
    "slurm_port",
    "tf_rendezvous_port",
]
