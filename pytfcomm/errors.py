"""Errors raised by pytfcomm.

Every error is a :class:`CommError`. The subclass says what went wrong and also
inherits from the closest Python builtin, so ``except TimeoutError`` or
``except ValueError`` work as a user would expect. Messages name the rank and
host involved, the collective (with its sequence number) and what to do.

A :class:`MismatchError` (ranks disagree on a collective before any of its
data moved) and a :class:`CommTimeoutError` for a collective no other rank
called leave the communicator usable, as in Horovod. After a lost or hung
peer, a failed transfer or corrupt data the communicator is closed on every
rank: create a new one with :func:`pytfcomm.init` (docs/errors.md).
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "CommClosedError",
    "CommError",
    "CommTimeoutError",
    "ConfigError",
    "InvalidArgumentError",
    "MembershipError",
    "MismatchError",
    "PeerLostError",
]


class CommError(RuntimeError):
    """Base class of every pytfcomm error."""


class InvalidArgumentError(CommError, ValueError):
    """An argument cannot be used (wrong dtype, shape, root, buffer)."""


class ConfigError(CommError, ValueError):
    """The job configuration is wrong: environment, TF_CONFIG, addresses, ports."""


class PeerLostError(CommError, ConnectionError):
    """A peer closed its connection, crashed, or aborted the job.

    The recoverable error of elastic jobs (Horovod's ``HorovodInternalError``): under
    ``pytfcomm-run --elastic`` the survivors catch it, roll back to their last commit
    and go on in a new communicator (:func:`pytfcomm.elastic.reform`, docs/elastic.md).
    """


class CommTimeoutError(CommError, TimeoutError):
    """A peer did not answer before the deadline (``PYTFCOMM_TIMEOUT``)."""


class MismatchError(CommError):
    """Ranks called different collectives, or with different dtype/count/op/root."""


class AuthenticationError(CommError, PermissionError):
    """A connection failed the job-secret handshake."""


class MembershipError(CommError):
    """An elastic job cannot take this process on: the launcher declared it lost, fewer
    than ``--min-np`` ranks are left, or the launcher did not answer (docs/elastic.md)."""


class CommClosedError(CommError):
    """The communicator was closed, by the user or after an earlier error."""
