"""The job secret: where it comes from and what makes it acceptable (docs/security.md).

One rule for every place that reads a secret: ``init()`` (``secret=``,
PYTFCOMM_SECRET, PYTFCOMM_SECRET_FILE) and ``pytfcomm-run`` (PYTFCOMM_SECRET).
A secret that breaks it raises :class:`~pytfcomm.ConfigError`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from . import _owned_file, _ray_train
from .errors import ConfigError, InvalidArgumentError

if TYPE_CHECKING:
    from ._cluster import ClusterSpec

__all__ = ["MIN_SECRET", "check_secret", "job_secret", "secret_file"]

#: The shortest secret pytfcomm accepts, in characters.
MIN_SECRET = 16
_MAX_SECRET_FILE = 4096
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

_SECRET_HINT = (
    "set PYTFCOMM_SECRET to the same long random value on every rank (pytfcomm-run does "
    "this for you; in a Slurm batch script, export PYTFCOMM_SECRET=$(python -c 'import "
    "secrets; print(secrets.token_hex(32))') before srun), or PYTFCOMM_SECRET_FILE to a "
    "file that holds it, readable by you alone, e.g. on a shared filesystem"
)


def check_secret(secret: str, source: str) -> str:
    """``secret`` (from ``source``, e.g. ``"PYTFCOMM_SECRET"``), or ConfigError when too short.

    An empty secret means "none" and passes; whether a job may run without one is
    :func:`job_secret`'s business.
    """
    if secret and len(secret) < MIN_SECRET:
        raise ConfigError(
            f"{source} is too short ({len(secret)} characters; at least {MIN_SECRET}): "
            "use a long random value, e.g. python -c 'import secrets; "
            "print(secrets.token_hex(32))', the same on every rank (pytfcomm-run makes "
            "one when PYTFCOMM_SECRET is unset)"
        )
    return secret


def secret_file(path: str) -> str:
    """The job secret held in ``path`` (PYTFCOMM_SECRET_FILE), surrounding whitespace dropped.

    The file must be a regular file of this user's that neither group nor others may
    access (``_owned_file``): a secret that other users can read or set protects nothing.
    """
    what = f"PYTFCOMM_SECRET_FILE={path!r}"
    fix = (
        "point it at a file of your own, mode 600, that holds the job secret and exists on "
        "every rank's host (a shared filesystem), or unset it and set PYTFCOMM_SECRET; a "
        "Kubernetes Secret volume passes with defaultMode: 0400 in a container that runs "
        "as root, otherwise pass the Secret as PYTFCOMM_SECRET (secretKeyRef) "
        "(docs/launching.md#the-job-secret-in-a-pod)"
    )
    fd = _owned_file.open_owned(path, what, fix, no_access=True)
    try:
        data = _owned_file.read_bounded(fd, _MAX_SECRET_FILE)
    finally:
        os.close(fd)
    if len(data) > _MAX_SECRET_FILE:
        raise ConfigError(f"{what} is over {_MAX_SECRET_FILE} bytes: is it the secret's file?")
    try:
        secret = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{what} is not UTF-8 text: write the secret as text") from None
    if not secret:
        raise ConfigError(f"{what} is empty: write the job secret into it")
    return secret


def job_secret(
    explicit: str | None, spec: ClusterSpec, connect_timeout: float | None = None
) -> str:
    """The job secret (``secret=``, else PYTFCOMM_SECRET, else PYTFCOMM_SECRET_FILE's
    content, else in a Ray Train worker the secret Ray Train's rank 0 shares within
    ``connect_timeout``, ``_ray_train``), checked; "" when none.

    A job whose addresses are not all loopback must have one, unless
    PYTFCOMM_INSECURE=1 says the network is trusted (see docs/security.md).
    """
    source = "init(secret=...)"
    secret = explicit
    if secret is None:
        source, secret = "PYTFCOMM_SECRET", os.environ.get("PYTFCOMM_SECRET", "")
        path = os.environ.get("PYTFCOMM_SECRET_FILE", "").strip()
        if not secret and path:
            source, secret = f"the secret in PYTFCOMM_SECRET_FILE={path!r}", secret_file(path)
    if spec.size > 1 and _ray_train.in_ray_train_worker():
        # every worker joins, whatever it holds
        shared = _ray_train.ray_train_secret(connect_timeout)
        if not secret:
            source, secret = "the Ray Train job secret", shared
    if not isinstance(secret, str):
        raise InvalidArgumentError(f"secret must be a str, got {type(secret).__name__}")
    check_secret(secret, source)
    insecure = os.environ.get("PYTFCOMM_INSECURE", "").strip().lower()
    if insecure not in _TRUE + _FALSE:
        raise ConfigError(
            f"PYTFCOMM_INSECURE={insecure!r} is not valid: use 1 to allow a job across "
            "non-loopback addresses without a secret, or 0 / unset"
        )
    if not secret and not spec.all_loopback and insecure not in _TRUE:
        raise ConfigError(
            f"this job spans non-loopback addresses (rank 0 at {spec.addr}) but has no job "
            f"secret: {_SECRET_HINT}; or set PYTFCOMM_INSECURE=1 to run unauthenticated on "
            "a network you trust (docs/security.md)"
        )
    return secret
