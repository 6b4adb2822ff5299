"""An outsider's probe of a running job's ports (run by tests/tf/test_tf_exposure.py).

    python exposure_probe.py OUT.jsonl FILE HOST:PORT [HOST:PORT ...]

For every target, in its own thread: a plain TCP connect; if that succeeds,
a TensorFlow gRPC client (``tf.compat.v1.Session("grpc://HOST:PORT")``)
lists the peer's devices, computes ``tf.constant(1.) + 1`` and reads FILE
with ``tf.io.read_file`` there -- what anyone could do to a worker whose TF
server is reachable. One JSON line per target goes to OUT.jsonl as soon as
it is known: ``connect`` ("ok" or the error) and, after a connect, ``ran``
(True when the peer ran the ops) with what came back or the error. Targets
that never answer get no line; the test bounds the whole run.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_lock = threading.Lock()


def _report(out: str, record: dict) -> None:
    with _lock, open(out, "a") as f:
        f.write(json.dumps(record) + "\n")


def _tf_client(target: str, path: str) -> dict:
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=8000)
    t0 = time.monotonic()
    with tf.Graph().as_default():
        one = tf.constant(1.0) + 1.0
        data = tf.io.read_file(path)
        with tf.compat.v1.Session(f"grpc://{target}", config=config) as sess:
            devices = [d.name for d in sess.list_devices()]
            got_one, got_data = sess.run([one, data])
    return {
        "ran": True,
        "devices": devices,
        "one_plus_one": float(got_one),
        "read": got_data.decode(errors="replace"),
        "seconds": time.monotonic() - t0,
    }


def _probe(out: str, target: str, path: str) -> None:
    host, port = target.rsplit(":", 1)
    record: dict = {"target": target}
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
            record["connect"] = "ok"
    except OSError as exc:
        record["connect"] = f"{type(exc).__name__}: {exc}"
        _report(out, record)
        return
    try:
        record.update(_tf_client(target, path))
    except Exception as exc:  # any refusal is the answer we hope for
        record.update(ran=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    _report(out, record)


def main() -> None:
    out, path, *targets = sys.argv[1:]
    threads = [threading.Thread(target=_probe, args=(out, t, path), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.stdout.flush()
    os._exit(0)  # do not wait for gRPC's threads


if __name__ == "__main__":
    main()
