"""Which pytfcomm strategy a ``PreemptionCheckpointHandler`` belongs to.

Apart from :mod:`.preemption` (which patches TF's class) and :mod:`._preemption_handler`
(pytfcomm's handler), which both need it, so that neither imports the other.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["remember", "strategy_for"]

_STRATEGIES: weakref.WeakSet[Any] = weakref.WeakSet()


def remember(strategy: Any) -> None:
    """Remember ``strategy`` (weakly) for :func:`strategy_for`."""
    _STRATEGIES.add(strategy)


def strategy_for(resolver: Any) -> Any:
    """The pytfcomm strategy a handler with ``resolver`` belongs to, or None.

    The strategy whose scope is entered (None if that is another strategy), else a live
    one whose ``cluster_resolver`` is ``resolver`` or names the same cluster and task.
    """
    import tensorflow as tf

    # pytfcomm's MultiWorkerMirroredStrategy is the one strategy whose extended is an
    # Extended (strategy.py imports preemption.py: naming the strategy here is a cycle).
    from ._extended import Extended

    if tf.distribute.has_strategy():
        current = tf.distribute.get_strategy()
        return current if isinstance(getattr(current, "extended", None), Extended) else None
    if resolver is None:
        return None
    for strategy in list(_STRATEGIES):
        own = strategy.cluster_resolver
        if own is resolver or (own is not None and _same_task(own, resolver)):
            return strategy
    return None


def _same_task(a: Any, b: Any) -> bool:
    try:
        return (
            a.cluster_spec().as_dict() == b.cluster_spec().as_dict()
            and a.task_type == b.task_type
            and int(a.task_id) == int(b.task_id)
        )
    except Exception:  # a resolver that cannot say: not this strategy's
        return False
