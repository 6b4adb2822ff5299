"""Ordering tokens: cross-process collectives of one graph run in program order.

A graph's ops run when their inputs are ready, in any order, and differently
on every worker; two workers that start the same two collectives in opposite
orders would pair the wrong tensors or wait for each other forever. Every
pytfcomm op that talks to other processes, built in a graph (``tf.function``,
``tf.compat.v1`` graphs, gradient graphs), gets a control dependency on the
previous such op of its graph, so each worker runs them in the order the
program built them, which is the same everywhere. (``tf.function`` already
chains stateful ops; this also covers graphs built without automatic control
dependencies.) Eager ops run in program order anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

_ATTR = "_pytfcomm_last_collective"


def ordered(handle: int, build: Callable[[], Sequence[Any]]) -> Sequence[Any]:
    """``build()`` (which creates one pytfcomm op), chained after the graph's previous one."""
    if not handle or tf.executing_eagerly():
        return build()
    graph = tf.compat.v1.get_default_graph()
    prev = getattr(graph, _ATTR, None)
    deps = []
    if prev is not None and prev.graph is graph and (
            prev._control_flow_context is graph._get_control_flow_context()):
        deps.append(prev)
    with tf.control_dependencies(deps):
        outs = build()
    setattr(graph, _ATTR, outs[0].op)
    return outs
