"""Multi-worker TF benchmark: pytfcomm vs TF's MultiWorkerMirroredStrategy (RING).

    python -m benchmarks.tf_multiworker [--np 2] [--iters 10] [--repeat 5] [--json out.json]

Starts ``--np`` worker processes on 127.0.0.1 for each backend in turn, each with
``pytfcomm-run``'s ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (``--no-malloc-hugepages``:
without):

* ``pytfcomm-mwms``: ``pytfcomm.MultiWorkerMirroredStrategy()``;
* ``tf-mwms-ring``: ``tf.distribute.MultiWorkerMirroredStrategy`` with the RING
  implementation (gRPC between workers; TF's own collective);
* ``pytfcomm-horovod``: one process per worker, no strategy:
  ``pytfcomm.allreduce`` / ``allreduce_gradients`` / ``DistributedGradientTape``.

What is timed (median of ``--iters`` after warm-up, every result checked):

* ``reduce-16MiB``: ``strategy.reduce(SUM, strategy.run(identity, t), axis=None)`` of a
  16 MiB float32 tensor in a ``tf.function`` (Horovod-style: ``pytfcomm.allreduce``); the
  whole result is checked once, the timed calls fetch two of its elements;
* ``reduce-16MiB-graph``: the same all-reduce, per all-reduce of 8 run one after another
  (control dependencies) inside one ``tf.function``: the op's cost inside a graph, without
  a ``tf.function`` call (Python dispatch, executor start and completion) per all-reduce;
* ``reduce-16MiB-numpy`` (the pytfcomm backends): the same all-reduce from NumPy
  (``comm.allreduce(x, out=y)``) on the communicator the TF path uses (the strategy's
  ``communicator``, or ``init()``'s), the yardstick of both;
* ``tf-call-16MiB``: TF's own share of a call, no collective in it: a ``tf.function`` of
  ``tf.identity`` on the same tensor, the same two elements fetched, called right after
  the NumPy all-reduce (TF's threads idle as long as after a collective): what a call
  costs on this machine with nothing of pytfcomm in it (the ranks' calls are not
  synchronised, so it is context, not a term to subtract);
  the 16 MiB measurements are interleaved (one call of each per iteration, in the same
  order on every backend; TF's RING has no NumPy call), so their ratios compare the same
  minutes of the machine, and each timed call follows the same calls on every backend
  (on the 2-core VM what comes just before a call moves its time: docs/benchmarks.md);
* ``resnet50-grads``: the SUM all-reduce of a ResNet-50-shaped gradient set (161
  float32 tensors, 25.6M values) inside ``strategy.run`` (``ReplicaContext.all_reduce``
  of the list, the path ``apply_gradients`` takes); Horovod-style:
  ``allreduce_gradients``;
* ``train``: examples/s of a custom training loop (an MLP 64-1024-1024-10, 2.2M
  parameters, on digits-shaped data, 128 examples per worker per step, SGD);
* ``keras-fit``: examples/s of Keras 3 ``model.fit`` on the same model (2 epochs of 20
  steps after a warm-up fit), or the error it raises;
* ``keras-fit-steady``: the same fit's steps alone (a callback times each step but the
  first of each epoch), leaving out what happens around them once per ``fit`` or epoch:
  distributing the dataset, retracing for the new iterator, Python's garbage collection.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks._launch import BIND_CHOICES, bindings, free_ports, local_jobs, pin_env
from benchmarks._registry import import_installed_pytfcomm, worker_pythonpath
from benchmarks.tf_local import interleaved

BACKENDS = ("pytfcomm-mwms", "tf-mwms-ring", "pytfcomm-horovod")
LOCAL_BATCH = 128
REDUCE_ELEMS = 4 << 20  # 16 MiB of float32
CHAIN = 8  # all-reduces per tf.function call in reduce-16MiB-graph


# --------------------------------------------------------------------------- worker side
def _mlp(keras):
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def _step_clock(keras: Any) -> Any:  # a class made where keras is imported
    class StepClock(keras.callbacks.Callback):
        """Time of fit's steps after the first of each epoch (steady-state training)."""

        def __init__(self) -> None:
            super().__init__()
            self.steps, self.seconds, self._t = 0, 0.0, None

        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            self._t = time.perf_counter() if batch > 0 else None

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if self._t is not None:
                self.seconds += time.perf_counter() - self._t
                self.steps += 1

    return StepClock()


