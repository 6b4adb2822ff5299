"""Sub-communicators: :meth:`pytfcomm.Communicator.split` (docs/numpy.md).

A group of ranks gets a communicator of its own, with its own connections,
engine thread and collective order, so collectives inside the group never
pair with collectives of the parent or of another group. It is made the way a
job is: the group's lowest rank opens a rendezvous, the parent tells every
rank where, and the members join it with the parent's secret, transport and
deadlines. Every rank of the parent takes part in the split, members or not,
and every rank learns whether it worked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core
from ._launch.ports import free_port
from .errors import CommError, InvalidArgumentError, MismatchError

if TYPE_CHECKING:
    from ._comm import Communicator

# Collectives of a split run under this name on the parent, so they pair with
# each other and never with the application's collectives of the same thread.
_NAME = "pytfcomm.split"


def check_group(ranks: object, size: int) -> list[int]:
    """``ranks`` as a sorted list of distinct ranks of a ``size``-rank job."""
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
        raise InvalidArgumentError(
            f"split(ranks={ranks!r}): ranks must be a list of ranks, e.g. [0, 2]"
        )
    out: list[int] = []
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise InvalidArgumentError(f"split(ranks={ranks!r}): {r!r} is not an int rank")
        if not 0 <= int(r) < size:
            raise InvalidArgumentError(
                f"split(ranks={ranks!r}): rank {int(r)} is not in [0, {size})"
            )
        out.append(int(r))
    if not out:
        raise InvalidArgumentError("split(ranks=[]): a group needs at least one rank")
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"split(ranks={ranks!r}): a rank appears twice")
    return sorted(out)


def _digest(group: list[int]) -> np.ndarray:
    h = hashlib.sha256(",".join(map(str, group)).encode()).digest()
    return np.frombuffer(h[:8], dtype=np.int64).copy()


def split(parent: Communicator, ranks: Sequence[int], timeout: float | None) -> Any:
    """The body of :meth:`Communicator.split` (see there)."""
    group = check_group(ranks, parent.size)
    # 1. Every rank must name the same group: compare digests before anything else.
    digests = parent.allgather(_digest(group), timeout=timeout, name=_NAME)
    if len(set(digests.tolist())) != 1:
        raise MismatchError(
            f"split: ranks disagree on the group (this rank asked for {group}); call "
            "split with the same ranks on every rank of the communicator"
        )
    root = group[0]
    # 2. The group's first rank picks the rendezvous port; every rank learns it.
    port = np.zeros(1, dtype=np.int64)
    problem = ""
    if parent.rank == root and len(group) > 1:
        try:
            port[0] = free_port(parent.host_of(root))
        except OSError as exc:
            port[0] = -1
            problem = f"rank {root} found no free port on {parent.host_of(root)}: {exc}"
    port = parent.broadcast(port, root, timeout=timeout, name=_NAME)
    # 3. Members connect; then every rank hears whether every member did.
    sub = None
    if parent.rank in group and port[0] >= 0:
        args = parent._join_args
        try:
            core = _core.Communicator(
                group.index(parent.rank),
                len(group),
                parent.host_of(root),
                int(port[0]),
                parent.spec.bind_host,
                parent.spec.host_id,
                args["connect_timeout"],
                args["timeout"],
                args["secret"],
                transport=args["transport"],
                stall_warning=args["stall_warning"],
            )
            sub = type(parent)(core, parent.spec, parent.gpu_backend, parent._timeout_s)
            sub._join_args = dict(args)
            sub.parent_ranks = group
        except CommError as exc:
            problem = f"rank {parent.rank} could not join the group {group}: {exc}"
    ok = np.array([0 if problem else 1], dtype=np.int32)
    ok = parent.allreduce(ok, op="min", timeout=timeout, name=_NAME)
    if ok[0] != 1:
        if sub is not None:
            sub.close()
        raise CommError(
            problem
            or f"split: another rank could not join the group {group} (see its error); "
            "the group was not created on any rank"
        )
    return sub
