"""``tf.distribute.experimental.PreemptionCheckpointHandler`` on pytfcomm's strategy.

TF's handler agrees on the step to checkpoint at through TF's coordination service (a
key-value store the chief's TF server holds). pytfcomm's strategy starts no TF server,
so under it TF's handler constructed, its watcher threads died ("Coordination service
is not enabled") and a SIGTERM raised in the training loop instead of saving.

:func:`install` (called by the strategy's constructor) makes TF's class construct
pytfcomm's handler (:mod:`._preemption_handler`) instead, whenever it is created for a
``pytfcomm.MultiWorkerMirroredStrategy``: inside that strategy's scope, or with its
``cluster_resolver`` (or a resolver naming the same cluster and task). Every other
construction is TF's own. pytfcomm's handler agrees on the step with one small
all-reduce per ``run()`` call, on the strategy's communicator.

docs/multiworker.md, "Preemption", says what it gives.
"""

from __future__ import annotations

from typing import Any

from ._preemption_registry import remember, strategy_for

__all__ = ["install", "register", "strategy_for"]

_MARK = "_pytfcomm_preemption"


def register(strategy: Any) -> None:
    """Remember ``strategy`` (weakly) for :func:`strategy_for` and :func:`install`."""
    remember(strategy)
    install()


def install() -> bool:
    """Make TF's ``PreemptionCheckpointHandler`` work under pytfcomm's strategy.

    Idempotent. Returns whether TF's class is patched (False: this TF has no such class;
    constructing one is then TF's business).
    """
    try:
        from ._tf_failure_handling import handler_class

        cls = handler_class()
    except (ImportError, AttributeError):
        return False
    if getattr(cls, _MARK, False):
        return True

    def __new__(klass: type, *args: Any, **kwargs: Any) -> Any:
        if klass is cls and strategy_for(_resolver_arg(args, kwargs)) is not None:
            from ._tf_failure_handling import check

            check()  # a clear error on a TF whose internals moved
            from ._preemption_handler import Handler

            klass = Handler  # a subclass: Python then runs Handler.__init__
        return object.__new__(klass)

    setattr(cls, "__new__", staticmethod(__new__))  # noqa: B010 (a TF class, patched)
    setattr(cls, _MARK, True)
    return True


def _resolver_arg(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("cluster_resolver")
