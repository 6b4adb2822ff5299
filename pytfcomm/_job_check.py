"""``init()``'s check that every rank describes the same job.

Each rank reads its rank and the job size on its own, from whichever source
:func:`pytfcomm._cluster.resolve` found.  Two launches that meet at one rendezvous
address, or ranks that read different sources, would otherwise run as one job.  Right
after the connections stand, every rank all-gathers a fixed-size record (rank, size,
source, job label) and raises :class:`~pytfcomm.errors.ConfigError` on every rank,
naming what each rank read, when the records disagree.  Size mismatches and a rank
claimed twice are caught earlier, by rank 0's rendezvous; :func:`describe` adds this
rank's view to that error.  The exchange is not written to a PYTFCOMM_TIMELINE file.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ._cluster import ClusterSpec
from ._comm import Communicator
from .errors import ConfigError

_HEAD = struct.Struct("<ii")
_SOURCE_BYTES = 24
_JOB_BYTES = 224
RECORD_BYTES = _HEAD.size + _SOURCE_BYTES + _JOB_BYTES

#: The collective's name, as timelines and mismatch errors show it.
CHECK_NAME = "pytfcomm.init.job_agreement"


def describe(spec: ClusterSpec) -> str:
    """This rank's view of the job, for messages: ``"rank 1 of 4 from slurm (job ...)"``."""
    job = f", {spec.job}" if spec.job else ""
    return f"rank {spec.rank} of {spec.size} from {spec.source}{job}"


def _fixed(text: str, n: int) -> bytes:
    return text.encode("utf-8", "replace")[:n].ljust(n, b"\0")


def _record(spec: ClusterSpec) -> np.ndarray:
    raw = (
        _HEAD.pack(spec.rank, spec.size)
        + _fixed(spec.source, _SOURCE_BYTES)
        + _fixed(spec.job, _JOB_BYTES)
    )
    return np.frombuffer(raw, dtype=np.uint8).reshape(1, RECORD_BYTES).copy()


def _decode(row: np.ndarray) -> tuple[int, int, str, str]:
    raw = row.tobytes()
    rank, size = _HEAD.unpack_from(raw)
    rest = raw[_HEAD.size :]
    source = rest[:_SOURCE_BYTES].rstrip(b"\0").decode("utf-8", "replace")
    job = rest[_SOURCE_BYTES:].rstrip(b"\0").decode("utf-8", "replace")
    return rank, size, source, job


def disagreement(rows: list[tuple[int, int, str, str]]) -> str | None:
    """Why the ranks' records (in rank order) do not describe one job; None when they do."""
    problems = []
    if any(rank != r for r, (rank, *_) in enumerate(rows)):
        problems.append("the rank numbers are not 0..size-1, each once")
    for what, index in (("job size", 1), ("source", 2), ("launcher job", 3)):
        if len({row[index] for row in rows}) > 1:
            problems.append(f"the ranks read different {what}s")
    if not problems:
        return None
    seen = "; ".join(
        f"rank {r} read rank {rank} of {size} from {source}" + (f" ({job})" if job else "")
        for r, (rank, size, source, job) in enumerate(rows)
    )
    return (
        f"these processes are not one job: {', and '.join(problems)}. What each rank read: "
        f"{seen}. Start every rank from one launch with one source (docs/launching.md); "
        "`python -m pytfcomm info` shows what a process reads."
    )


def check_job_agreement(comm: Communicator, spec: ClusterSpec, timeout: float | None) -> None:
    """All-gather every rank's record over ``comm`` and raise ConfigError on a mismatch.

    ``timeout`` bounds the exchange (init's ``connect_timeout``; None: the collective
    default); every rank is connected by then, so it only matters when one dies.
    """
    if spec.size == 1:
        return
    # Keep the exchange out of a PYTFCOMM_TIMELINE file: it lists the program's
    # collectives. Nothing was written yet, so resuming from the pattern loses nothing.
    pattern = os.environ.get("PYTFCOMM_TIMELINE", "") if comm.timeline_path else ""
    if pattern:
        comm.stop_timeline()
    try:
        gathered = comm.allgather(_record(spec), timeout=timeout, name=CHECK_NAME)
    finally:
        if pattern:
            comm.start_timeline(pattern)
    why = disagreement([_decode(row) for row in np.asarray(gathered)])
    if why is not None:
        raise ConfigError(why)
