"""A TF2 in-graph multi-tower trainer (the cifar10_multi_gpu_train pattern) on pytfcomm.

    python examples/tower_trainer.py [--steps 300]

One model, one set of variables; each of 4 logical CPU devices ("towers")
computes the gradients of its shard of the batch inside one tf.function;
pytfcomm.average_gradients averages them (one fused pytfcomm all-reduce
op) and the optimizer applies the result once. Data: scikit-learn's digits.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

NUM_TOWERS = 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=128, help="global batch size")
    args = ap.parse_args()

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_TOWERS
    )

    import keras
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    import pytfcomm

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    towers = [d.name for d in tf.config.list_logical_devices("CPU")]

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)]
    )
    opt = keras.optimizers.SGD(0.1, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ds = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train.astype(np.int32)))
        .shuffle(2048, seed=0)
        .repeat()
        .batch(args.batch_size, drop_remainder=True)
    )

    @tf.function
    def train_step(xb, yb):
        xs, ys = tf.split(xb, NUM_TOWERS), tf.split(yb, NUM_TOWERS)
        tower_grads, losses = [], []
        for i, device in enumerate(towers):
            with tf.device(device), tf.name_scope(f"tower_{i}"):
                with tf.GradientTape() as tape:
                    loss = loss_fn(ys[i], model(xs[i], training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                tower_grads.append(list(zip(grads, model.trainable_variables, strict=True)))
                losses.append(loss)
        grads_and_vars = pytfcomm.average_gradients(tower_grads)
        opt.apply_gradients(grads_and_vars)
        return tf.add_n(losses) / NUM_TOWERS

    for step, (xb, yb) in enumerate(ds.take(args.steps)):
        loss = train_step(xb, yb)
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {float(loss):.4f}")
    pred = np.argmax(model(x_test).numpy(), axis=1)
    print(f"test accuracy: {np.mean(pred == y_test):.3f}")
    print(f"pytfcomm op executions: {pytfcomm.tf.counters()}")


if __name__ == "__main__":
    main()
