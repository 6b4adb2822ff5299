"""From TF's MirroredStrategy / MultiWorkerMirroredStrategy to pytfcomm's all-reduce.

    python examples/migrating/mirrored_mwms.py                    # one process, N devices
    pytfcomm-run -np 2 python examples/migrating/mirrored_mwms.py # 2 workers x N devices

One process: ``tf.distribute.MirroredStrategy(devices)`` (TF's own cross-device
ops) becomes ``MirroredStrategy(devices, cross_device_ops=pytfcomm.RingAllReduce())``.
The script trains both from the same weights on the same batches and checks
that they end equal (rtol 1e-5) and that only the second ran pytfcomm ops.

Several processes: ``tf.distribute.MultiWorkerMirroredStrategy()`` becomes
``pytfcomm.MultiWorkerMirroredStrategy()``, the same TF strategy with every
cross-worker reduction on pytfcomm (and no TF gRPC server). The script checks
that the workers end with bitwise-equal weights, equal (rtol 1e-5) to one
process training on the global batch without a strategy.

Keras 3 ``model.fit``, the dataset batched with the GLOBAL batch size in both
cases. Here the devices are logical CPU devices (``--devices``). The last line
starts with ``RESULT``.
"""

from __future__ import annotations

import argparse
import hashlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from _data import CLASSES, FEATURES, make_data


def fit(strategy, initial, dataset, epochs: int):
    """Build, compile and fit under ``strategy`` (None: no strategy)."""
    import keras

    scope = strategy.scope() if strategy is not None else tf.name_scope("single")
    with scope:
        model = keras.Sequential(
            [
                keras.Input((FEATURES,)),
                keras.layers.Dense(32, activation="relu"),
                keras.layers.Dense(CLASSES),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    if initial is not None:
        model.set_weights(initial)
    start = model.get_weights()
    history = model.fit(dataset, epochs=epochs, shuffle=False, verbose=0)
    return model, start, history.history["loss"]


def max_rel_diff(a, b) -> float:
    return max(
        float(np.max(np.abs(u - v)) / max(float(np.max(np.abs(v))), 1e-12))
        for u, v in zip(a, b, strict=True)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2, help="logical CPU devices per process")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="GLOBAL batch size")
    args = ap.parse_args()

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices
    )
    import keras

    import pytfcomm

    comm = pytfcomm.init()  # from pytfcomm-run, srun, mpirun or TF_CONFIG; else one process
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    x, y = make_data(args.batch_size * 4)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size)
    keras.utils.set_random_seed(comm.rank)  # differs per worker: the chief's values win

    if comm.size == 1:
        ops0 = pytfcomm.tf.counters()["allreduce_ops"]
        before, initial, _ = fit(
            tf.distribute.MirroredStrategy(devices), None, dataset, args.epochs
        )
        ops1 = pytfcomm.tf.counters()["allreduce_ops"]
        strategy = tf.distribute.MirroredStrategy(
            devices, cross_device_ops=pytfcomm.RingAllReduce()
        )
        model, _, losses = fit(strategy, initial, dataset, args.epochs)
        ops2 = pytfcomm.tf.counters()["allreduce_ops"]
        err = max_rel_diff(model.get_weights(), before.get_weights())
        ok = err <= 1e-5 and ops1 == ops0 and ops2 > ops1
        print(
            f"MirroredStrategy on {len(devices)} devices: TF's cross-device ops against "
            f"pytfcomm.RingAllReduce: max rel diff {err:.1e}; pytfcomm all-reduce ops "
            f"{ops1 - ops0} then {ops2 - ops1}"
        )
        mode = "mirrored"
    else:
        strategy = pytfcomm.MultiWorkerMirroredStrategy(communicator=comm, local_devices=devices)
        model, initial, losses = fit(strategy, None, dataset, args.epochs)
        final = model.get_weights()
        digest = np.frombuffer(
            hashlib.sha256(b"".join(w.tobytes() for w in final)).digest(), np.uint8
        )
        rows = comm.allgather(digest).reshape(comm.size, -1)
        identical = all(np.array_equal(r, rows[0]) for r in rows)
        reference, _, _ = fit(None, initial, dataset, args.epochs)
        err = max_rel_diff(final, reference.get_weights())
        ok = identical and err <= 1e-5
        print(
            f"worker {comm.rank}: {strategy.num_replicas_in_sync} replicas in sync; weights "
            f"identical on all {comm.size} workers: {identical}; max rel diff to one process "
            f"on the global batch: {err:.1e}"
        )
        mode = "multiworker"
    checksum = sum(float(np.sum(w)) for w in model.get_weights())
    print(
        f"RESULT mirrored_mwms {'ok' if ok else 'FAILED'} mode={mode} workers={comm.size} "
        f"devices={len(devices)} first_loss={losses[0]:.6f} loss={losses[-1]:.6f} "
        f"checksum={checksum:.6f}",
        flush=True,
    )
    comm.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
