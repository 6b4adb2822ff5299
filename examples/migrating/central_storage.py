"""From CentralStorageStrategy to MirroredStrategy with pytfcomm's all-reduce.

    python examples/migrating/central_storage.py [--devices 2] [--epochs 2]

Before: ``tf.distribute.experimental.CentralStorageStrategy`` keeps one copy
of every variable on one device (the CPU, or the only GPU), runs the model on
every compute device and sums the gradients onto that device
(ReductionToOneDevice) before one synchronous update.

After: ``tf.distribute.MirroredStrategy(devices,
cross_device_ops=pytfcomm.RingAllReduce())`` keeps a copy of every variable on
every device; pytfcomm all-reduces the gradients (one fused op per step) and
every copy applies the same update. Same Keras code, same global batch, same
learning rate. Here the devices are logical CPU devices.

The script trains both from the same initial weights on the same batches and
checks that they end equal (rtol 1e-5) and that pytfcomm ops ran only under
the new strategy. The last line starts with ``RESULT``.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from _data import CLASSES, FEATURES, make_data


def fit(strategy, initial, x, y, args):
    import keras

    with strategy.scope():
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
    start = [w.numpy() for w in model.weights]
    history = model.fit(
        x, y, batch_size=args.batch_size, epochs=args.epochs, shuffle=False, verbose=0
    )
    return model, start, history.history["loss"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch size")
    args = ap.parse_args()

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices
    )
    import keras

    import pytfcomm

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    x, y = make_data(args.batch_size * 4)
    keras.utils.set_random_seed(0)

    # Before: variables on CPU:0, replicas on every device.
    before_strategy = tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=devices, parameter_device=devices[0]
    )
    ops0 = pytfcomm.tf.counters()["allreduce_ops"]
    before, initial, _ = fit(before_strategy, None, x, y, args)
    ops1 = pytfcomm.tf.counters()["allreduce_ops"]

    # After: a copy per device, gradients all-reduced by pytfcomm.
    after_strategy = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=pytfcomm.RingAllReduce()
    )
    after, _, losses = fit(after_strategy, initial, x, y, args)
    ops2 = pytfcomm.tf.counters()["allreduce_ops"]

    where = sorted({v.value.device for v in before.weights})
    copies = len(after.weights[0].value.values)
    err = max(
        float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12))
        for a, b in zip(after.get_weights(), before.get_weights(), strict=True)
    )
    ok = err <= 1e-5 and ops1 == ops0 and ops2 > ops1
    checksum = sum(float(np.sum(w)) for w in after.get_weights())
    print(
        f"CentralStorageStrategy kept the variables on {where}; MirroredStrategy keeps "
        f"{copies} copies of each. Max rel diff of the final weights: {err:.1e}; pytfcomm "
        f"all-reduce ops: {ops1 - ops0} before, {ops2 - ops1} after"
    )
    print(
        f"RESULT central_storage {'ok' if ok else 'FAILED'} devices={len(devices)} "
        f"epochs={args.epochs} first_loss={losses[0]:.6f} loss={losses[-1]:.6f} "
        f"checksum={checksum:.6f}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
