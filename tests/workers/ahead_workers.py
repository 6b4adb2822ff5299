"""Workers of tests/core/test_first_step_ahead.py: all-reduces whose first
message rides right behind the negotiation record (docs/negotiation.md)."""

from __future__ import annotations

import threading

import numpy as np

import pytfcomm


def _input(rank: int, count: int, salt: int, dtype: str = "float32") -> np.ndarray:
    """Exactly summable values that differ by rank, call and element."""
    return ((np.arange(count) * 7 + rank * 13 + salt) % 251).astype(dtype)


def _want(size: int, count: int, salt: int, dtype: str = "float32") -> np.ndarray:
    return np.sum([_input(r, count, salt, dtype) for r in range(size)], axis=0).astype(dtype)


def steady(
    rank: int, size: int, addr: str, counts: list[int], repeats: int, in_place: bool
) -> dict:
    """The steady state: one thread, the same all-reduces again and again."""
    failures: list[str] = []
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        core = comm._core
        picked = {}
        for i in range(repeats):
            for count in counts:
                x = _input(rank, count, i)
                y = comm.allreduce(x, out=x) if in_place else comm.allreduce(x)
                picked[count] = core.last_algorithm()
                if not np.array_equal(y, _want(size, count, i)):
                    failures.append(f"call {i}, {count} elements: wrong result")
        sent, taken = core.first_steps_ahead()
    return {"failures": failures, "sent": sent, "taken": taken, "picked": picked}


def mixed(rank: int, size: int, addr: str, count: int, rounds: int) -> dict:
    """Steady calls among threads, names, a mismatch and a late rank: every
    call returns what every rank asked for or raises on every rank."""
    out: dict = {"failures": [], "mismatches": 0}
    with pytfcomm.init(rank=rank, size=size, addr=addr, timeout=60) as comm:
        core = comm._core
        for i in range(rounds):
            # 1. Alone in its round (first messages go ahead).
            y = comm.allreduce(_input(rank, count, i))
            if not np.array_equal(y, _want(size, count, i)):
                out["failures"].append(f"{i}: steady call wrong")
            # 2. Two threads at once: their records hold both, or a round
            # decides one while the other is pending.
            res: dict[str, np.ndarray] = {}

            def call(name: str, salt: int, into: dict[str, np.ndarray] = res) -> None:
                into[name] = comm.allreduce(_input(rank, count, salt), name=name)

            ts = [threading.Thread(target=call, args=(f"t{j}", 100 + j + i)) for j in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)
            for j in range(2):
                if not np.array_equal(res.get(f"t{j}"), _want(size, count, 100 + j + i)):
                    out["failures"].append(f"{i}: thread {j} wrong")
            # 3. A mismatch: rank 1 asks for one element fewer; every rank
            # raises, the communicator stays usable.
            n = count - 1 if rank == 1 else count
            try:
                comm.allreduce(_input(rank, n, i), name="odd")
                out["failures"].append(f"{i}: the mismatch did not raise")
            except pytfcomm.MismatchError:
                out["mismatches"] += 1
            # 4. Rank 1 asks for another algorithm: a mismatch too, though
            # every rank sent the same first message ahead.
            try:
                comm.allreduce(
                    _input(rank, count, i),
                    name="alg",
                    algorithm="ring" if rank == 1 else "auto",
                )
                out["failures"].append(f"{i}: the algorithm mismatch did not raise")
            except pytfcomm.MismatchError:
                out["mismatches"] += 1
            # 5. Rank 0 comes late: the others' records go first, alone
            # (first messages ahead), and rank 0's round is another one.
            if rank == 0:
                threading.Event().wait(0.05)
            y = comm.allreduce(_input(rank, count, 200 + i))
            if not np.array_equal(y, _want(size, count, 200 + i)):
                out["failures"].append(f"{i}: late call wrong")
        out["sent"], out["taken"] = core.first_steps_ahead()
    return out
