"""Keras 3 ``gradient_accumulation_steps`` training, for tests/tf/test_tf_grad_accum.py.

:func:`train` fits the model of multiworker_workers.py with an accumulating
optimizer, with or without a strategy, and returns what a user would compare:
the weights and the optimizer's variables (iteration, momentums, gradient
accumulators). :func:`mwms` runs it in a worker of pytfcomm's
MultiWorkerMirroredStrategy; rank 0 also trains the one-process reference.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from multiworker_workers import EPOCHS, GLOBAL_BATCH, LR, _data, _loss, _model, _set_tf_config, _tf

#: The accumulation steps tested: with EPOCHS * STEPS micro-steps, 3 leaves the
#: accumulators holding a partial sum at the end (compared too).
ACCUMULATION = (2, 3)


def dataset(tf: Any, sparse: bool = False) -> Any:
    x, y = _data()
    if sparse:  # 8 token ids in [0, 16] per row, for an Embedding
        x = (x[:, :8] * 16).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)


def _embedding_model(k: Any) -> Any:
    k.utils.set_random_seed(0)
    return k.Sequential(
        [
            k.Input((8,), dtype="int32"),
            k.layers.Embedding(17, 4),
            k.layers.Flatten(),
            k.layers.Dense(10),
        ]
    )


def train(
    tf: Any,
    k: Any,
    steps: int,
    strategy: Any = None,
    *,
    sparse: bool = False,
    loss_scale: bool = False,
) -> dict[str, Any]:
    """Keras 3 ``fit`` (a ``tf.function``) with SGD(momentum) accumulating ``steps`` steps.

    ``sparse``: an Embedding model, whose gradient is ``IndexedSlices``;
    ``loss_scale``: the optimizer inside Keras' ``LossScaleOptimizer``.
    Returns ``weights`` and ``optimizer`` (the accumulating optimizer's
    variables), each a list of arrays, and ``replicas_equal``: whether every
    local replica holds bitwise the same copy of each of them (always True
    without a strategy).
    """
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = _embedding_model(k) if sparse else _model(k)
        opt = k.optimizers.SGD(LR, momentum=0.9, gradient_accumulation_steps=steps)
        model.compile(k.optimizers.LossScaleOptimizer(opt) if loss_scale else opt, _loss(k))
    model.fit(dataset(tf, sparse), epochs=EPOCHS, shuffle=False, verbose=0)
    variables = [*model.weights, *opt.variables]
    return {
        "weights": [np.array(w.numpy()) for w in model.weights],
        "optimizer": [np.array(v.numpy()) for v in opt.variables],
        "replicas_equal": all(_replicas_equal(v) for v in variables),
    }


def _replicas_equal(variable: Any) -> bool:
    copies = [np.array(c.numpy()).tobytes() for c in getattr(variable.value, "values", ())]
    return all(c == copies[0] for c in copies)


def mwms(rank: int, size: int, addr: str, ndev: int, tf_ports: list[int]) -> dict:
    """Every ACCUMULATION under pytfcomm.MultiWorkerMirroredStrategy (ndev local CPUs)."""
    _set_tf_config(rank, tf_ports, addr)
    tf = _tf(ndev)
    import keras

    import pytfcomm
    import pytfcomm.tf as ptf

    strategy = pytfcomm.MultiWorkerMirroredStrategy(
        local_devices=[f"CPU:{i}" for i in range(ndev)] if ndev > 1 else None
    )
    assert strategy.num_replicas_in_sync == size * ndev, strategy.num_replicas_in_sync
    out: dict = {}
    for steps in ACCUMULATION:
        before = ptf.counters()["cross_worker_ops"]
        out[steps] = train(tf, keras, steps, strategy)
        out[steps]["cross_worker_ops"] = ptf.counters()["cross_worker_ops"] - before
        if rank == 0:
            out[steps]["reference"] = train(tf, keras, steps)
    return out
