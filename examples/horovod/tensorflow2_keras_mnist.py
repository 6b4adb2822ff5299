"""Horovod's examples/tensorflow2/tensorflow2_keras_mnist.py, running on pytfcomm.

    pytfcomm-run -np 2 python examples/horovod/tensorflow2_keras_mnist.py [EPOCHS]

Every ``hvd.*`` line is Horovod's; only the import line differs
(``import horovod.tensorflow.keras as hvd`` in Horovod's). Beside it, three
changes that Keras 3 and this offline machine need, not Horovod: the data is
scikit-learn's 8x8 digits instead of downloading MNIST; ``compile`` drops
Horovod's ``experimental_run_tf_function=False`` (a TF 2.0-era flag Keras 3
rejects); the model is sized for 8x8 images and epochs/steps are small.
Rank 0 prints ``final: loss L accuracy A``.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import pytfcomm.horovod.tensorflow.keras as hvd


def main(epochs: int = 3) -> None:
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    # (MNIST's 28x28 digits in Horovod's; scikit-learn's 8x8 ones here, no download.)
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
            tf.keras.layers.Conv2D(32, [3, 3], activation="relu"),
            tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
            tf.keras.layers.Dropout(0.25),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dropout(0.5),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )

    # Horovod: adjust learning rate based on number of GPUs.
    scaled_lr = 0.002 * hvd.size()
    opt = tf.optimizers.Adam(scaled_lr)

    # Horovod: add Horovod DistributedOptimizer.
    opt = hvd.DistributedOptimizer(
        opt, backward_passes_per_step=1, average_aggregated_gradients=True
    )

    mnist_model.compile(
        loss=tf.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=["accuracy"]
    )

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: average metrics among workers at the end of every epoch.
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: scale the learning rate up to `lr * hvd.size()` during the first epochs.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=2, verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint("./checkpoint-{epoch}.keras"))

    # Horovod: write logs on worker 0.
    verbose = 2 if hvd.rank() == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of GPUs.
    history = mnist_model.fit(
        dataset,
        steps_per_epoch=200 // hvd.size(),
        callbacks=callbacks,
        epochs=epochs,
        verbose=verbose,
    )
    if hvd.rank() == 0:
        print(
            f"final: loss {history.history['loss'][-1]:.4f} "
            f"accuracy {history.history['accuracy'][-1]:.4f}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
