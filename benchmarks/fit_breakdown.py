"""Where a Keras 3 ``fit`` step's time goes: inside pytfcomm's collectives or around them.

    python -m benchmarks.fit_breakdown [--np 2] [--repeat 3] [--json out.json]

Runs ``tf_multiworker``'s ``fit`` (same model, data, global batch, worker start) on
``pytfcomm-mwms`` (``pytfcomm.MultiWorkerMirroredStrategy``) and ``pytfcomm-horovod``
(``DistributedOptimizer``, no strategy) with each rank's timeline on (docs/timeline.md)
during the timed ``fit``, and a callback stamping each step's start and end on the
timeline's clock (``CLOCK_MONOTONIC``). Per step, leaving out the first of each epoch:

* ``step``: the step's wall time;
* ``collectives``: how many pytfcomm collectives ran in it, and their bytes;
* ``inside``: time the step spent in pytfcomm's hands: the union of its collectives'
  spans, each from the TF op handing it to pytfcomm's queue to its return; of that,
  ``queued`` (summed: waiting behind the collective before it) and ``waiting``
  (negotiation: waiting for the other ranks to ask for the same collective, i.e. time
  another rank spent somewhere else);
* ``outside``: the rest, TF's and Keras's own work: the step's computation, the
  strategy's or the Horovod path's machinery, and the TF side of pytfcomm's ops (the
  kernel's start before the hand-off, the ``done()`` after the return).

Each backend's row gives the medians over its steps and ranks (so its parts need not add
up exactly). The difference between the two rows' ``step`` splits into the difference
inside pytfcomm and outside it, which is what "the rest is TF's strategy machinery, not
ours" needs measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._launch import BIND_CHOICES, bindings
from benchmarks.tf_multiworker import LOCAL_BATCH, _mlp, _run_backend

BACKENDS = ("pytfcomm-mwms", "pytfcomm-horovod")
# Controls, no pytfcomm and no communication: each worker trains alone on its own 128
# examples per step (pinned, started and timed as the others), once under TF's
# MirroredStrategy on its one CPU, once without a strategy: what TF's strategy machinery
# costs a step by itself.
CONTROLS = ("tf-mirrored-alone", "keras-alone")
STEPS = 20  # per epoch, as tf_multiworker's fit
MS = ("step", "inside", "queued", "waiting", "outside")  # µs, printed in ms
FIELDS = ("step", "inside", "queued", "waiting", "outside", "collectives", "bytes")


def _stamps(keras: Any) -> Any:  # a class made where keras is imported
    class Stamps(keras.callbacks.Callback):
        """Each step's (start, end) in µs of CLOCK_MONOTONIC, the timeline's clock."""

        def __init__(self) -> None:
            super().__init__()
            self.steps: list[tuple[float, float]] = []
            self._t = 0.0

        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            self._t = time.monotonic() * 1e6 if batch > 0 else -1.0

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            if self._t >= 0:
                self.steps.append((self._t, time.monotonic() * 1e6))

    return Stamps()


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length covered by the (start, end) spans."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _queued(e: dict) -> float:
    """µs a TF op's collective waited in pytfcomm's queue before it started (0 for
    phases and NumPy calls)."""
    return float(e.get("args", {}).get("queue_us", 0.0))


def _call(e: dict) -> str:
    """One collective as the table's footnote names it: kind, bytes, who asked."""
    a = e.get("args", {})
    who = str(a.get("label", "")).split(" #")[0]  # the same caller in every step
    return f"{e.get('name')} {int(a.get('bytes', 0)):,} B ({a.get('algorithm', '?')}; {who})"


