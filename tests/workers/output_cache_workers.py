"""Workers for test_output_cache.py: results of collectives called without ``out=``."""

from __future__ import annotations

import numpy as np
import reference as ref

import pytfcomm


def _inputs(rank: int, count: int, case: int) -> np.ndarray:
    """Integer-valued float32 (sums exact in any order), different per rank and case."""
    rng = np.random.default_rng(1000 * rank + case)
    return rng.integers(-1000, 1000, count).astype(np.float32)


def results_without_out(rank: int, size: int, addr: str, counts: list[int]) -> dict:
    """Every collective that allocates its result, called without ``out=``, results
    kept alive together and checked only after the last call (a buffer handed out
    twice would show as a wrong earlier result). Then all are freed and the same calls
    run again: their results must be right in buffers that were used before."""
    failures: list[str] = []
    digests: dict[str, str] = {}
    with pytfcomm.init(rank=rank, size=size, addr=addr) as comm:
        for rerun in range(2):
            held: list[tuple[str, np.ndarray, np.ndarray]] = []
            case = 0
            for count in counts:
                count -= count % size  # reduce_scatter needs a multiple of the ranks
                xs = [_inputs(r, count, case) for r in range(size)]
                total = np.sum(xs, axis=0, dtype=np.float32)
                mine = xs[rank]
                held.append((f"allreduce/{count}", comm.allreduce(mine), total))
                held.append((f"allreduce-full/{count}", comm.allreduce(mine, timeout=60.0), total))
                a, b = comm.allreduce_many([mine, mine[::-1].copy()])
                held.append((f"allreduce_many[0]/{count}", a, total))
                held.append((f"allreduce_many[1]/{count}", b, total[::-1]))
                handle = comm.allreduce_async(mine)
                held.append((f"allreduce_async/{count}", handle.wait(), total))
                held.append((f"allgather/{count}", comm.allgather(mine), np.concatenate(xs)))
                part = count // size
                held.append(
                    (
                        f"reduce_scatter/{count}",
                        comm.reduce_scatter(mine),
                        total[rank * part : (rank + 1) * part],
                    )
                )
                # Unequal counts: the core allocates the result once it knows the sum.
                ys = [_inputs(r, count + 4099 * r, case) for r in range(size)]
                held.append(
                    (f"allgather-uneven/{count}", comm.allgather(ys[rank]), np.concatenate(ys))
                )
                # alltoall: rank r sends splits[r][j] elements to rank j (unequal per pair).
                splits = [[part + 17 * (r + j) for j in range(size)] for r in range(size)]
                sent = [_inputs(r, sum(splits[r]), case + 7) for r in range(size)]
                pieces = [np.split(sent[r], np.cumsum(splits[r])[:-1]) for r in range(size)]
                got, received = comm.alltoall(sent[rank], splits[rank])
                want = np.concatenate([pieces[r][rank] for r in range(size)])
                held.append((f"alltoall/{count}", got, want))
                if received.tolist() != [splits[r][rank] for r in range(size)]:
                    failures.append(f"run {rerun} alltoall/{count}: counts {received.tolist()}")
                case += 1
            for key, got, want in held:
                if got.shape != want.shape or not np.array_equal(got, want):
                    bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else -1
                    failures.append(f"run {rerun} {key}: {bad} elements wrong (shape {got.shape})")
                if not (got.flags.c_contiguous and got.flags.writeable):
                    failures.append(f"run {rerun} {key}: not a writable C-contiguous array")
                if not key.startswith(("reduce_scatter", "alltoall")):  # each rank's own
                    digests[f"{rerun}/{key}"] = ref.digest(got)
            arrays = [got for _, got, _ in held if got.size]
            for i, x in enumerate(arrays):
                for y in arrays[i + 1 :]:
                    if np.shares_memory(x, y):
                        failures.append(f"run {rerun}: two live results share memory")
            del held, arrays
    return {"failures": failures, "digests": digests}
