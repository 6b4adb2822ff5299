"""TF local multi-device benchmark: pytfcomm's CrossDeviceOps against TF's built-ins.

    python benchmarks/tf_local.py [--iters 20] [--warmup 3] [--json out.json]

One process, 4 logical CPU devices, MirroredStrategy with each cross-device
implementation in turn, measured in the same run:

* ``resnet50-grads``: the gradient all-reduce (``batch_reduce_to(SUM)``) of a
  ResNet-50-shaped gradient set (161 float32 tensors, 25.6M values), inside
  ``tf.function``; each result is checked against the exact sum. The function
  reads the per-replica values from its closure, as a training step reads the
  gradients it computed: passed as arguments, TF's Python-side flattening of
  the 644 tensors costs ~9 ms per call on the 2-core VM, the same for every
  implementation, and would be measured instead of the reduction.
* ``digits-mlp-step``: one training step (forward, backward, all-reduce,
  SGD update) of a small MLP on scikit-learn's digits, global batch 256.

Time is the median of ``--iters`` timed calls after ``--warmup`` calls. The
ratio column is (that implementation's time / pytfcomm RingAllReduce's);
above 1 means pytfcomm is faster.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
NUM_DEVICES = 4


def setup_tf():
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_DEVICES
    )
    return tf


def resnet50_shapes() -> list[tuple[int, ...]]:
    """Trainable-variable shapes of ResNet-50 v1 without conv biases (161 tensors, 25.6M)."""
    shapes: list[tuple[int, ...]] = [(7, 7, 3, 64), (64,), (64,)]

    def conv_bn(k: int, cin: int, cout: int) -> None:
        shapes.extend([(k, k, cin, cout), (cout,), (cout,)])

    cin = 64
    for blocks, width in ((3, 64), (4, 128), (6, 256), (3, 512)):
        for b in range(blocks):
            conv_bn(1, cin, width)
            conv_bn(3, width, width)
            conv_bn(1, width, 4 * width)
            if b == 0:
                conv_bn(1, cin, 4 * width)
            cin = 4 * width
    shapes.extend([(2048, 1000), (1000,)])
    return shapes


def implementations(tf, pytfcomm):
    return {
        "pytfcomm.RingAllReduce": lambda: pytfcomm.RingAllReduce(),
        "pytfcomm.HierarchicalAllReduce": lambda: pytfcomm.HierarchicalAllReduce(),
        "tf.ReductionToOneDevice": lambda: tf.distribute.ReductionToOneDevice(),
        "tf.HierarchicalCopyAllReduce(1)": lambda: tf.distribute.HierarchicalCopyAllReduce(1),
        "tf default (MirroredStrategy())": lambda: None,
    }


def interleaved(
    fns: dict, warmup: int, iters: int, per_call: dict[str, int] | None = None
) -> dict[str, float]:
    """Median seconds of each function, calling them in turn once per iteration
    (divided by ``per_call[name]`` where one call holds several operations)."""
    per_call = per_call or {}
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) / per_call.get(name, 1))
    return {name: statistics.median(v) for name, v in times.items()}


def timed(fn, warmup: int, iters: int) -> float:
    """Median seconds of one function over ``iters`` calls after ``warmup``."""
    return interleaved({"": fn}, warmup, iters)[""]


def bench_grads(tf, strategy, shapes, warmup, iters) -> float:
    import numpy as np

    rng = np.random.default_rng(0)
    base = [rng.integers(-8, 8, size=s).astype(np.float32) for s in shapes]

    def value_fn(ctx):
        r = ctx.replica_id_in_sync_group
        return [tf.constant(b * (r + 1)) for b in base]

    values = strategy.experimental_distribute_values_from_function(value_fn)

    @tf.function
    def step():
        pairs = [(v, v) for v in values]
        reduced = strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, pairs)
        # Consume every result on every device so nothing is pruned.
        return tf.add_n([tf.reshape(x, [-1])[0] for r in reduced for x in r.values])

    out = step()
    want = sum(float(b.reshape(-1)[0]) * 10 for b in base) * NUM_DEVICES
    if abs(float(out) - want) > 1e-3 * max(1.0, abs(want)):
        raise AssertionError(f"wrong all-reduce result {float(out)} != {want}")
    return timed(lambda: step().numpy(), warmup, iters)


def bench_train(tf, strategy, warmup, iters) -> float:
    import keras
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(256, drop_remainder=True)
    dist = iter(strategy.experimental_distribute_dataset(ds))
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(256, "relu"),
                keras.layers.Dense(256, "relu"),
                keras.layers.Dense(10),
            ]
        )
        opt = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                loss_fn(yb, model(xb, training=True)), global_batch_size=256
            )
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def step():
        xb, yb = next(dist)
        return strategy.reduce("SUM", strategy.run(replica_step, (xb, yb)), axis=None)

    return timed(lambda: step().numpy(), warmup, iters)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--only", help="comma-separated subset of implementation names")
    args = ap.parse_args(argv)
    from benchmarks._registry import import_installed_pytfcomm

    tf = setup_tf()
    pytfcomm = import_installed_pytfcomm()

    devices = [f"/device:CPU:{i}" for i in range(NUM_DEVICES)]
    shapes = resnet50_shapes()
    n_values = sum(int(math.prod(s)) for s in shapes)
    impls = implementations(tf, pytfcomm)
    if args.only:
        impls = {k: v for k, v in impls.items() if k in args.only.split(",")}
    results: dict[str, dict[str, float]] = {}
    for name, make in impls.items():
        print(f"... {name}", file=sys.stderr, flush=True)
        # One strategy per implementation: TF's default collectives reuse
        # instance keys across MirroredStrategy objects in one process.
        strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=make())
        results[name] = {
            "resnet50-grads": bench_grads(tf, strategy, shapes, args.warmup, args.iters),
            "digits-mlp-step": bench_train(tf, strategy, args.warmup, args.iters),
        }
        print(f"    {results[name]}", file=sys.stderr, flush=True)
    ref = results.get("pytfcomm.RingAllReduce")
    print(
        f"\n{NUM_DEVICES} logical CPU devices, {len(shapes)} gradient tensors "
        f"({n_values / 1e6:.1f}M float32, {n_values * 4 / 2**20:.0f} MiB); median of "
        f"{args.iters}; ratio = time / pytfcomm.RingAllReduce time\n"
    )
    print("| implementation | resnet50-grads (ms) | ratio | digits-mlp-step (ms) | ratio |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        g, t = r["resnet50-grads"], r["digits-mlp-step"]
        rg = g / ref["resnet50-grads"] if ref else float("nan")
        rt = t / ref["digits-mlp-step"] if ref else float("nan")
        print(f"| {name} | {g * 1e3:.1f} | {rg:.2f} | {t * 1e3:.2f} | {rt:.2f} |")
    from benchmarks import _limits

    grad_bytes = n_values * 4
    lim = _limits.memcpy_gbs(grad_bytes)
    # A memcpy moves each byte through memory twice (read, write); combining D replicas
    # reads D copies and writes one: (D + 1) / 2 memcpys' worth of traffic.
    floor_ms = (NUM_DEVICES + 1) / 2 * grad_bytes / (lim * 1e9) * 1e3
    at = (
        f"; pytfcomm.RingAllReduce takes {ref['resnet50-grads'] * 1e3 / floor_ms:.2f}x that"
        if ref
        else ""
    )
    print(
        f"\n# limit (this machine, same run): one core's memcpy of {grad_bytes >> 20} MiB at "
        f"{lim:.2f} GB/s; reading {NUM_DEVICES} replicas and writing one result at that "
        f"memory traffic rate takes {floor_ms:.1f} ms{at}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "devices": NUM_DEVICES,
                    "tensors": len(shapes),
                    "values": n_values,
                    "iters": args.iters,
                    "results_s": results,
                },
                f,
                indent=2,
            )
    if pytfcomm.tf.counters()["allreduce_ops"] == 0 and ref:
        print("error: pytfcomm ops never ran", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