def breakdown(steps: list[tuple[float, float]], events: list[dict]) -> list[dict]:
    """Per step: its time and what of it was spent inside pytfcomm's collectives
    (``events``: one rank's timeline; a collective counts for the step it started in,
    from its hand-off to pytfcomm's queue to its return, clipped to the step), all in µs."""
    colls = [e for e in events if e.get("cat") == "collective"]
    waits = [e for e in events if e.get("cat") == "phase" and e.get("name") == "negotiate"]
    out = []
    for t0, t1 in steps:

        def clip(es: list[dict], t0: float = t0, t1: float = t1) -> list[tuple[float, float]]:
            return [
                (max(t0, e["ts"] - _queued(e)), min(e["ts"] + e["dur"], t1))
                for e in es
                if t0 <= e["ts"] < t1
            ]

        mine = [e for e in colls if t0 <= e["ts"] < t1]
        inside = _union(clip(colls))
        out.append(
            {
                "step": t1 - t0,
                "inside": inside,
                "waiting": _union(clip(waits)),
                "outside": (t1 - t0) - inside,
                "queued": sum(_queued(e) for e in mine),
                "collectives": len(mine),
                "bytes": sum(int(e.get("args", {}).get("bytes", 0)) for e in mine),
                "calls": [_call(e) for e in mine],
                "call_us": [(_queued(e), e["dur"]) for e in mine],
            }
        )
    return out


def _worker(backend: str, rank: int, size: int, ports: list[int], out: Path) -> dict:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if backend == "pytfcomm-mwms":
        workers = [f"127.0.0.1:{p}" for p in ports[1 : size + 1]]
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
    os.environ.update(
        PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=f"127.0.0.1:{ports[0]}"
    )
    import keras
    import numpy as np
    import tensorflow as tf

    import pytfcomm
    from pytfcomm.timeline import load_events

    rng = np.random.default_rng(rank)
    gb = LOCAL_BATCH * (1 if backend in CONTROLS else size)
    x = rng.random((gb * STEPS, 64), np.float32)
    y = rng.integers(0, 10, len(x)).astype(np.int32)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    comm, strategy = None, None
    if backend == "tf-mirrored-alone":
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    elif backend == "pytfcomm-mwms":
        strategy = pytfcomm.MultiWorkerMirroredStrategy()
        comm = strategy.communicator
    elif backend == "pytfcomm-horovod":
        comm = pytfcomm.init()
    if strategy is not None:  # the global batch, sharded by the strategy
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(gb)
        with strategy.scope():
            model = _mlp(keras)
            model.compile(keras.optimizers.SGD(0.01), loss)

        def fit(**kw: Any) -> None:
            model.fit(ds, verbose=0, **kw)
    else:  # each worker its own share (all of it, alone), its own batch
        opt = keras.optimizers.SGD(0.01)
        if comm is not None:
            opt = pytfcomm.keras.DistributedOptimizer(opt)
        model = _mlp(keras)
        model.compile(opt, loss)
        share = LOCAL_BATCH * STEPS
        mine = slice(rank * share, (rank + 1) * share) if comm is not None else slice(None)

        def fit(**kw: Any) -> None:
            model.fit(x[mine], y[mine], batch_size=LOCAL_BATCH, verbose=0, **kw)

    fit(epochs=1)  # trace and warm up
    stamps = _stamps(keras)
    if comm is None:  # a control: no pytfcomm in it
        fit(epochs=2, callbacks=[stamps])
        return {"rank": rank, "steps": breakdown(stamps.steps, [])}
    path = comm.start_timeline(str(out.parent / "trace-%r.json"))
    fit(epochs=2, callbacks=[stamps])
    comm.stop_timeline()
    events = load_events(path)
    return {"rank": rank, "steps": breakdown(stamps.steps, events)}


def _medians(steps: list[dict]) -> dict:
    return {k: statistics.median(s[k] for s in steps) for k in FIELDS} | {"n": len(steps)}


def _row(ranks: list[dict]) -> dict:
    """Medians over every step of every rank, and each rank's own (with its collectives)."""
    per_rank = [_medians(r["steps"]) | {"calls": _calls(r["steps"])} for r in ranks]
    return _medians([s for r in ranks for s in r["steps"]]) | {"ranks": per_rank}


