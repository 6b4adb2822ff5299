"""Horovod's examples/tensorflow2/tensorflow2_synthetic_benchmark.py, on pytfcomm.

    pytfcomm-run -np 2 python examples/horovod/tensorflow2_synthetic_benchmark.py \\
        [--model ResNet50] [--batch-size 32] [--num-warmup-batches 10] \\
        [--num-batches-per-iter 10] [--num-iters 10] [--fp16-allreduce] [--no-cuda]

Trains a ``keras.applications`` model (``weights=None``) on one random batch
per rank with ``hvd.DistributedGradientTape`` and plain SGD(0.01), broadcasts
the model's and the optimizer's variables from rank 0 after the first step,
and has rank 0 print, as Horovod's does::

    Iter #0: 41.2 img/sec per CPU
    ...
    Img/sec per CPU: 40.8 +-1.3
    Total img/sec on 2 CPU(s): 81.6 +-2.6

Horovod's flags keep their names, defaults and meaning, and the ``hvd.*``
calls are Horovod's; the import line is the one change a Horovod user makes
(``import horovod.tensorflow as hvd`` there). Written for pytfcomm, not
copied; what differs from Horovod's script:

* ``--image-size`` (default 224, Horovod's fixed size) and the model built
  with ``input_shape=(S, S, 3)``: a small model at a small size (e.g.
  ``--model MobileNetV2 --image-size 32``) makes a quick check.
* ``--cpu-threads`` (default: this process's usable cores divided by
  ``hvd.local_size()``): on CPUs every rank gets that many TF intra-op and
  inter-op threads, so that ranks sharing a machine do not each start a
  thread pool the size of the whole machine (rank 0 prints ``TF threads per
  rank: T``). 0 keeps TF's defaults. ``TF_NUM_INTRAOP_THREADS`` and
  ``TF_NUM_INTEROP_THREADS``, when set, win.
* The device is ``GPU`` only when one is visible (and ``--no-cuda`` is not
  given); Horovod's prints "GPU" even on a machine without one.
* ``opt.variables`` where Horovod calls ``opt.variables()``: Keras optimizers
  made it a list property (TF 2.11, then Keras 3).
* ``--check-weights``: every rank also prints ``rank R weights checksum C``
  (the sum of its trainable weights), equal on all ranks when the broadcast
  and the gradient all-reduce worked.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from tensorflow.keras import applications

import pytfcomm.horovod.tensorflow as hvd


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="TensorFlow Synthetic Benchmark",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--fp16-allreduce", action="store_true", help="all-reduce gradients in float16")
    p.add_argument("--model", default="ResNet50", help="keras.applications model to benchmark")
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per batch")
    p.add_argument(
        "--num-warmup-batches", type=int, default=10, help="untimed batches after the first"
    )
    p.add_argument("--num-batches-per-iter", type=int, default=10, help="batches per timed iter")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--no-cuda", action="store_true", help="run on CPUs even if a GPU is visible")
    # pytfcomm's additions (see the module docstring).
    p.add_argument("--image-size", type=int, default=224, help="square input size")
    p.add_argument(
        "--cpu-threads",
        type=int,
        default=-1,
        help="TF threads per rank on CPU (-1: usable cores / local ranks, 0: TF default)",
    )
    p.add_argument(
        "--check-weights", action="store_true", help="every rank prints a weights checksum"
    )
    return p.parse_args()


def share_cpus(requested: int) -> int:
    """Give this rank its share of the machine's cores; returns the count set (0: none)."""
    threads = requested
    if threads < 0:
        threads = max(1, len(os.sched_getaffinity(0)) // hvd.local_size())
    if threads == 0:
        return 0
    intra = int(os.environ.get("TF_NUM_INTRAOP_THREADS", threads))
    inter = int(os.environ.get("TF_NUM_INTEROP_THREADS", threads))
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    return intra


def main() -> None:
    args = parse_args()

    # Horovod: initialize Horovod.
    hvd.init()

    # One GPU per process, chosen by local rank (Horovod's pinning).
    gpus = [] if args.no_cuda else tf.config.experimental.list_physical_devices("GPU")
    if gpus:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")
        device = "GPU"
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
        tf.config.set_visible_devices([], "GPU")
        device = "CPU"
    threads = share_cpus(args.cpu_threads) if device == "CPU" else 0

    build = getattr(applications, args.model)
    model = build(weights=None, input_shape=(args.image_size, args.image_size, 3))
    opt = tf.optimizers.SGD(0.01)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # Synthetic data: one random batch, reused every step (rank-local, unseeded).
    images = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
    labels = tf.random.uniform([args.batch_size, 1], minval=0, maxval=999, dtype=tf.int64)

    @tf.function
    def train_step(first_batch: bool) -> None:
        with tf.GradientTape() as tape:
            probs = model(images, training=True)
            loss = tf.losses.sparse_categorical_crossentropy(labels, probs)
        # Horovod: the tape all-reduces (averages) the gradients across ranks.
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        # Horovod: start every rank from rank 0's state. Done after the first
        # step, once the optimizer has created its variables.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)

    def log(text: str) -> None:
        if hvd.rank() == 0:
            print(text, flush=True)

    def seconds_for(batches: int) -> float:
        start = time.perf_counter()
        for _ in range(batches):
            train_step(False)
        return time.perf_counter() - start

    log(f"Model: {args.model}")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of {device}s: {hvd.size()}")
    if threads:
        log(f"TF threads per rank: {threads}")

    with tf.device(device):
        log("Running warmup...")
        train_step(True)
        seconds_for(args.num_warmup_batches)

        log("Running benchmark...")
        rates = []
        for i in range(args.num_iters):
            rate = (
                args.batch_size * args.num_batches_per_iter / seconds_for(args.num_batches_per_iter)
            )
            log(f"Iter #{i}: {rate:.1f} img/sec per {device}")
            rates.append(rate)

    mean, spread = float(np.mean(rates)), 1.96 * float(np.std(rates))
    log(f"Img/sec per {device}: {mean:.1f} +-{spread:.1f}")
    n = hvd.size()
    log(f"Total img/sec on {n} {device}(s): {n * mean:.1f} +-{n * spread:.1f}")

    if args.check_weights:
        total = sum(float(tf.reduce_sum(tf.cast(v, tf.float64))) for v in model.trainable_variables)
        print(f"rank {hvd.rank()} weights checksum {total:.9e}", flush=True)


if __name__ == "__main__":
    main()