def _worker(backend: str, rank: int, size: int, ports: list[int], iters: int) -> dict:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if backend != "pytfcomm-horovod":
        os.environ["TF_CONFIG"] = json.dumps(
            {
                "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports[1 : size + 1]]},
                "task": {"type": "worker", "index": rank},
            }
        )
    os.environ.update(
        PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=f"127.0.0.1:{ports[0]}"
    )
    import keras
    import numpy as np
    import tensorflow as tf

    import pytfcomm
    from benchmarks.tf_local import resnet50_shapes, timed

    strategy = None
    if backend == "pytfcomm-mwms":
        strategy = pytfcomm.MultiWorkerMirroredStrategy()
    elif backend == "tf-mwms-ring":
        impl = tf.distribute.experimental.CommunicationImplementation.RING
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=impl
            )
        )
    else:
        comm = pytfcomm.init()
    out: dict = {"rank": rank}
    warm = 3

    # reduce-16MiB
    t = tf.constant(np.full(REDUCE_ELEMS, rank + 1, np.float32))
    if strategy is not None:

        @tf.function
        def reduce16(x):
            return strategy.reduce("SUM", strategy.run(tf.identity, args=(x,)), axis=None)
    else:

        @tf.function
        def reduce16(x):
            return pytfcomm.allreduce(x, op="sum")

    got = reduce16(t).numpy()
    assert np.all(got == size * (size + 1) / 2), got[:3]

    # Timed: the reduce plus two elements of its result (the op must have
    # finished), not a 16 MiB copy into NumPy, which costs every backend alike.
    @tf.function
    def reduce16_done(x):
        r = reduce16(x)
        return r[0] + r[-1]

    # reduce-16MiB-graph: CHAIN of them in one call, one after another
    @tf.function
    def reduce16_chain(x):
        acc, prev = [], []
        for _ in range(CHAIN):
            with tf.control_dependencies(prev):
                r = reduce16(x)
            prev = [r]
            acc.append(r[0] + r[-1])
        return tf.add_n(acc)

    got = float(reduce16_chain(t))
    assert got == CHAIN * size * (size + 1), got
    fns = {
        "reduce-16MiB": lambda: reduce16_done(t).numpy(),
        "reduce-16MiB-graph": lambda: reduce16_chain(t).numpy(),
    }
    per_call = {"reduce-16MiB-graph": CHAIN}

    # reduce-16MiB-numpy: the core from NumPy on the communicator the TF path uses
    # (the strategy's own, or init()'s); TF's RING has none.
    if backend == "pytfcomm-mwms":
        comm = strategy.communicator
    elif strategy is not None:
        comm = None
    out["reduce-16MiB-numpy"] = "-"
    if comm is not None:
        xn = np.full(REDUCE_ELEMS, rank + 1, np.float32)
        yn = np.empty_like(xn)
        comm.allreduce(xn, op="sum", out=yn)
        assert np.all(yn == size * (size + 1) / 2), yn[:3]
        fns["reduce-16MiB-numpy"] = lambda: comm.allreduce(xn, op="sum", out=yn)

    # tf-call-16MiB: TF's own share of a call, with no collective in it: the
    # same tensor through an identity, the same two elements fetched. It runs
    # right after the NumPy all-reduce, so TF's threads have been idle as
    # long as they are when reduce-16MiB is called after a collective.
    @tf.function
    def identity_done(x):
        r = tf.identity(x)
        return r[0] + r[-1]

    fns["tf-call-16MiB"] = lambda: identity_done(t).numpy()
    # Interleaved, one call of each per iteration: the TF/NumPy ratio then
    # compares the same minutes of a shared, drifting machine. Every backend runs
    # the same sequence (RING without the NumPy call): what comes just before a
    # timed call moves its time (docs/benchmarks.md), so the rows compare alike.
    out.update(interleaved(fns, warm, iters, per_call))

    # resnet50-grads
    shapes = resnet50_shapes()
    grads = [tf.constant(np.full(s, rank + 1, np.float32)) for s in shapes]
    if strategy is not None:

        def replica_fn(*gs):
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.identity(g) for g in gs])

        @tf.function
        def grads_step(gs):
            res = strategy.experimental_local_results(strategy.run(replica_fn, args=tuple(gs)))
            return tf.add_n([tf.reshape(x, [-1])[0] for x in tf.nest.flatten(res)])
    else:

        @tf.function
        def grads_step(gs):
            res = pytfcomm.allreduce_gradients(gs, op="sum")
            return tf.add_n([tf.reshape(x, [-1])[0] for x in res])

    got = float(grads_step(grads))
    assert got == len(shapes) * size * (size + 1) / 2, got
    out["resnet50-grads"] = timed(lambda: grads_step(grads).numpy(), warm, iters)

    # train: custom loop
    rng = np.random.default_rng(rank)
    xb = tf.constant(rng.random((LOCAL_BATCH, 64), np.float32))
    yb = tf.constant(rng.integers(0, 10, LOCAL_BATCH).astype(np.int32))
    gb = LOCAL_BATCH * size
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    if strategy is not None:
        with strategy.scope():
            model = _mlp(keras)
            opt = keras.optimizers.SGD(0.01)

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(
                    loss_fn(y, model(x, training=True)), global_batch_size=gb
                )
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

        @tf.function
        def train_step():
            return strategy.reduce("SUM", strategy.run(replica_step, (xb, yb)), axis=None)
    else:
        model = _mlp(keras)
        opt = keras.optimizers.SGD(0.01)

        @tf.function
        def train_step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(yb, model(xb, training=True)))
            tape = pytfcomm.DistributedGradientTape(tape)
            g = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(g, model.trainable_variables, strict=True))
            return loss

    step_s = timed(lambda: train_step().numpy(), warm, iters * 3)
    out["train"] = gb / step_s

    # keras-fit; keras-fit-steady: the same fit's steps alone (first step of each epoch
    # and everything around the steps left out: dataset distribution, retracing, GC)
    steady = _step_clock(keras)
    try:
        x = rng.random((LOCAL_BATCH * size * 20, 64), np.float32)
        y = rng.integers(0, 10, len(x)).astype(np.int32)
        if strategy is not None:
            ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(gb)
            with strategy.scope():
                model = _mlp(keras)
                model.compile(
                    keras.optimizers.SGD(0.01),
                    keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                )
            model.fit(ds, epochs=1, verbose=0)  # trace and warm up
            t0 = time.perf_counter()
            model.fit(ds, epochs=2, verbose=0, callbacks=[steady])
        else:
            model = _mlp(keras)
            model.compile(
                pytfcomm.keras.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
            mine = slice(rank * LOCAL_BATCH * 20, (rank + 1) * LOCAL_BATCH * 20)
            model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=1, verbose=0)
            t0 = time.perf_counter()
            model.fit(
                x[mine], y[mine], batch_size=LOCAL_BATCH, epochs=2, verbose=0, callbacks=[steady]
            )
        out["keras-fit"] = 2 * len(x) / (time.perf_counter() - t0)
        out["keras-fit-steady"] = gb * steady.steps / steady.seconds
    except Exception as exc:  # TF's own strategy fails here in TF 2.21: report it
        out["keras-fit"] = f"fails: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
        out["keras-fit-steady"] = out["keras-fit"]
    return out


