"""Horovod's examples/tensorflow2/tensorflow2_mnist.py (custom loop), running on pytfcomm.

    pytfcomm-run -np 2 python examples/horovod/tensorflow2_mnist.py [STEPS]

Every ``hvd.*`` line is Horovod's; only the import line differs
(``import horovod.tensorflow as hvd`` in Horovod's). Beside it, what Keras 3
and this offline machine need, not Horovod: scikit-learn's 8x8 digits instead
of the MNIST download, a model sized for them, fewer steps, and
``opt.variables`` where Horovod's example calls ``opt.variables()`` (Keras
optimizers made it a list property in TF 2.11, before Keras 3). Rank 0
prints ``final: loss L``.
"""

import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import pytfcomm.horovod.tensorflow as hvd


def main(steps: int = 200) -> None:
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    images, labels = load_digits(return_X_y=True)
    images = images.reshape(-1, 8, 8).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(images[..., tf.newaxis] / 16.0, tf.float32), tf.cast(labels, tf.int64))
    )
    dataset = dataset.repeat().shuffle(2000, seed=hvd.rank()).batch(64)

    mnist_model = tf.keras.Sequential(
        [
            tf.keras.Input((8, 8, 1)),
            tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
            tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )
    loss = tf.losses.SparseCategoricalCrossentropy()

    # Horovod: adjust learning rate based on number of GPUs.
    opt = tf.optimizers.Adam(0.002 * hvd.size())

    checkpoint_dir = os.path.join(tempfile.mkdtemp(), "checkpoints")
    checkpoint = tf.train.Checkpoint(model=mnist_model, optimizer=opt)

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            probs = mnist_model(images, training=True)
            loss_value = loss(labels, probs)

        # Horovod: add Horovod Distributed GradientTape.
        tape = hvd.DistributedGradientTape(tape)

        grads = tape.gradient(loss_value, mnist_model.trainable_variables)
        opt.apply_gradients(zip(grads, mnist_model.trainable_variables))  # noqa: B905 (as Horovod)

        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        # This is necessary to ensure consistent initialization of all workers when
        # training is started with random weights or restored from a checkpoint.
        #
        # Note: broadcast should be done after the first gradient step to ensure optimizer
        # initialization.
        if first_batch:
            hvd.broadcast_variables(mnist_model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)

        return loss_value

    # Horovod: adjust number of steps based on number of GPUs.
    for batch, (images, labels) in enumerate(dataset.take(steps // hvd.size())):
        loss_value = training_step(images, labels, batch == 0)

        if batch % 10 == 0 and hvd.rank() == 0:
            print("Step #%d\tLoss: %.6f" % (batch, loss_value))  # noqa: UP031 (as Horovod)

    # (Not in Horovod's example: a checksum the test compares across ranks.)
    total = float(sum(tf.reduce_sum(v) for v in mnist_model.trainable_variables))
    print(f"rank {hvd.rank()} weights checksum {total:.6f}")

    # Horovod: save checkpoints only on worker 0 to prevent other workers from
    # corrupting it.
    if hvd.rank() == 0:
        checkpoint.save(checkpoint_dir)
        print(f"final: loss {float(loss_value):.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
