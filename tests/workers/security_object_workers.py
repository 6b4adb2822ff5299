"""Rank functions for tests/security/test_security_objects.py and test_security_elastic_state.py:
pickled objects and hvd.elastic state files an attacker altered or planted.

Each returns what a user would check: the objects received, or the error raised.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from horovod_workers import _init


def _call(fn: Any) -> dict:
    """``fn()``'s outcome: {"error": "TypeName: message"} or {"value": what it returned}."""
    try:
        value = fn()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"value": repr(value)[:200]}


def tampered_broadcast(rank: int, size: int, addr: str, evil: bytes) -> dict:
    """Rank 0 broadcasts objects; on the way, its payloads are altered: the first
    call's pickle is overwritten by ``evil``, the second call's payload is replaced
    by the recording of an earlier call (a replay). Then an honest call."""
    hvd = _init(rank, size, addr)
    from pytfcomm.horovod.tensorflow.mpi_ops import _comm

    comm = _comm(None)
    send = comm.broadcast
    recorded: list[np.ndarray] = []
    mode = {"now": ""}

    def on_the_wire(x: np.ndarray, root: int = 0, **kw: Any) -> np.ndarray:
        # the payload is the uint8 broadcast (the first carries its length, int64)
        if rank == 0 and x.dtype == np.uint8 and x.size >= len(evil):
            if mode["now"] == "record":
                recorded.append(x.copy())
            elif mode["now"] == "inject":
                x = x.copy()
                x[: len(evil)] = np.frombuffer(evil, np.uint8)
            elif mode["now"] == "replay":
                x = recorded[0].copy()
        return send(x, root=root, **kw)

    comm.broadcast = on_the_wire  # type: ignore[method-assign]
    pad = "x" * 2 * len(evil)  # same pickled size in every call: the replay fits
    out: dict = {}
    mode["now"] = "record"
    out["first"] = hvd.broadcast_object({"step": 1, "pad": pad})["step"]
    mode["now"] = "inject"
    out["injected"] = _call(lambda: hvd.broadcast_object({"step": 2, "pad": pad}))
    mode["now"] = "replay"
    out["replayed"] = _call(lambda: hvd.broadcast_object({"step": 3, "pad": pad})["step"])
    mode["now"] = ""
    out["honest"] = hvd.broadcast_object({"step": 4, "pad": pad})["step"]
    return out


def tampered_allgather(rank: int, size: int, addr: str, evil: bytes) -> dict:
    """Every rank all-gathers an object; rank 1's payload has ``evil`` written over
    its pickle on the way. Then an honest call."""
    hvd = _init(rank, size, addr)
    from pytfcomm.horovod.tensorflow.mpi_ops import _comm

    comm = _comm(None)
    send = comm.allgatherv
    inject = {"on": True}

    def on_the_wire(x: np.ndarray, **kw: Any) -> np.ndarray:
        if rank == 1 and inject["on"] and x.dtype == np.uint8 and x.size >= len(evil):
            x = x.copy()
            x[: len(evil)] = np.frombuffer(evil, np.uint8)
        return send(x, **kw)

    comm.allgatherv = on_the_wire  # type: ignore[method-assign]
    pad = "x" * 2 * len(evil)
    out = {"injected": _call(lambda: hvd.allgather_object({"rank": rank, "pad": pad}))}
    inject["on"] = False
    out["honest"] = [o["rank"] for o in hvd.allgather_object({"rank": rank, "pad": pad})]
    return out


def elastic_resume(rank: int, size: int, addr: str) -> Any:
    """A restarted job (PYTFCOMM_RESTART_COUNT=1) resumes an ObjectState from
    PYTFCOMM_ELASTIC_DIR; returns the step it resumed at."""
    hvd = _init(rank, size, addr)
    state = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, step=0)

    @hvd.elastic.run
    def train(state: Any) -> int:
        return int(state.step)

    return train(state)


def elastic_commit(rank: int, size: int, addr: str, step: int) -> Any:
    """Rank 0 commits an ObjectState at ``step`` into PYTFCOMM_ELASTIC_DIR."""
    hvd = _init(rank, size, addr)
    state = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, step=0)

    @hvd.elastic.run
    def train(state: Any) -> int:
        state.step = step
        state.commit()
        return int(state.step)

    return train(state)