def _calls(steps: list[dict]) -> list[str]:
    """One rank's collectives of a step, each with its median µs queued and running
    over the steps that ran the same collectives (the first step's list)."""
    same = [s for s in steps if s["calls"] == steps[0]["calls"]]
    out = []
    for i, call in enumerate(steps[0]["calls"]):
        q = statistics.median(s["call_us"][i][0] for s in same)
        d = statistics.median(s["call_us"][i][1] for s in same)
        out.append(f"{call}: queued {q:.0f} us, ran {d:.0f} us")
    return out


def _print(rows: dict[str, dict], title: str) -> None:
    print(f"\n{title}\n")
    print(
        "| backend | step (ms) | inside pytfcomm (ms) | of which queued (ms) "
        "| of which waiting for the peers (ms) | outside pytfcomm (ms) | collectives per step "
        "| bytes per step | steps |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b, r in rows.items():
        if "error" in r:
            print(f"| {b} | failed: {r['error']} |" + " |" * 7)
            continue
        for name, m in [(b, r)] + [(f"{b}, rank {i}", x) for i, x in enumerate(r["ranks"])]:
            cells = [f"{m[k] / 1e3:.2f}" for k in MS]
            cells += [f"{m['collectives']:.0f}", f"{m['bytes']:,.0f}", str(m["n"])]
            print(f"| {name} | " + " | ".join(cells) + " |")
    for b, r in rows.items():
        for i, m in enumerate(r.get("ranks", [])):
            if not m["calls"]:
                continue  # a control: no pytfcomm
            print(f"\n{b}, rank {i}'s collectives in a step (medians over steps):")
            print("\n".join(f"- {c}" for c in m["calls"]))
    a, b = (rows.get(k, {}) for k in BACKENDS)
    if "step" in a and "step" in b:
        d = {k: (a[k] - b[k]) / 1e3 for k in ("step", "inside", "outside")}
        print(
            f"\n{BACKENDS[0]} - {BACKENDS[1]}, per step: {d['step']:+.2f} ms, of which inside "
            f"pytfcomm {d['inside']:+.2f} ms and outside {d['outside']:+.2f} ms "
            f"(steps/s ratio {b['step'] / a['step']:.2f})"
        )
    a, b = (rows.get(k, {}) for k in CONTROLS)
    if "step" in a and "step" in b:
        print(
            f"{CONTROLS[0]} - {CONTROLS[1]} (TF's strategy alone, no pytfcomm), per step: "
            f"{(a['step'] - b['step']) / 1e3:+.2f} ms (steps/s ratio {b['step'] / a['step']:.2f})"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="runs of both backends, in turn")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--bind-to", choices=BIND_CHOICES, default="core")
    ap.add_argument("--json", help="write every run's rows here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    ap.add_argument("--iters", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        ports = [int(p) for p in args.ports.split(",")]
        res = _worker(args.worker, args.rank, args.np, ports, Path(args.out))
        Path(args.out).write_text(json.dumps(res))
        return 0
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    cpus = bindings(args.bind_to, args.np)
    runs = []
    for i in range(args.repeat):
        rows: dict[str, dict] = {}
        for b in BACKENDS + CONTROLS:
            print(f"[fit_breakdown] run {i + 1}: {b} ...", file=sys.stderr, flush=True)
            got = _run_backend(
                b, args.np, 0, args.timeout, cpus=cpus, module="benchmarks.fit_breakdown"
            )
            rows[b] = {"error": got.splitlines()[0]} if isinstance(got, str) else _row(got)
        runs.append(rows)
        title = f"run {i + 1} of {args.repeat}: Keras fit, {args.np} workers, medians per step"
        _print(rows, title)
    if args.json:
        Path(args.json).write_text(json.dumps({"np": args.np, "runs": runs}, indent=1))
    return 0 if all("error" not in r for rows in runs for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
