"""Horovod dtypes pytfcomm's core has no code for (int16, uint16, uint32, uint64,
complex64), through pytfcomm.horovod.tensorflow; run by tests/horovod/test_horovod_tf.py."""

from __future__ import annotations

import os

import numpy as np
from horovod_workers import _run

# Bit patterns that a float16 round trip would change if the bits were not moved
# as they are (NaN payloads, -0, subnormals), and the extremes of each type.
PATTERNS = {
    "int16": [-32768, -1, 0, 1, 32767, 0x7E01 - 65536 + 65536 // 2],
    "uint16": [0, 1, 0x7C01, 0x7E00, 0x8000, 0xFFFF],
    "uint32": [0, 1, 2**31, 2**32 - 1, 0x7FC00001, 12345],
    "uint64": [0, 1, 2**63, 2**64 - 1, 0x7FF8000000000001, 99],
    "complex64": [1 + 2j, -0.0 - 1j, 3.5 + 0j, 0 + 0j, 1e-40 + 1e38j, -2 - 2j],
}


def dtypes(rank: int, size: int, addr: str, mode: str) -> dict:
    os.environ.update(PYTFCOMM_RANK=str(rank), PYTFCOMM_SIZE=str(size), PYTFCOMM_ADDR=addr)
    import tensorflow as tf

    import pytfcomm.horovod.tensorflow as hvd

    hvd.init()
    out: dict = {}
    for name, values in PATTERNS.items():
        base = np.array(values, dtype=name)
        mine = np.tile(base, rank + 1).reshape(rank + 1, len(values))
        got = _run(mode, lambda t: hvd.allgather(t), tf.constant(mine))
        want = np.concatenate([np.tile(base, r + 1).reshape(r + 1, -1) for r in range(size)])
        out[f"gather_{name}"] = got.dtype.name == name and got.numpy().tobytes() == want.tobytes()
        got = _run(mode, lambda t: hvd.broadcast(t, size - 1), tf.constant(base))
        out[f"bcast_{name}"] = got.numpy().tobytes() == base.tobytes()
        splits = tf.constant([1] * size)
        send = np.stack([base] * size)
        got, _ = hvd.alltoall(tf.constant(send), splits=splits)
        out[f"alltoall_{name}"] = got.numpy().tobytes() == np.stack([base] * size).tobytes()
    for name in ("int16", "uint16", "uint32"):
        info = np.iinfo(name)
        x = np.array([info.max, info.min, 3], dtype=name)
        got = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum), tf.constant(x))
        want = (x.astype(np.int64) * size).astype(name)  # modulo 2**bits, as the type does
        out[f"sum_{name}"] = got.dtype.name == name and got.numpy().tolist() == want.tolist()
        y = np.array([100, 7, 3], dtype=name)
        got = _run(mode, lambda t: hvd.allreduce(t, op=hvd.Max), tf.constant(y - rank))
        out[f"max_{name}"] = got.numpy().tolist() == y.tolist()
    hvd.shutdown()
    return out
