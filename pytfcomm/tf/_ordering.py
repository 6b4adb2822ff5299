"""How pytfcomm ops meet across processes: instance keys, and ordering tokens.

Instance keys (``instance_key``): every op that talks to other processes
carries a key, and the engine matches the n-th execution of a key on every
process with each other (docs/negotiation.md), whatever order TF runs ops in
(several inter-op threads, ``tf.cond`` branches, ``tf.while_loop`` bodies,
``steps_per_execution``). An op built in a graph is keyed by the outermost
traced function (``train_step``; nested branch and loop graphs get names with
process-wide counters, which may differ between workers) and its place among
that function's pytfcomm ops, which tracing builds in the same order on every
worker; the kernel adds the loop frame and iteration it runs in. An eager op
is keyed by its thread's name: the same stream as the thread's NumPy
collectives, since eager ops run in program order.

Ordering tokens (``ordered``): CPU ops run whenever their inputs are ready,
since their keys make any order safe (and independent collectives overlap).
Only GPU groups still need tokens: their NCCL launches (csrc/gpu) pair up in
the order ranks reach them. Every GPU group op built in a graph gets a control
dependency on the previous GPU collective of its graph, so each worker runs
them in the order the program built them. A GPU all-reduce is a *group* of
ops, one per local GPU, that wait for each other: they must never be chained
to one another. Every op of a group (``group_key``) depends on the collective
before the group, and the next collective depends on every op of the group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import tensorflow as tf

_ATTR = "_pytfcomm_last_collective"
_KEYS = "_pytfcomm_instance_keys"


def instance_key() -> str:
    """The key of the pytfcomm op about to be built (see the module docstring)."""
    if tf.executing_eagerly():
        return "thread:" + threading.current_thread().name
    graph = tf.compat.v1.get_default_graph()
    # Up to the outermost traced function: function graphs have an outer
    # graph; the outermost one's is a plain Graph (which has none itself).
    while hasattr(getattr(graph, "outer_graph", None), "outer_graph"):
        graph = graph.outer_graph
    n = getattr(graph, _KEYS, 0)
    setattr(graph, _KEYS, n + 1)
    return f"op:{getattr(graph, 'name', 'graph')}#{n}"


_Outs = TypeVar("_Outs", bound=Sequence[Any])


def ordered(handle: int, build: Callable[[], _Outs], group_key: int | None = None) -> _Outs:
    """``build()`` (which creates one pytfcomm op); GPU group ops chained after the
    previous collective of the graph, other ops as they are (see the module docstring)."""
    if not handle or tf.executing_eagerly() or group_key is None:
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
