"""The job secret of a Ray Train job, handed out through Ray Train itself.

Ray Train's ``TensorflowTrainer`` starts every worker with TF_CONFIG (workers only) and
nothing else: on a real cluster the workers' addresses are not loopback, so pytfcomm
needs a job secret (``_secret``) that the user never set. In a Ray Train (V2) worker
every ``init()`` of a multi-process job therefore takes part in one
``ray.train.collective.broadcast_from_rank_zero``: world rank 0 draws
``secrets.token_hex(32)`` and every worker receives it. A worker that has its own
secret (``secret=``, PYTFCOMM_SECRET, PYTFCOMM_SECRET_FILE) keeps it; every worker joins
the broadcast anyway, so workers never wait on each other here because one of them set a
variable the others lack (a mismatch is then refused by the handshake).

Who can read it (docs/security.md#ray-train-the-secret-through-ray): whoever can read
Ray's own traffic or run code on the Ray cluster -- who can already run code as your
workers.
"""

from __future__ import annotations

import secrets
import sys
import threading

from ._args import connect_wait_s
from .errors import ConfigError

__all__ = ["in_ray_train_worker", "ray_train_secret"]

_UTILS = "ray.train.v2._internal.execution.train_fn_utils"


def in_ray_train_worker() -> bool:
    """Whether this process runs a Ray Train (V2) training function. Never imports Ray."""
    utils = sys.modules.get(_UTILS)
    if utils is None:
        return False
    try:
        utils.get_train_fn_utils()
    except RuntimeError:  # Ray is imported, but this is not a training worker
        return False
    return True


def ray_train_secret(connect_timeout: float | None) -> str:
    """The secret world rank 0 draws, as every worker receives it, waiting at most
    ``connect_timeout`` (default PYTFCOMM_CONNECT_TIMEOUT) for the other workers.

    Every worker of the Ray Train job must call this once per ``init()``.
    """
    wait = connect_wait_s(connect_timeout)
    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    rank = ray.train.get_context().get_world_rank()
    drawn = secrets.token_hex(32) if rank == 0 else None
    got: list[object] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            got.append(broadcast_from_rank_zero(drawn))
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)

    worker = threading.Thread(target=run, name="pytfcomm-ray-secret", daemon=True)
    worker.start()
    worker.join(wait)
    if worker.is_alive():
        raise ConfigError(
            f"Ray Train worker {rank}: the other workers did not reach pytfcomm.init() "
            f"within {wait:g} s to share the job secret (ray.train.collective."
            "broadcast_from_rank_zero): every worker of the trainer must create the "
            "strategy or call pytfcomm.init() / hvd.init(); raise PYTFCOMM_CONNECT_TIMEOUT "
            "if some start much later"
        )
    if failed:
        raise ConfigError(
            f"Ray Train worker {rank}: sharing the job secret through "
            f"ray.train.collective.broadcast_from_rank_zero failed ({failed[0]!r}): set "
            "PYTFCOMM_SECRET for every worker instead, e.g. "
            "ray.init(runtime_env={'env_vars': {'PYTFCOMM_SECRET': ...}}) (docs/security.md)"
        ) from failed[0]
    secret = got[0]
    if not isinstance(secret, str) or len(secret) != 64:
        raise ConfigError(
            f"Ray Train worker {rank}: rank 0 shared no usable job secret ({type(secret).__name__}"
            "): do all workers run the same pytfcomm version?"
        )
    return secret