# --------------------------------------------------------------------------- parent side
def _run_backend(
    backend: str,
    n: int,
    iters: int,
    timeout: float,
    hugepages: bool = True,
    cpus: list[frozenset[int]] | None = None,
    module: str = "benchmarks.tf_multiworker",
) -> list[dict] | str:
    """Run ``module``'s ``--worker`` for ``backend`` on ``n`` ranks; their results, or
    why not (benchmarks/fit_breakdown.py starts its workers the same way)."""
    ports = free_ports(n + 1)
    with tempfile.TemporaryDirectory(prefix="ptc-tfmw-") as tmp:
        # A neutral cwd: the checkout's pytfcomm/ must not shadow the installed one.
        env = dict(os.environ, PYTHONPATH=worker_pythonpath(str(Path(tmp) / "shim")))
        if hugepages:  # every backend's workers as pytfcomm-run starts ranks
            env.update(malloc_hugepages(os.environ))
        env.update(pin_env(cpus))  # and bound to the same cores (benchmarks/_pin.py)
        pin = [sys.executable, "-m", "benchmarks._pin"] if cpus else []
        cmds = [
            [
                *pin, sys.executable, "-m", module, "--worker", backend, "--rank", str(r),
                "--np", str(n), "--ports", ",".join(map(str, ports)), "--iters", str(iters),
                "--out", str(Path(tmp) / f"rank{r}.json"),
            ]
            for r in range(n)
        ]  # fmt: skip
        job = local_jobs().run(
            cmds,
            [dict(env, BENCH_RANK=str(r)) for r in range(n)],
            cwd=tmp,
            timeout_s=timeout,
            logs=[Path(tmp) / f"rank{r}.log" for r in range(n)],
            term_grace_s=0,
        )
        if job.status != "ok":
            failed = next((c for c in job.codes if c not in (None, 0)), None)
            status = (
                f"timed out after {timeout:.0f} s"
                if job.status == "timeout"
                else f"rank exited with {failed}"
            )
            tail = (Path(tmp) / "rank0.log").read_text(errors="replace")[-1500:]
            return f"{status}\n{tail}"
        return [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(n)]


