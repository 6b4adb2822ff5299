"""Ordering tokens: cross-process collectives of one graph run in program order.

A graph's ops run when their inputs are ready, in any order, and differently
on every worker; two workers that start the same two collectives in opposite
orders would pair the wrong tensors or wait for each other forever. Every
pytfcomm op that talks to other processes, built in a graph (``tf.function``,
``tf.compat.v1`` graphs, gradient graphs), gets a control dependency on the
previous such collective of its graph, so each worker runs them in the order
the program built them, which is the same everywhere. (``tf.function``
already chains stateful ops; this also covers graphs built without automatic
control dependencies.) Eager ops run in program order anyway.

A GPU all-reduce is a *group* of ops, one per local GPU, that wait for each
other: they must never be chained to one another. Every op of a group
(``group_key``) depends on the collective before the group, and the next
collective depends on every op of the group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

_ATTR = "_pytfcomm_last_collective"


def ordered(
    handle: int, build: Callable[[], Sequence[Any]], group_key: int | None = None
) -> Sequence[Any]:
    """``build()`` (which creates one pytfcomm op), chained after the previous collective."""
    if not handle or tf.executing_eagerly():
        return build()
    graph = tf.compat.v1.get_default_graph()
    # (key of the last collective's group or None, its predecessors, its ops)
    key, before, last = getattr(graph, _ATTR, (None, [], []))
    if group_key is None or key != group_key:
        before, last = last, []
    ctx = graph._get_control_flow_context()
    deps = [op for op in before if op.graph is graph and op._control_flow_context is ctx]
    with tf.control_dependencies(deps):
        outs = build()
    setattr(graph, _ATTR, (group_key, before, [*last, outs[0].op]))
    return outs