def _fmt(v: object, unit: str) -> str:
    if isinstance(v, str):
        return v
    return f"{v * 1e3:.2f}" if unit == "ms" else f"{v:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run everything this many times in a row and print each ratio's spread",
    )
    ap.add_argument(
        "--no-malloc-hugepages",
        action="store_true",
        help="start the workers without pytfcomm-run's GLIBC_TUNABLES=glibc.malloc.hugetlb=1",
    )
    ap.add_argument(
        "--bind-to",
        choices=BIND_CHOICES,
        default="core",
        help="core (default): every backend's worker r runs on the CPUs that pytfcomm-run "
        "(default --bind-to core) gives local rank r; none: no binding for any backend",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        ports = [int(p) for p in args.ports.split(",")]
        res = _worker(args.worker, args.rank, args.np, ports, args.iters)
        Path(args.out).write_text(json.dumps(res))
        return 0

    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    args.cpus = bindings(args.bind_to, args.np)
    runs = [_one_run(args, i) for i in range(args.repeat)]
    if args.cpus:
        from pytfcomm._launch.binding import cpu_list

        print("\nevery backend's worker r bound to CPUs: " + "; ".join(map(cpu_list, args.cpus)))
    for i, results in enumerate(runs):
        _print_table(results, args.np, f"run {i + 1} of {args.repeat}" if args.repeat > 1 else "")
    if args.repeat > 1:
        _print_spread(runs)
    if args.json:
        doc = {"np": args.np, "bind_to": args.bind_to, "results": runs[-1], "runs": runs}
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0 if all("error" not in r for res in runs for r in res.values()) else 1


def malloc_hugepages(environ: Mapping[str, str]) -> dict[str, str]:
    """What ``pytfcomm-run`` adds to its ranks' environment: its own rule
    (``pytfcomm._launch.plan``), from the installed package (the checkout's ``pytfcomm/``
    may lack ``_core``); importing it loads no TensorFlow."""
    import_installed_pytfcomm()
    from pytfcomm._launch.plan import malloc_hugepages as launcher_rule

    return launcher_rule(environ)


KEYS = (
    "reduce-16MiB",
    "reduce-16MiB-graph",
    "reduce-16MiB-numpy",
    "tf-call-16MiB",
    "resnet50-grads",
    "train",
    "keras-fit",
    "keras-fit-steady",
)
# lower is better; the rest are rates
TIMES = (
    "reduce-16MiB",
    "reduce-16MiB-graph",
    "reduce-16MiB-numpy",
    "tf-call-16MiB",
    "resnet50-grads",
)
TF_CALL = "tf-call-16MiB"  # context (TF's own call), not a contest: no ratio
HVD = "pytfcomm-horovod"  # the Horovod-style path, the strategy's yardstick
NUMPY_BACKENDS = ("pytfcomm-mwms", HVD)  # those with reduce-16MiB-numpy (same communicator)
REF = "tf-mwms-ring"
LIMIT = "limit: busbw = one core's memcpy"  # the machine's row (_limit_row)


def _one_run(args: argparse.Namespace, index: int) -> dict[str, dict]:
    results: dict[str, dict] = {}
    for b in args.backends.split(","):
        print(
            f"[tf_multiworker] run {index + 1}: {b} with {args.np} workers ...",
            file=sys.stderr,
            flush=True,
        )
        got = _run_backend(
            b, args.np, args.iters, args.timeout, not args.no_malloc_hugepages, args.cpus
        )
        if isinstance(got, str):
            print(f"[tf_multiworker] {b} failed: {got}", file=sys.stderr)
            results[b] = {"error": got.splitlines()[0]}
            continue
        # Times: the slowest worker's median; rates: the slowest worker's.
        row = {}
        for k in KEYS:
            vals = [g.get(k, "-") for g in got]
            if any(isinstance(v, str) for v in vals):
                row[k] = next(v for v in vals if isinstance(v, str))
            else:
                row[k] = max(vals) if k in TIMES else min(vals)
        results[b] = row
    results[LIMIT] = _limit_row(args.np)
    return results


def _limit_row(n: int) -> dict:
    """The all-reduce times this machine allows (benchmarks/_limits.py), measured now:
    ``2(n-1)/n`` of the bytes through one core's memcpy (busbw at memcpy speed, the
    ceiling of the shared-memory transport that workers on one host use)."""
    from benchmarks import _limits
    from benchmarks.tf_local import resnet50_shapes

    grads = 4 * sum(math.prod(s) for s in resnet50_shapes())
    reduce16 = ("reduce-16MiB", "reduce-16MiB-graph", "reduce-16MiB-numpy")
    sizes = {k: 4 * REDUCE_ELEMS for k in reduce16} | {"resnet50-grads": grads}
    lim = _limits.measure(sorted(set(sizes.values())), kinds=("memcpy", "tcp"))
    row: dict = {"train": "-", "keras-fit": "-", "keras-fit-steady": "-", "limits": lim.as_json()}
    for k, nbytes in sizes.items():
        bw = lim.memcpy_gbs.get(nbytes)
        row[k] = nbytes * 2 * (n - 1) / n / (bw * 1e9) if bw else "-"
    return row


def _ratio(results: dict[str, dict], b: str, k: str, ref: str = REF) -> float | None:
    """How many times better ``b`` is than ``ref`` on ``k`` (None when either is missing)."""
    a, r = results.get(b, {}).get(k), results.get(ref, {}).get(k)
    if not isinstance(a, float) or not isinstance(r, float) or b == ref or k == TF_CALL:
        return None
    return r / a if k in TIMES else a / r


def _print_table(results: dict[str, dict], n: int, title: str) -> None:
    def ratio(b: str, k: str) -> str:
        x = None if b == LIMIT else _ratio(results, b, k)
        return "" if x is None else f" ({x:.1f}x)"

    head = f"{title}: " if title else ""
    print(f"\n{head}{n} workers on 127.0.0.1; ratios vs {REF} (higher = pytfcomm better)\n")
    print(
        "| backend | reduce 16 MiB (ms) | same, per op of 8 in one tf.function (ms) "
        "| same from NumPy (ms) | TF's own call, identity of 16 MiB (ms) "
        "| ResNet-50 grads (ms) | train (examples/s) "
        "| Keras fit (examples/s) | Keras fit, steps only (examples/s) |"
    )
    print("|---|" + "---:|" * len(KEYS))
    for b, row in results.items():
        if "error" in row:
            print(f"| {b} | failed: {row['error']} |" + " |" * (len(KEYS) - 1))
            continue
        cells = [
            f"{_fmt(row.get(k, '-'), 'ms' if k in TIMES else 'rate')}{ratio(b, k)}" for k in KEYS
        ]
        print(f"| {b} | " + " | ".join(cells) + " |")
    for b in NUMPY_BACKENDS:
        tf_np = _tf_vs_numpy(results, b)
        if tf_np:
            print(
                f"\n16 MiB inside TF / from NumPy ({b}, one communicator): one tf.function call "
                f"per all-reduce {tf_np[0]:.2f}x; per all-reduce inside one tf.function "
                f"{tf_np[1]:.2f}x"
            )
    lim = results.get(LIMIT, {}).get("limits")
    if lim:
        from benchmarks._limits import fmt_gbs

        bws = ", ".join(
            f"{int(k) >> 20} MiB: memcpy {fmt_gbs(v)}, TCP {fmt_gbs(lim['tcp_gbs'].get(k))}"
            for k, v in lim["memcpy_gbs"].items()
        )
        print(f"\nlimit (GB/s, one core's memcpy and one loopback TCP stream): {bws}")
        for e in lim["errors"]:
            print(f"limit: {e}")


def _tf_vs_numpy(results: dict[str, dict], backend: str = HVD) -> tuple[float, float] | None:
    """A pytfcomm backend's 16 MiB all-reduce TF times over its NumPy time (same
    communicator): (one ``tf.function`` call per all-reduce, per all-reduce inside one call)."""
    row = results.get(backend, {})
    vals = [row.get(k) for k in ("reduce-16MiB", "reduce-16MiB-graph", "reduce-16MiB-numpy")]
    if not all(isinstance(v, float) for v in vals):
        return None
    return vals[0] / vals[2], vals[1] / vals[2]


def _print_spread(runs: list[dict[str, dict]]) -> None:
    """Each ratio's min / median / max over the consecutive runs, so that a claim about
    "every run" can be checked; plus pytfcomm's strategy against its Horovod style."""
    pairs = [(b, REF) for b in BACKENDS if b != REF] + [("pytfcomm-mwms", "pytfcomm-horovod")]
    print(f"\nratios over {len(runs)} consecutive runs: min / median / max (runs counted)\n")
    print("| ratio | " + " | ".join(KEYS) + " |")
    print("|---|" + "---:|" * len(KEYS))
    for b, ref in pairs:
        cells = []
        for k in KEYS:
            xs = [x for res in runs if (x := _ratio(res, b, k, ref)) is not None]
            if not xs:
                cells.append("")
                continue
            cells.append(f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f} ({len(xs)})")
        print(f"| {b} vs {ref} | " + " | ".join(cells) + " |")
    for b in NUMPY_BACKENDS:
        pairs_tf = [x for res in runs if (x := _tf_vs_numpy(res, b)) is not None]
        if not pairs_tf:
            continue
        cells = []
        for i in (0, 1):
            xs = [p[i] for p in pairs_tf]
            cells.append(f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f} ({len(xs)})")
        print(
            f"\n{b} 16 MiB, TF time / NumPy time (lower is better): one tf.function call per "
            f"all-reduce {cells[0]}; per all-reduce inside one tf.function {cells[1]}"
        )


if __name__ == "__main__":
    sys.exit(main())
